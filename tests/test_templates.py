"""Real models' official chat templates (tests/data/templates/, provenance in PROVENANCE.md) through the agent loop.

For each family, on a tiny byte-level tokenizer carrying the family's special tokens and its real template: the
scripted teachers run pi_llm tasks in the ACM environment (rollout), Algorithm 1 cuts the rollouts into samples
(token-exact: every completion trained once, in the prompt the engine saw), the calls come out in the family's own
format and parse back with the parser `auto` picks, and one SFT step runs on a tiny random model of the family's
architecture. `test_history_table` prints what each template does to history (README, "Your own model").
"""

from __future__ import annotations

import functools

import pytest
import torch

from sculptor_rl.agent.chat import ChatFormat
from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.engines.base import Completion
from sculptor_rl.envs import make_env_factory
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.samples import build_samples
from sculptor_rl.envs.tasks import generate

from conftest import assert_trained_where_generated
from template_families import FAMILIES, load_template, template_path

# tool_format of template_families → the parser `auto` must pick
PARSER = {"hermes": "hermes", "llama3_json": "llama3_json", "mistral": "mistral", "mistral_args": "mistral",
          "qwen3_coder_xml": "qwen3_coder", "glm45": "glm45", "deepseek_v3": "deepseek_v3",
          "deepseek_v31": "deepseek_v3", "harmony": "harmony"}
# the family's architecture, for the SFT step (tiny sizes below)
ARCH = {"qwen3": "qwen3", "qwen3_coder": "qwen3_moe", "qwen2_5": "qwen2", "qwen3_5": "qwen3", "hermes3": "llama",
        "llama3_1": "llama", "llama3_2": "llama", "llama3_3": "llama", "mistral_nemo": "mistral",
        "mistral_small_3_2": "mistral", "gpt_oss": "gpt_oss", "deepseek_v3": "deepseek_v3",
        "deepseek_v3_1": "deepseek_v3", "deepseek_r1": "qwen2", "glm4_6": "glm4_moe", "phi4_mini": "phi3",
        "smollm3": "smollm3"}
# Official templates the scripted teacher refuses with a clear error (tested below): Mistral Nemo's moves the system
# message into the last user turn, and DeepSeek-V3's and R1's render a call made after tool outputs inside the outputs
# block, so the teacher's structured turn cannot be cut out of the rendering. Their append-only variants run.
REFUSED = {"mistral_nemo", "deepseek_v3", "deepseek_r1"}
# the append-only variants shipped in sculptor_rl/agent/templates/, and the family each is a variant of
VARIANTS = {"qwen3_append_only": "qwen3", "mistral_nemo_append_only": "mistral_nemo",
            "deepseek_v3_append_only": "deepseek_v3", "deepseek_r1_append_only": "deepseek_r1",
            "deepseek_v3_1_append_only": "deepseek_v3_1", "hermes3_append_only": "hermes3",
            "qwen3_5_append_only": "qwen3_5", "mistral_small_3_2_append_only": "mistral_small_3_2",
            "gpt_oss_append_only": "gpt_oss", "glm4_6_append_only": "glm4_6"}
CALLING = [name for name, f in FAMILIES.items() if f.tool_format in PARSER and name not in REFUSED]
# (family, template: None for the official one or a variant's name, kwargs)
CASES = ([(name, None, kwargs) for name in CALLING for kwargs in FAMILIES[name].kwargs_variants or [{}]]
         + [(name, variant, kwargs) for variant, name in VARIANTS.items()
            for kwargs in FAMILIES[name].kwargs_variants or [{}]])
CASE_IDS = [f"{t or n}-{k}" if k else (t or n) for n, t, k in CASES]
LOOP = LoopConfig(max_tool_calls=12, max_new_tokens=512)


