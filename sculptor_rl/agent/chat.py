"""Chat rendering on token ids with the model's own chat template: the prompt each rollout step sends to the engine.

Each step's prompt is the template's rendering of the conversation so far — structured messages: assistant turns
carry `tool_calls` (ids, names, arguments) and reasoning, tool turns `tool_call_id` — as a chat server would
render it. Where that rendering extends the previous step's prompt + completion, the prompt is those exact ids
followed by the new text's ids, so the completion stays the ids the engine generated; where it does not (an ACM
tool rewrote the context, or the template re-renders history: Qwen3 drops an empty think block from earlier turns,
gpt-oss their analysis), the prompt is the rendering tokenized afresh and Algorithm 1 starts a new sample there
(design, "Any model"). `chat_template` (a file or a named variant such as `qwen3_append_only`) and
`chat_template_kwargs` (e.g. `enable_thinking`) replace or parametrise the model's own template; the tool-call
parser is the template's (`parser: auto`) or named.

The named variants (`TEMPLATE_VARIANTS`, in `templates/`) are append-only versions of official templates that
re-render history: each keeps the official text where it already extends the last prompt + completion, and changes
only what re-renders (every change is commented at the top of its file):
- `qwen3_append_only`: every assistant turn keeps its think block, empty or not (the official drops it before the
  last user query, and after it from every turn but the last one whose think block is empty);
- `mistral_nemo_append_only`: the system message and the tools stay with the first user message (the official moves
  the tools before the last user message and shows the system message only while a user message ends the
  conversation); text written before `[TOOL_CALLS]` is kept;
- `deepseek_v3_append_only`, `deepseek_r1_append_only`: each call turn one closed block, after tool outputs closed
  first (as DeepSeek's V3-0324 template does; the official renders a call after tool outputs inside them, drops the
  calls of a turn with text, and closes a call block only after a second call); R1's keeps the reasoning;
- `deepseek_v3_1_append_only`: in thinking mode a turn keeps its `<think>` reasoning (the official renders
  `</think>` in its place, where the generation prompt had `<think>`);
- `hermes3_append_only`: a tool response is closed as the generation prompt after it showed it (the official adds a
  newline before `<|im_end|>` once a message follows, so a step after a read-only call re-renders);
- `qwen3_5_append_only`: every assistant turn keeps its think block (the official drops it before the last user
  query, so a second query re-renders every earlier turn);
- `mistral_small_3_2_append_only`: the tools stay with the first user message (the official moves them before the
  last one); text written before `[TOOL_CALLS]` is kept;
- `gpt_oss_append_only`: every turn keeps its analysis (`thinking`, else `reasoning_content`) and a final answer its
  `<|return|>` (the official drops earlier analysis and ends earlier answers in `<|end|>`, by harmony's design);
- `glm4_6_append_only`: every assistant turn keeps its reasoning (the official renders `<think></think>` for turns
  before the last user message).
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from importlib import resources
from pathlib import Path

from ..toolcalls import PARSERS, make_parser, parser_for_template

SETTINGS_FILE = "sculptor_chat.json"  # a checkpoint's chat settings beside its tokenizer (`ChatFormat.save_settings`)

__all__ = ["ChatFormat", "TEMPLATE_VARIANTS", "load_template"]

# Append-only variants of official templates that re-render history (shipped in sculptor_rl/agent/templates/)
TEMPLATE_VARIANTS = ("qwen3_append_only", "mistral_nemo_append_only", "deepseek_v3_append_only",
                     "deepseek_r1_append_only", "deepseek_v3_1_append_only", "hermes3_append_only",
                     "qwen3_5_append_only", "mistral_small_3_2_append_only", "gpt_oss_append_only",
                     "glm4_6_append_only")
_NO_CALLS = ("this chat template renders no tool calls of an assistant turn (Phi-4-mini's and SmolLM3's official "
             "ones render none)")
_PROBE_TOOL = {"type": "function", "function": {"name": "probe_tool_zq", "description": "probe",
                                                "parameters": {"type": "object", "properties": {}}}}


def load_template(spec: str) -> str:
    """A chat template from a named variant (`TEMPLATE_VARIANTS`) or a file's path."""
    if spec in TEMPLATE_VARIANTS:
        return resources.files(__package__).joinpath(f"templates/{spec}.jinja").read_text()
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"chat_template {spec!r} is neither a file nor a named variant "
                         f"({', '.join(TEMPLATE_VARIANTS)})")
    return path.read_text()


