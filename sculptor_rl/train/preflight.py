"""What `sculptor-rl rl validate` checks beyond the config's own consistency, reading the model's tokenizer and
config but no weights: the chat template renders a two-step tool conversation and the loop's parser reads the
rendered calls back; `max_model_len` fits the model's context; `report_to` names installed integrations; the
precision can run on this device. A Hub id that cannot be reached here (offline, no access) is said to be not
checked, and the other checks still run."""

from __future__ import annotations

from ..agent.chat import ChatFormat
from ..models import check_context_length, resolve_model
from ..toolcalls import assistant_message

# Two tool calls with their results, the shape of every rollout; the results carry markers to find in the render.
_CALLS = [("search_context", {"query": "key 7"}, "RESULT-ONE: s1a2b3 at message 1"),
          ("get_search_detail", {"search_id": "s1a2b3"}, "RESULT-TWO: the value of key 7 is blue")]
_CHAT = [{"role": "system", "content": "You manage your context with tools."},
         {"role": "user", "content": "What is the value of key 7?"}]


def _call(k: int, name: str, arguments: dict) -> dict:
    message = assistant_message([(name, arguments)])
    message["tool_calls"][0]["id"] = f"call{k:05d}"  # as the loop fills them in
    return message


def two_step_tool_conversation() -> list[dict]:
    messages = list(_CHAT)
    for k, (name, arguments, result) in enumerate(_CALLS):
        messages += [_call(k, name, arguments),
                     {"role": "tool", "tool_call_id": f"call{k:05d}", "name": name, "content": result}]
    return messages


def check_template(fmt: ChatFormat, tools: list[dict]) -> str:
    """The template renders a two-step tool conversation (both results in it), and the format's parser reads each
    call back from the turn as the model would write it (`ChatFormat.render_completion`). ValueError naming what
    went wrong."""
    if not fmt.renders_calls:
        raise ValueError("chat template: it renders no tool calls of an assistant turn; set `chat_template` (a "
                         "template that renders them) and `parser` (the model's tool-call format)")
    try:
        text = fmt.text(two_step_tool_conversation(), add_generation_prompt=True, tools=tools)
    except Exception as e:  # a template raising (jinja2's errors, a template rejecting a role) is the finding
        raise ValueError(f"chat template: rendering a two-step tool conversation raised "
                         f"{type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
    missing = [result.split(":")[0] for _, _, result in _CALLS if result not in text]
    if missing:
        raise ValueError(f"chat template: the tool results {missing} are missing from the rendered conversation")
    history = two_step_tool_conversation()
    for k, (name, arguments, _) in enumerate(_CALLS):
        before = history[: len(_CHAT) + 2 * k]
        try:
            turn = fmt.decode(fmt.render_completion(before, tools, _call(k, name, arguments)))
        except ValueError as e:
            raise ValueError(f"chat template: {e}") from None
        calls = fmt.parser.parse(fmt.strip_stop(turn), tools).calls
        if [(c.name, c.arguments) for c in calls] != [(name, arguments)]:
            raise ValueError(f"chat template: the {fmt.parser.name} parser reads "
                             f"{[(c.name, c.arguments) for c in calls]} from the rendered call {name}({arguments})")
    return f"chat template: renders a two-step tool conversation; the {fmt.parser.name} parser reads both calls back"


def check_precision(asked_bf16: bool | None, fp16: bool, runs_bf16: bool | None) -> str:
    """The precision asked for and the one that runs here. A GPU without bf16 fails earlier, when the config is
    read (`models.train_bf16`); a CPU cannot tell what the target GPU supports."""
    import torch

    asked = "bf16" if asked_bf16 else "fp16" if fp16 else "fp32"
    runs = "bf16" if runs_bf16 else "fp16" if fp16 else "fp32"
    if torch.cuda.is_available():
        return f"precision: {asked} on {torch.cuda.get_device_name()}"
    here = "" if runs == asked else f", {runs} on this CPU (it emulates bf16)"
    return f"precision: {asked}{here}; NOT checked for a GPU (none here; bf16 needs an Ampere or newer GPU)"


def preflight(cfg, asked_bf16: bool | None, tools: list[dict]) -> tuple[list[str], list[str]]:
    """(errors, lines saying what was checked or not) for a trainer config `cfg` (its `model`, `max_model_len`,
    `report_to`, `bf16`/`fp16` and the loop's `chat_template`, `chat_template_kwargs`, `parser`)."""
    errors = []
    lines = [f"report_to: {', '.join(cfg.report_to) or 'none'} (installed)",
             check_precision(asked_bf16, cfg.fp16, cfg.bf16)]
    path = resolve_model(cfg.model)
    try:
        lines.append(check_context_length(path, cfg.max_model_len))
    except ValueError as e:
        errors.append(str(e))
    if "could not be read" in lines[-1] or ": offline: " in lines[-1]:  # a Hub id not reachable from here
        lines.append(f"chat template: NOT checked ({path} cannot be reached here)")
        return errors, lines
    try:
        lines.append(check_template(ChatFormat.of(path, cfg), tools))
    except ValueError as e:
        errors.append(str(e))
    return errors, lines