@functools.cache
def tokenizer(name: str):
    """A ~600-token byte-level BPE with the family's special tokens and its official template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    fam = FAMILIES[name]
    specials = list(dict.fromkeys([*fam.special_tokens, *(t for t in (fam.bos, fam.eos) if t), *fam.stop]))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [t["messages"][0]["content"] for t in generate("pi_llm", 4, seed=99, keys=2, updates=16)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=fam.bos, eos_token=fam.eos,
                                   chat_template=load_template(name), name_or_path=f"tiny-{name}")


def chat_format(name: str, kwargs: dict, template: str | None = None) -> ChatFormat:
    tok = tokenizer(name)
    return ChatFormat(tok, tok.convert_tokens_to_ids(FAMILIES[name].stop), chat_template=template,
                      chat_template_kwargs=kwargs)


@functools.cache
def tasks():
    """pi_llm (fragment, fold: every step rewrites the context) and babilong (a read-only search first)."""
    return generate("pi_llm", 2, seed=3, keys=2, updates=16) + generate("babilong", 2, seed=3)


def rollouts(fmt: ChatFormat):
    return run_rollouts(tasks(), ScriptedTeacher(tasks(), fmt.one_call_per_turn), fmt, make_env_factory("acm"), LOOP,
                        progress=False)


@pytest.mark.parametrize("name, template, kwargs", CASES, ids=CASE_IDS)
def test_scripted_teacher_through_the_official_template_or_its_variant(name, template, kwargs):
    fmt = chat_format(name, kwargs, template)
    assert fmt.parser.name == PARSER[FAMILIES[name].tool_format]
    trajs = rollouts(fmt)
    for traj in trajs:
        assert traj.stop_reason == "answer" and traj.score == 1.0 and traj.format_errors == 0, traj.steps[-1].text
        assert traj.tokenizer == fmt.provenance
        assert_trained_where_generated(traj, build_samples(traj))  # token-exact
        for step in traj.steps:
            # the prompt is the template's rendering of the conversation at that step
            assert fmt.tokenizer.decode(step.prompt_ids) == fmt.decode(step.prompt_ids)
            if step.calls:  # calls written in the family's own format, parsed back as made
                assert [c.name for c in fmt.parser.parse(step.text, None).calls] == [c["name"] for c in step.calls]
                assert "<tool_call>\n{" not in step.text or fmt.parser.name == "hermes"
        # a step's calls are one per turn where the template renders one (Llama 3.x, gpt-oss)
        if fmt.one_call_per_turn:
            assert all(len(s.calls) <= 1 for s in traj.steps)
    sft_step(name, build_samples(trajs[0]))


def sft_step(name: str, samples) -> None:
    """One optimizer step of the masked next-token loss on a tiny random model of the family's architecture."""
    from transformers import AutoConfig, AutoModelForCausalLM

    vocab = len(tokenizer(name))
    head = {} if ARCH[name] == "deepseek_v3" else {"head_dim": 16}  # MLA: its head sizes are the qk_*/v_* ones
    cfg = AutoConfig.for_model(ARCH[name], vocab_size=vocab, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, **head,
                               moe_intermediate_size=32, num_experts=4, num_local_experts=4, n_routed_experts=4,
                               num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=0, q_lora_rank=None,
                               kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, n_group=1,
                               topk_group=1,
                               max_position_embeddings=8192, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in model.parameters()]
    loss = 0.0
    for s in samples:
        ids = torch.tensor([s.input_ids])
        mask = torch.tensor([s.loss_mask[1:]], dtype=torch.float)
        logp = torch.log_softmax(model(ids).logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
        loss = loss - (logp * mask).sum() / mask.sum() / len(samples)
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


NO_CALLS = [n for n, f in FAMILIES.items() if f.tool_format not in PARSER]  # Phi-4-mini, SmolLM3 (edited copy)


@pytest.mark.parametrize("name", NO_CALLS)
def test_templates_that_render_no_calls_are_refused_naming_what_to_pass(name):
    """Phi-4-mini's official template and SmolLM3's public copy render no assistant calls, so neither says the
    model's call format: `parser: auto` refuses naming `parser` (and `chat_template` for structured turns), the
    scripted teacher refuses naming `chat_template` and `parser`; with a template file that renders calls and its
    parser, the teacher runs token-exact."""
    tok = tokenizer(name)
    stops = tok.convert_tokens_to_ids(FAMILIES[name].stop)
    with pytest.raises(ValueError, match=r"renders no tool calls.*set `parser`.*`chat_template` to a template file"):
        ChatFormat(tok, stops)
    fmt = ChatFormat(tok, stops, parser="hermes")  # the model's own text is kept as the turn's content
    assert not fmt.renders_calls
    with pytest.raises(ValueError, match=r"renders no tool calls.*set `chat_template` to a template file.*`parser`"):
        rollouts(fmt)
    if name != "smollm3":
        return
    # what the refusal names: a template file that renders calls and its parser (here, for SmolLM3's ChatML tokens,
    # Qwen2.5's template: the Hermes-style <tool_call> JSON that SmolLM3's original template asks for)
    fixed = ChatFormat(tok, stops, chat_template=str(template_path("qwen2_5")), parser="hermes")
    assert fixed.renders_calls
    for traj in rollouts(fixed):
        assert traj.score == 1.0 and traj.format_errors == 0
        assert_trained_where_generated(traj, build_samples(traj))


def counts(fmt: ChatFormat, engine=None) -> tuple[int, int, int]:
    """(steps, samples if append-only: context modifications + 1 per rollout, samples) over the test tasks."""
    trajs = run_rollouts(tasks(), engine or ScriptedTeacher(tasks(), fmt.one_call_per_turn), fmt,
                         make_env_factory("acm"), LOOP, progress=False)
    assert all(t.score == 1.0 and t.format_errors == 0 for t in trajs)
    for t in trajs:
        assert_trained_where_generated(t, build_samples(t))
    return (sum(len(t.steps) for t in trajs), sum(sum(s.modified for s in t.steps[:-1]) + 1 for t in trajs),
            sum(len(build_samples(t)) for t in trajs))


VARIANT_CASES = [(v, n, k) for n, v, k in CASES if v]


@pytest.mark.parametrize("variant, name, kwargs", VARIANT_CASES, ids=[f"{v}-{k}" if k else v
                                                                       for v, _, k in VARIANT_CASES])
def test_a_variant_splits_only_where_the_context_changes_and_starts_as_the_official(variant, name, kwargs):
    """A variant's samples are exactly the context modifications + 1; its first prompt of every task is the
    official template's, token for token (only how history is kept differs); and the official template it replaces
    splits more on this workload (Qwen3, DeepSeek-V3.1 thinking), refuses the teacher (Mistral Nemo, DeepSeek-V3,
    R1), or splits as much here (DeepSeek-V3.1 non-thinking; Hermes 3, whose re-rendering follows read-only calls;
    Qwen3.5, Mistral Small 3.2, gpt-oss, GLM-4.6, which re-render across a second user query: `test_history_table`'s
    last column)."""
    fmt, official = chat_format(name, kwargs, variant), chat_format(name, kwargs)
    steps, modified, samples = counts(fmt)
    assert samples == modified < steps
    env = make_env_factory("acm")
    for i, task in enumerate(tasks()):
        start = env(task, i)
        assert fmt.head_ids(start.render(), start.tools) == official.head_ids(start.render(), start.tools)
    if name in REFUSED:
        with pytest.raises(ValueError, match="renders earlier text differently"):
            rollouts(official)
    elif name == "qwen3" or kwargs.get("thinking"):
        assert counts(official)[2] > samples  # Qwen3 (both modes), DeepSeek-V3.1 thinking re-render history
    else:
        assert counts(official)[2] == samples  # one query each: the official re-renders only across a new one


class Reasoning:
    """The scripted teacher, each turn with reasoning (`reasoning_content`), as a thinking model writes it."""

    max_model_len = None

    def __init__(self, teacher):
        self.teacher = teacher

    def generate(self, requests):
        return [Completion(text=c.text, message={**c.message, "reasoning_content": "I look at it first."})
                for c in self.teacher.generate(requests)]


THINKING = [("qwen3_append_only", "qwen3", {"enable_thinking": True}),
            ("deepseek_r1_append_only", "deepseek_r1", {}),
            ("deepseek_v3_1_append_only", "deepseek_v3_1", {"thinking": True}),
            ("qwen3_5_append_only", "qwen3_5", {"enable_thinking": True}),
            ("glm4_6_append_only", "glm4_6", {"enable_thinking": True}),
            ("gpt_oss_append_only", "gpt_oss", {})]


@pytest.mark.parametrize("variant, name, kwargs", THINKING, ids=[v for v, _, _ in THINKING])
def test_thinking_variants_keep_the_reasoning_as_written(variant, name, kwargs):
    """Turns with reasoning, in a thinking mode: the variant renders each turn's reasoning where the model wrote it
    (after the generation prompt's think opening), the parser reads it back, and history keeps it, so samples are
    still exactly the context modifications + 1 (DeepSeek-V3.1's official template drops it from history and
    splits more; R1's refuses the teacher; gpt-oss's reads only `thinking`, so it shows no reasoning at all)."""
    fmt = chat_format(name, kwargs, variant)
    teacher = functools.partial(ScriptedTeacher, tasks(), fmt.one_call_per_turn)  # gpt-oss renders one call a turn
    steps, modified, samples = counts(fmt, Reasoning(teacher()))
    assert samples == modified
    trajs = run_rollouts(tasks()[:1], Reasoning(teacher()), fmt, make_env_factory("acm"), LOOP, progress=False)
    shown = fmt.decode(trajs[0].steps[-1].prompt_ids)
    assert "I look at it first." in shown  # the reasoning of earlier turns is still in the last prompt
    if name == "deepseek_v3_1":  # the official one renders '</think>' where the turn had its reasoning
        official = chat_format(name, kwargs)
        assert counts(official, Reasoning(teacher()))[2] > samples
    elif name != "deepseek_r1":  # Qwen3, Qwen3.5, GLM-4.6 keep the reasoning after the last user query, gpt-oss
        official = chat_format(name, kwargs)  # shows none (it reads `thinking`): as many samples on one query
        assert counts(official, Reasoning(teacher()))[2] == samples


def _conversation(thinking: bool, one_call: bool = False) -> list[dict]:
    """Two user turns, calls one and two at a time (one at a time where the template renders one), each answered;
    reasoning on every assistant turn in thinking mode; ids as the loop numbers them; then a third user query (what
    follows the last answer)."""
    def call(k, *names):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call{k + j:05d}", "type": "function", "function": {"name": n, "arguments": {"city": "Paris"}}}
            for j, n in enumerate(names)], **({"reasoning_content": f"think {k}"} if thinking else {})}

    def out(k, name):
        return {"role": "tool", "tool_call_id": f"call{k:05d}", "name": name, "content": f"result {k}"}

    def answer(text):
        return {"role": "assistant", "content": text, **({"reasoning_content": "think more"} if thinking else {})}

    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"},
            call(0, "get_weather"), out(0, "get_weather"),
            *([call(1, "get_weather"), out(1, "get_weather"), call(2, "get_time"), out(2, "get_time")] if one_call
              else [call(1, "get_weather", "get_time"), out(1, "get_weather"), out(2, "get_time")]),
            answer("Sunny."), {"role": "user", "content": "And tomorrow?"}, call(3, "get_weather"),
            out(3, "get_weather"),
            answer("Rain."), {"role": "user", "content": "Thanks. And the day after?"}]