class ChatFormat:
    """Token-level rendering of an agent conversation for one tokenizer, its chat template and tool-call format."""

    def __init__(self, tokenizer, extra_stop_ids: list[int] = (), *, chat_template: str | None = None,
                 chat_template_kwargs: dict | None = None, parser: str = "auto", name: str = ""):
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token: cannot tell where a completion ends")
        self.template = load_template(chat_template) if chat_template else tokenizer.chat_template
        if not self.template:
            raise ValueError("the tokenizer has no chat template; pass a chat model or set `chat_template`")
        self.tokenizer, self.name = tokenizer, name or getattr(tokenizer, "name_or_path", "")
        self.kwargs = dict(chat_template_kwargs or {})
        self.eos_id = tokenizer.eos_token_id
        self.eos = tokenizer.convert_ids_to_tokens(self.eos_id)
        self._tools_via = self._tool_delivery()
        self._call_shape = self._call_dialect()
        if parser == "auto" and self._call_shape is None:
            try:
                parser = parser_for_template(self.template)
            except ValueError:
                raise ValueError(f"{_NO_CALLS}, so its tool-call format is unknown: set `parser` to the format the "
                                 f"model writes calls in ({', '.join(PARSERS)}; its completions are then kept as "
                                 "the turn's text), and for structured turns (the scripted teachers, a chat "
                                 "endpoint's calls) also `chat_template` to a template file that renders "
                                 "assistant `tool_calls` in that format") from None
        self.parser = make_parser(parser_for_template(self.template) if parser == "auto" else parser)
        self.parser_name = parser  # as asked ("auto": the template's), what a checkpoint saves
        # ids that end an assistant turn (some models list several, e.g. <|im_end|> and <|endoftext|>), and the token
        # the template itself closes a turn with, which a checkpoint's eos may not be (a GGUF converted by some
        # transformers versions says <|endoftext|> where ChatML turns end in <|im_end|>)
        turn_end = self._turn_end()
        self.stop_ids = list(dict.fromkeys([self.eos_id, *extra_stop_ids, *([] if turn_end is None else [turn_end])]))
        self.stop_texts = tokenizer.convert_ids_to_tokens(self.stop_ids)
        self.end_id = self.eos_id if turn_end is None else turn_end  # closes a turn known only as text

    @classmethod
    def from_pretrained(cls, model: str, chat_template: str | None = None, chat_template_kwargs: dict | None = None,
                        parser: str = "auto") -> "ChatFormat":
        """The format of `model`; a checkpoint's saved settings (`save_settings`: the template kwargs and parser it
        was trained with) apply where the caller gives none (the template itself is the tokenizer's)."""
        from transformers import AutoTokenizer, GenerationConfig

        saved = Path(model) / SETTINGS_FILE
        if saved.is_file():
            settings = json.loads(saved.read_text())
            chat_template_kwargs = settings.get("chat_template_kwargs") if chat_template_kwargs is None else \
                chat_template_kwargs
            parser = settings.get("parser", "auto") if parser == "auto" else parser

        try:
            tokenizer = AutoTokenizer.from_pretrained(model)
        except (OSError, ValueError) as e:  # not a model, no tokenizer files, hub unreachable
            raise ValueError(f"model {model}: cannot load its tokenizer ({' '.join(str(e).split())})") from None
        try:
            eos = GenerationConfig.from_pretrained(model).eos_token_id
        except OSError:  # no generation_config.json
            eos = None
        try:
            return cls(tokenizer, [eos] if isinstance(eos, int) else (eos or []), chat_template=chat_template,
                       chat_template_kwargs=chat_template_kwargs, parser=parser, name=str(model))
        except ValueError as e:  # no chat template, no eos token, unknown parser
            raise ValueError(f"model {model}: {e}") from None

    def save_settings(self, folder: str | Path) -> None:
        """Write the template kwargs and the parser beside a checkpoint's tokenizer (which holds the template), so
        that rl, eval and serve read the checkpoint in the format it was trained in without being told."""
        Path(folder, SETTINGS_FILE).write_text(json.dumps({"chat_template_kwargs": self.kwargs or None,
                                                           "parser": self.parser_name}, indent=1) + "\n")

    @classmethod
    def of(cls, model: str, cfg) -> "ChatFormat":
        """The format a config names (`chat_template`, `chat_template_kwargs`, `parser`) for `model`."""
        kwargs = getattr(cfg, "chat_template_kwargs", None)
        if isinstance(kwargs, str):  # TRL's GRPOConfig takes it as JSON text on a command line
            kwargs = json.loads(kwargs)
        return cls.from_pretrained(model, getattr(cfg, "chat_template", None), kwargs, getattr(cfg, "parser", "auto"))

    # ---- text ---------------------------------------------------------------------------------------------------

    def _apply(self, messages: list[dict], add_generation_prompt: bool, **kwargs) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                  chat_template=self.template, **{**self.kwargs, **kwargs})

    def _tool_delivery(self) -> str:
        """How this template takes tool schemas: `tools=` (most), `xml_tools=` (SmolLM3), or not at all (DeepSeek
        V3/R1's official templates), in which case they go into the system message (`_tools_in_system`)."""
        probe = [{"role": "user", "content": "hi"}]
        for how in ("tools", "xml_tools"):
            try:
                if _PROBE_TOOL["function"]["name"] in self._apply(probe, True, **{how: [_PROBE_TOOL]}):
                    return how
            except Exception:  # a template that rejects the probe takes tools no such way
                pass
        return "system"

    def _call_dialect(self) -> tuple[bool, bool] | None:
        """How this template wants an assistant call turn: (arguments as JSON text?, content None when empty?).
        Most take dict arguments and "" (the loop's shape); DeepSeek's want JSON text and None (with "" they drop
        the call); None where no shape renders a call at all (Phi-4-mini's, SmolLM3's edited one)."""
        for as_text, none in ((False, False), (True, True), (True, False), (False, True)):
            probe = [{"role": "user", "content": "hi"}, _call_turn({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call00000", "type": "function",
                 "function": {"name": _PROBE_TOOL["function"]["name"], "arguments": {"q": "zq_value"}}}]},
                (as_text, none))]
            tools = {self._tools_via: [_PROBE_TOOL]} if self._tools_via != "system" else {}  # Hermes 3 needs them
            try:
                shown = self._apply(probe, False, **tools)
            except Exception:  # jinja2 raises many kinds, a template's raise_exception among them
                continue
            if _PROBE_TOOL["function"]["name"] in shown and "zq_value" in shown:
                return as_text, none
        return None

    @property
    def renders_calls(self) -> bool:
        """Does the template render an assistant turn's structured calls? Where not, the loop keeps the model's
        own text as the turn's content (its calls included), and the scripted teachers cannot be rendered."""
        return self._call_shape is not None

    def _turn_end(self) -> int | None:
        """The special token right after an assistant turn's text in this template's rendering, if any."""
        tools = {self._tools_via: [_PROBE_TOOL]} if self._tools_via != "system" else {}
        try:
            shown = self._apply([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "zq_probe"}],
                                False, **tools)
        except Exception:  # jinja2 raises many kinds, a template's raise_exception among them
            return None
        after = shown.partition("zq_probe")[2]
        specials = sorted((t.content for t in self.tokenizer.added_tokens_decoder.values() if t.special), key=len,
                          reverse=True)
        end = next((s for s in specials if after.startswith(s)), None)
        return None if end is None else self.tokenizer.convert_tokens_to_ids(end)

    def text(self, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None = None) -> str:
        if self._call_shape is not None and self._call_shape != (False, False):
            messages = [_call_turn(m, self._call_shape) if m.get("tool_calls") else m for m in messages]
        if not tools:
            return self._apply(messages, add_generation_prompt)
        if self._tools_via == "system":
            return self._apply(_tools_in_system(messages, tools, self.parser.example), add_generation_prompt)
        return self._apply(messages, add_generation_prompt, **{self._tools_via: tools})

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        """Ids as the text a template renders them as: special tokens (tool-call markers, stop tokens) kept."""
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def strip_stop(self, text: str) -> str:
        """A completion's text without its end-of-turn token."""
        for stop in self.stop_texts:
            if text.endswith(stop):
                return text[: -len(stop)]
        return text

    # ---- ids ----------------------------------------------------------------------------------------------------

    def head_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """A conversation's prompt, rendered and tokenized whole, up to the generation prompt."""
        return self.encode(self.text(messages, add_generation_prompt=True, tools=tools))

    def prompt(self, messages: list[dict], tools: list[dict] | None,
               before: tuple[list[int], str] | None = None) -> tuple[list[int], str]:
        """(ids, text) of the prompt for `messages`. `before` is the previous step's prompt + completion as (ids,
        text): where the rendering extends that text, its ids are kept and only the rest is tokenized."""
        text = self.text(messages, add_generation_prompt=True, tools=tools)
        if before is not None and text.startswith(before[1]):
            return before[0] + self.encode(text[len(before[1]):]), text
        return self.encode(text), text

    def completion_ids(self, text: str) -> list[int]:
        """Ids of an assistant turn known only as text (a text-only engine, a test's scripted policy)."""
        return self.encode(text) + [self.end_id]

    def render_completion(self, messages: list[dict], tools: list[dict] | None, message: dict) -> list[int]:
        """Ids of a structured assistant turn (a scripted teacher's, a chat endpoint's) as this model writes it:
        the template's rendering of the turn after the generation prompt, up to and including its end-of-turn
        token; so calls come out in the model's own format."""
        if message.get("tool_calls") and not self.renders_calls:
            raise ValueError(f"{_NO_CALLS}, so a structured turn's calls (a scripted teacher's, a chat endpoint's) "
                             "cannot be written in the model's format: set `chat_template` to a template file that "
                             "renders assistant `tool_calls` in the format the model writes them in, and `parser` to "
                             "that format")
        base = self.text(messages, add_generation_prompt=False, tools=tools)
        gen = self.text(messages, add_generation_prompt=True, tools=tools)
        full = self.text([*messages, message], add_generation_prompt=False, tools=tools)
        # the turn starts where `full` leaves the prompt: after the generation prompt, or inside it where the prompt
        # ends in text the turn replaces (Qwen3's non-thinking prompt ends in an empty think block); templates that
        # close a tool block only once a turn follows (DeepSeek's) render that closing in the prompt as well
        start, prompt_end = _common_prefix(gen, full), _common_prefix(base, gen)
        if start < prompt_end < len(gen) and gen[prompt_end:] in full:  # an earlier turn re-rendered (Hermes 3's):
            start = full.rindex(gen[prompt_end:]) + len(gen) - prompt_end  # the turn follows the generation prompt
        if start < prompt_end:
            raise ValueError("this chat template renders earlier text differently once an assistant turn follows "
                             "(Mistral Nemo's moves the system message; DeepSeek-V3's and R1's put a call after tool "
                             "outputs inside the outputs block), so the turn cannot be cut out of it; set "
                             "`chat_template` to an append-only one (" + ", ".join(TEMPLATE_VARIANTS) + ")")
        body = full[start:]
        ends = [(body.find(s), s) for s in self.stop_texts if s in body]
        if ends:
            at, stop = min(ends)
            return self.encode(body[: at + len(stop)])
        return self.encode(body) + [self._closing_stop(messages, message, tools, full)]

    def _closing_stop(self, messages, message, tools, full: str) -> int:
        """The stop id ending a turn the template renders without one (GLM-4.5: the next turn's role token ends
        it): the stop token the template writes right after the turn, else the eos."""
        nxt = ({"role": "tool", "content": "x", "tool_call_id": message["tool_calls"][0].get("id", "call00000")}
               if message.get("tool_calls") else {"role": "user", "content": "x"})
        after = self.text([*messages, message, nxt], add_generation_prompt=False, tools=tools)[len(full):]
        return next((i for i, s in zip(self.stop_ids, self.stop_texts) if after.startswith(s)), self.end_id)

    @cached_property
    def one_call_per_turn(self) -> bool:
        """Does this template render at most one call per assistant turn (Llama 3.x raises on two)? The scripted
        teachers then make their calls one turn at a time."""
        two = {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call0000{k}", "type": "function", "function": {"name": f"probe_tool_{k}zq", "arguments": {}}}
            for k in range(2)]}
        try:
            shown = self.text([{"role": "user", "content": "hi"}, two], add_generation_prompt=False,
                              tools=[_PROBE_TOOL])
        except Exception:  # jinja2 raises many kinds, the template's raise_exception among them (Llama 3.x)
            return True
        return "probe_tool_1zq" not in shown  # gpt-oss renders a turn's first call only

    # ---- provenance ---------------------------------------------------------------------------------------------

    @cached_property
    def provenance(self) -> dict:
        """What made the ids: the tokenizer's name and a hash of its vocabulary, the template and its kwargs.
        Samples carry it, and training refuses samples of another tokenizer."""
        h = hashlib.sha256()
        h.update(json.dumps(sorted(self.tokenizer.get_vocab().items()), ensure_ascii=False).encode())
        h.update(self.template.encode())
        h.update(json.dumps(self.kwargs, sort_keys=True).encode())
        return {"name": self.name, "hash": h.hexdigest()[:16]}


def _call_turn(message: dict, shape: tuple[bool, bool]) -> dict:
    """An assistant call turn in a template's shape (`ChatFormat._call_dialect`)."""
    as_text, none = shape
    calls = [{**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"],
                                                                         ensure_ascii=False)}}
             if as_text and not isinstance(c["function"]["arguments"], str) else c for c in message["tool_calls"]]
    return {**message, "tool_calls": calls, "content": None if none and not message["content"] else message["content"]}


def _common_prefix(a: str, b: str) -> int:
    """The length of the common prefix, by bisection on C-speed slice comparisons (renderings can be megabytes)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _tools_in_system(messages: list[dict], tools: list[dict], example: str) -> list[dict]:
    """The tool schemas and the call format in the system message, for templates that take no `tools`."""
    block = ("You can call these tools:\n<tools>\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
             + f"\n</tools>\nTo call one, write: {example}")
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{block}"}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]
