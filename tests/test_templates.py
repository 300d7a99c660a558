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
from sculptor_rl.envs import make_env_factory
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.samples import build_samples
from sculptor_rl.envs.tasks import generate

from conftest import assert_trained_where_generated
from template_families import FAMILIES, load_template

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
# Not through the scripted teacher (a clear error, tested below): Mistral Nemo's template moves the system message
# into the last user turn, and DeepSeek-V3 and R1 templates render a call made after tool outputs inside the
# outputs block, so the teacher's structured turn cannot be cut out of the rendering.
NOT_YET = {"mistral_nemo", "deepseek_v3", "deepseek_r1"}
CALLING = [name for name, f in FAMILIES.items() if f.tool_format in PARSER and name not in NOT_YET]
CASES = [(name, kwargs) for name in CALLING for kwargs in FAMILIES[name].kwargs_variants or [{}]]
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


def chat_format(name: str, kwargs: dict) -> ChatFormat:
    tok = tokenizer(name)
    return ChatFormat(tok, tok.convert_tokens_to_ids(FAMILIES[name].stop), chat_template_kwargs=kwargs)


@functools.cache
def tasks():
    """pi_llm (fragment, fold: every step rewrites the context) and babilong (a read-only search first)."""
    return generate("pi_llm", 2, seed=3, keys=2, updates=16) + generate("babilong", 2, seed=3)


def rollouts(fmt: ChatFormat):
    return run_rollouts(tasks(), ScriptedTeacher(tasks(), fmt.one_call_per_turn), fmt, make_env_factory("acm"), LOOP,
                        progress=False)


@pytest.mark.parametrize("name, kwargs", CASES, ids=[f"{n}-{k}" if k else n for n, k in CASES])
def test_scripted_teacher_through_the_official_template(name, kwargs):
    fmt = chat_format(name, kwargs)
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


def test_templates_that_render_no_calls_refuse_the_scripted_teacher_clearly():
    for name in [n for n, f in FAMILIES.items() if f.tool_format not in PARSER]:
        fmt = ChatFormat(tokenizer(name), tokenizer(name).convert_tokens_to_ids(FAMILIES[name].stop), parser="hermes")
        assert not fmt.renders_calls
        with pytest.raises(ValueError, match="renders no tool calls"):
            rollouts(fmt)


@pytest.mark.parametrize("kwargs", FAMILIES["qwen3"].kwargs_variants)
def test_the_append_only_qwen3_variant_splits_only_where_the_context_changes(kwargs):
    official, variant = chat_format("qwen3", kwargs), ChatFormat(tokenizer("qwen3"), chat_template="qwen3_append_only",
                                                                 chat_template_kwargs=kwargs)
    for fmt in (official, variant):
        trajs = rollouts(fmt)
        modified = sum(sum(s.modified for s in t.steps[:-1]) + 1 for t in trajs)
        samples = sum(len(build_samples(t)) for t in trajs)
        assert all(t.score == 1.0 for t in trajs)
        assert (samples == modified) == (fmt is variant)  # the official one re-renders the think blocks


@pytest.mark.parametrize("name", sorted(NOT_YET))
def test_templates_that_rewrite_around_a_new_turn_refuse_the_teacher_clearly(name):
    kwargs = (FAMILIES[name].kwargs_variants or [{}])[0]
    with pytest.raises(ValueError, match="renders earlier text differently once an assistant turn follows"):
        rollouts(chat_format(name, kwargs))


def test_history_table():
    """What each official template does to history, measured: samples per rollout against the steps that modified
    the context (an append-only template gives exactly modifications + 1)."""
    rows = []
    for name, kwargs in CASES:
        fmt = chat_format(name, kwargs)
        trajs = rollouts(fmt)
        samples = sum(len(build_samples(t)) for t in trajs)
        modified = sum(sum(s.modified for s in t.steps[:-1]) + 1 for t in trajs)
        steps = sum(len(t.steps) for t in trajs)
        rows.append((name, kwargs, fmt.parser.name, fmt._tools_via, fmt.one_call_per_turn, steps, modified, samples))
        assert modified <= samples <= steps
    print("\n| family | kwargs | parser | tools via | one call per turn | steps | samples if append-only | samples |")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    by = {(r[0], str(r[1])): r for r in rows}
    assert by[("qwen2_5", "{}")][7] == by[("qwen2_5", "{}")][6]  # append-only
    assert by[("qwen3", "{'enable_thinking': False}")][7] == by[("qwen3", "{'enable_thinking': False}")][5]  # splits


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