_WEATHER = [{"type": "function", "function": {"name": n, "description": n, "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}} for n in ("get_weather", "get_time")]


def re_rendered_turns(fmt: ChatFormat, name: str, kwargs: dict) -> list[int]:
    """The assistant turns of `_conversation` (reasoning where the mode thinks; gpt-oss and DeepSeek-R1 always think)
    after which the next prompt does not begin with the last prompt + the turn as the model wrote it there; each
    turn's calls and reasoning are checked to parse back as made. After the last answer the next prompt is the third
    user query's, not a generation prompt right after the answer (GLM ends an answer with the next user turn's
    `<|user|>`). A ValueError where the template cannot render a turn on its own (refused)."""
    thinking = kwargs.get("enable_thinking", kwargs.get("thinking", name in ("deepseek_r1", "gpt_oss")))
    messages, bad = _conversation(bool(thinking), fmt.one_call_per_turn), []
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = fmt.text(messages[:k], add_generation_prompt=True, tools=_WEATHER)
        turn = fmt.decode(fmt.render_completion(messages[:k], _WEATHER, message))
        later = fmt.text(messages[: k + 2], add_generation_prompt=True, tools=_WEATHER)
        if not later.startswith(prompt + turn):
            bad.append(k)
        parsed = fmt.parser.parse(fmt.strip_stop(turn), _WEATHER)
        assert [c.name for c in parsed.calls] == [c["function"]["name"] for c in message.get("tool_calls", [])]
        if message.get("reasoning_content") and parsed.reasoning is not None:
            assert parsed.reasoning == message["reasoning_content"], (k, turn)
    return bad


@pytest.mark.parametrize("variant, name, kwargs", VARIANT_CASES, ids=[f"{v}-{k}" if k else v
                                                                       for v, _, k in VARIANT_CASES])
def test_a_variant_is_append_only_over_two_user_turns(variant, name, kwargs):
    """Every prompt of a two-user-turn conversation (two calls in a turn, two outputs in a row, reasoning where the
    mode thinks) begins with the last prompt + the turn the model wrote there: the variant never re-renders."""
    assert re_rendered_turns(chat_format(name, kwargs, variant), name, kwargs) == []


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_templates_that_rewrite_around_a_new_turn_refuse_the_teacher_clearly(name):
    kwargs = (FAMILIES[name].kwargs_variants or [{}])[0]
    with pytest.raises(ValueError, match="renders earlier text differently once an assistant turn follows.*"
                                         f"{name}_append_only"):
        rollouts(chat_format(name, kwargs))


def test_history_table():
    """What each official template and each variant does to history, measured: samples per rollout against the
    steps that modified the context (an append-only template gives exactly modifications + 1)."""
    rows = []
    for name, template, kwargs in CASES:
        fmt = chat_format(name, kwargs, template)
        steps, modified, samples = counts(fmt)
        try:
            two_users = re_rendered_turns(fmt, name, kwargs) or "append-only"
        except ValueError:
            two_users = "refused"
        rows.append((name, template or "official", kwargs, fmt.parser.name, fmt._tools_via, fmt.one_call_per_turn,
                     steps, modified, samples, two_users))
        assert modified <= samples <= steps
    for name in sorted(REFUSED):
        rows.append((name, "official", {}, "", "", "", "refused", "", "", "refused"))
    print("\n| family | template | kwargs | parser | tools via | one call per turn | steps | samples if append-only "
          "| samples | two user turns: turns re-rendered |")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    by = {(r[0], r[1], str(r[2])): r for r in rows}
    assert by[("qwen2_5", "official", "{}")][8] == by[("qwen2_5", "official", "{}")][7]  # append-only
    nothink = ("qwen3", "official", "{'enable_thinking': False}")
    assert by[nothink][8] == by[nothink][6]  # splits at every step
    assert all(r[8] == r[7] and r[9] == "append-only" for r in rows if r[1] != "official")  # the variants
    for variant, name in VARIANTS.items():  # each replaces an official that re-renders history or refuses
        assert any(r[9] != "append-only" for r in rows if r[0] == name and r[1] == "official"), variant


def test_samples_of_another_tokenizer_are_refused(fmt, tmp_path):
    """Trajectories made with the tiny Qwen3 tokenizer: `samples` takes their tokenizer (no --model needed) and
    refuses a --model of another; SFT's loader refuses the samples for the embedded model; one file never mixes
    two tokenizers."""
    import subprocess
    import sys

    from sculptor_rl.samples import TokenizerMismatch, policy_samples, read_samples
    from sculptor_rl.train.sft import load_sample_dataset
    from sculptor_rl.trajectory import write_trajectories

    qwen3 = chat_format("qwen3", {"enable_thinking": False})
    trajs = rollouts(qwen3)
    write_trajectories(trajs, tmp_path / "t.jsonl")
    cli = [sys.executable, "-m", "sculptor_rl.cli", "samples", "--in", str(tmp_path / "t.jsonl")]
    ok = subprocess.run([*cli, "--out", str(tmp_path / "s.jsonl")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    samples = list(read_samples(tmp_path / "s.jsonl"))
    assert samples and all(s.tokenizer == qwen3.provenance for s in samples)
    assert max(t for s in samples for t in s.input_ids) < len(tokenizer("qwen3"))
    bad = subprocess.run([*cli, "--out", str(tmp_path / "x.jsonl"), "--model", "default"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "was made by tokenizer tiny-qwen3" in bad.stderr
    assert not (tmp_path / "x.jsonl").exists()
    with pytest.raises(TokenizerMismatch, match="sample 1 was made by tokenizer tiny-qwen3"):
        load_sample_dataset(str(tmp_path / "s.jsonl"), None, fmt.provenance)
    assert len(load_sample_dataset(str(tmp_path / "s.jsonl"), None, qwen3.provenance)) == len(samples)
    other = rollouts(chat_format("qwen2_5", {}))
    with pytest.raises(TokenizerMismatch, match="samples of one file must share a tokenizer"):
        policy_samples([*trajs, *other])


def test_the_cli_help_names_every_variant():
    import argparse

    from sculptor_rl.agent.chat import TEMPLATE_VARIANTS
    from sculptor_rl.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["collect"].format_help().split())
    for variant in TEMPLATE_VARIANTS:
        assert variant.removesuffix("append_only") in text, variant
