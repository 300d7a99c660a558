"""The other context-management paradigms as environments (Context-Folding, MemAct, ReSum, MEM1, MemAgent): their
mechanics, their scripted teachers on the five long-context families, and their rollouts turned into Algorithm 1
samples token-exact with the embedded model's tokenizer."""

from __future__ import annotations

import json

import pytest
from conftest import assert_prompts_show_the_workspace, assert_trained_where_generated

from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.envs import env_class, env_names, make_env_factory, params_of, register_env, registry
from sculptor_rl.envs.reading import (answer_from_notes, chunk_text, count_tokens, document, message_tokens,
                                      update_notes)
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.longcontext import FAMILIES, score
from sculptor_rl.metrics import summarize
from sculptor_rl.samples import build_samples

PARADIGMS = ("fold", "memact", "resum", "mem1", "memagent")
BUDGET = 1024


def rollouts(name: str, tasks: list[dict], fmt, budget: int = BUDGET, **params):
    return run_rollouts(tasks, ScriptedTeacher(tasks, environment=name), fmt,
                        make_env_factory(name, {"context_budget": budget, **params}, tokenizer=fmt.tokenizer),
                        LoopConfig(), progress=False)


def test_registered_by_name_with_one_budget():
    assert set(PARADIGMS) <= set(env_names())
    for name in PARADIGMS:
        assert params_of(name, {"context_budget": 2048}).context_budget == 2048
        with pytest.raises(ValueError, match="context_budget"):
            params_of(name, {"context_budget": 10})
        assert env_class(name).teach is not None and "gsm_infinite" in env_class(name).task_families
        assert registry.teacher("pi_llm", name) is env_class(name).teach  # its own, not ACM's
    assert registry.teacher("pi_llm") is registry.teacher("pi_llm", "acm")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_chunks_give_back_the_context_and_notes_answer(family):
    for task in FAMILIES[family].generate(10, 3):
        doc = document(task, 200)
        span = task["meta"]["context"][0]
        assert "".join(doc.chunks) == task["messages"][0]["content"][span["start"]:span["end"]]
        assert all(count_tokens(c) <= 200 for c in doc.chunks) and len(doc.chunks) > 1
        notes = []
        for chunk in doc.chunks:
            notes = update_notes(task, notes, chunk)
        assert score(task, answer_from_notes(task, notes)) == 1.0
    assert answer_from_notes(task, []) != FAMILIES[family].render_answer(task["answer"])  # notes do matter


def test_a_word_longer_than_a_chunk_is_cut():
    chunks = chunk_text("a" * 100 + " b", 5)
    assert "".join(chunks) == "a" * 100 + " b" and all(count_tokens(c) <= 5 for c in chunks)


# ---- the teachers on the five families, and their samples ----

@pytest.mark.parametrize("name", PARADIGMS)
def test_teacher_solves_the_families_and_samples_are_token_exact(name, fmt):
    for family, module in FAMILIES.items():
        tasks = module.generate(6, 11)
        trajs = rollouts(name, tasks, fmt)
        solved = sum(t.score >= 1.0 and t.reward == 1.0 for t in trajs)
        assert solved / len(trajs) >= 0.95, (name, family, [t.answer for t in trajs])
        for index, (traj, task) in enumerate(zip(trajs[:2], tasks)):  # replayed with the rollout's own seed
            env = make_env_factory(name, {"context_budget": BUDGET}, tokenizer=fmt.tokenizer)(task, index)
            whole = len(fmt.head_ids(env.original(), None))  # the record with its whole context
            assert_prompts_show_the_workspace(traj, env, fmt)
            samples = build_samples(traj)
            assert_trained_where_generated(traj, samples)
            # the paradigm rewrites its context, so Algorithm 1 cuts the rollout into several samples
            assert len(samples) > 1
            assert max(len(s.prompt_ids) for s in traj.steps) < whole


def test_where_each_paradigm_closes_its_samples(fmt):
    task = FAMILIES["babilong"].generate(1, 5)[0]
    for name in PARADIGMS:
        (traj,) = rollouts(name, [task], fmt)
        samples = build_samples(traj)
        kinds = [[c["name"] for c in s.calls] for s in traj.steps]
        sizes = [len(s.prompt_ids) for s in traj.steps]  # eval's context measures: the prompts the engine saw
        assert (summarize([traj])["peak_prompt_tokens"], summarize([traj])["mean_prompt_tokens"]) == (
            max(sizes), sum(sizes) / len(sizes))
        last_calls = [kinds[s.completions[-1]] for s in samples[:-1]]
        if name == "memagent":  # every turn is a fresh prompt: one sample per turn
            assert [len(s.completions) for s in samples] == [1] * len(traj.steps)
        elif name == "mem1":  # the same, but the second prompt (task + the first turn) still extends the first
            assert [len(s.completions) for s in samples] == [2] + [1] * (len(traj.steps) - 2)
        elif name == "memact":  # a sample closes at each prune (DCPO's segments)
            assert all("prune_context" in k for k in last_calls)
            assert len(samples) == 1 + sum("prune_context" in k for k in kinds)
        elif name == "fold":  # a sample closes at each return
            assert all(k == ["return"] for k in last_calls) and len(samples) == traj.info["branches"] + 1
        else:  # resum: K resets, K + 1 samples
            assert traj.info["resets"] >= 1 and len(samples) == traj.info["resets"] + 1


def test_a_smaller_budget_means_smaller_prompts(fmt):
    # (Context-Folding's teacher hands more chunks to each branch where there are more: its peak is the branch's)
    tasks = FAMILIES["pi_llm"].generate(3, 2)
    for name in ("memact", "resum", "mem1", "memagent"):
        peaks = {b: max(len(s.prompt_ids) for t in rollouts(name, tasks, fmt, budget=b) for s in t.steps)
                 for b in (768, 1536)}
        assert peaks[768] < peaks[1536], name


# ---- each paradigm's mechanics ----

def _task():
    return FAMILIES["needlebench"].generate(1, 0)[0]


def _call(name, **arguments):
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "id": f"call{name}", "function": {"name": name, "arguments": arguments}}]}


def _run(env, message):
    """Append an assistant turn and run its calls as the loop does."""
    env.append(message)
    out = []
    for c in message["tool_calls"]:
        result = env.execute(c["function"]["name"], c["function"]["arguments"])
        env.append({"role": "tool", "content": result.text, "tool_call_id": c["id"], "name": c["function"]["name"]})
        out.append(result)
    return out


def test_memact_prune_removes_results_and_emptied_calls():
    env = env_class("memact")(_task(), params_of("memact", {"context_budget": 600}))
    (r1,) = _run(env, _call("read_chunk", index=1))
    uid = r1.text.split("\n", 1)[0].removeprefix("tool_call_id: ")
    assert len(uid) == 8
    two = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "id": "callA", "function": {"name": "read_chunk", "arguments": {"index": 2}}},
        {"type": "function", "id": "callB", "function": {"name": "read_chunk", "arguments": {"index": 3}}}]}
    r2, r3 = _run(env, two)
    before = env.render()
    for bad in ({"memory": "", "delete_ids": [uid]}, {"memory": "x", "delete_ids": []},
                {"memory": "x", "delete_ids": ["nosuchid"]}, {"memory": "x"}, "not json"):
        result = env.execute("prune_context", bad)
        assert not result.ok and result.text.startswith("Error: ") and env.render() == before
    id2 = r2.text.split("\n", 1)[0].removeprefix("tool_call_id: ")
    prune = _call("prune_context", memory="kept facts", delete_ids=[uid, id2])
    (result,) = _run(env, prune)
    assert result.ok and result.modified and json.loads(result.text)["success"]
    shown = env.render()
    # the first read's turn is gone whole; of the two-call turn only the removed call is cut
    assert not any(m["role"] == "tool" and uid in m["content"] for m in shown)
    assert [c["id"] for m in shown if m["role"] == "assistant" for c in m["tool_calls"]] == ["callB",
                                                                                            "callprune_context"]
    assert len(env.original()) == len(before) + 2  # the original keeps everything


def test_fold_branch_return_limits_and_message():
    env = env_class("fold")(_task(), params_of("fold", {"context_budget": 600, "max_branches": 2}))
    head = env.render()
    assert not env.execute("return", {"message": "x"}).ok  # no return in MAIN
    (started,) = _run(env, _call("branch", description="read one", prompt="Read chunks 1 to 1"))
    assert started.ok and "MODE: BRANCH" in started.text
    assert not _run(env, _call("branch", description="nested", prompt="p"))[0].ok  # no nesting
    (read,) = _run(env, _call("read_chunk", index=1))
    assert read.ok and "You are in branch mode: read one" in read.text
    (back,) = _run(env, _call("return", message="Agnes's father is Hugo."))
    assert back.modified
    shown = env.render()
    assert shown[: len(head)] == head and len(shown) == len(head) + 2  # the branch call and its returned message
    assert shown[-1]["content"] == "Branch has finished its task, the returned message is:\n\nAgnes's father is Hugo."
    assert _run(env, _call("branch", description="second", prompt="p"))[0].ok
    _run(env, _call("return", message="done"))
    env.render()
    limit = _run(env, _call("branch", description="third", prompt="p"))[0]
    assert not limit.ok and "limit of 2 branch calls" in limit.text and env.info()["branches"] == 2


class _Summarizer:
    """An LLM seam stand-in that records what it is asked."""

    def __init__(self):
        self.asked = []

    def ask(self, conversations, tag="llm", **_):
        self.asked += conversations
        return ["<think>x</think><summary>Hugo is Agnes's father.</summary>"]


def test_resum_resets_at_the_threshold_with_the_summary():
    for llm in (None, _Summarizer()):
        env = env_class("resum")(_task(), params_of("resum", {"context_budget": 400}), llm=llm)
        limit = 0.9 * 400
        turns, shown = 0, env.render()
        while env.resets == 0:
            before = shown
            message = _call("read_chunk", index=turns + 1)
            message["content"] = f"Notes after chunk {turns}:\nnote {turns}"
            _run(env, message)
            turns += 1
            shown = env.render()
        assert len(shown) == 2 and shown[0] == before[0]
        assert shown[1]["content"].startswith("Question: ") and "Summary: <summary>" in shown[1]["content"]
        if llm is None:  # the scripted stand-in: every chunk read, the last one too
            assert f"[scripted summary: the notes of the chunks read] Notes after chunk {turns}:" in shown[1]["content"]
        else:
            assert "<summary>Hugo is Agnes's father.</summary>" in shown[1]["content"]
            assert "note 0" in llm.asked[0][0]["content"]
        assert message_tokens(before) + count_tokens(json.dumps(env.tools)) < limit  # none before the threshold


def test_mem1_keeps_only_the_last_turn():
    env = env_class("mem1")(_task(), params_of("mem1", {"context_budget": 600}))
    head = env.render()
    for i in (1, 2, 3):
        message = _call("read_chunk", index=i)
        message["content"] = f"<state>after {i - 1}</state>"
        _run(env, message)
        shown = env.render()
        assert shown[: len(head)] == head and len(shown) == len(head) + 2
        assert shown[-2]["content"] == f"<state>after {i - 1}</state>" and shown[-1]["content"].startswith(
            f"Chunk {i} of")
    assert len(env.original()) == len(head) + 6


def test_memagent_overwrites_a_capped_memory_and_answers_last():
    env = env_class("memagent")(_task(), params_of("memagent", {"context_budget": 400}))
    count = len(env.doc.chunks)
    for i in range(count):
        assert f"<section {i + 1}/{count}>" in env.render()[0]["content"]
        env.append({"role": "assistant", "content": f"memory {i} " + "word " * 500})
        assert env.on_answer(f"memory {i} " + "word " * 500)
        assert len(env.render()) == 1 and env.memory.startswith(f"memory {i}")
        assert count_tokens(env.memory) <= env.memory_tokens
    assert "Your answer:" in env.render()[0]["content"] and not env.on_answer("Answer: Hugo")
    assert env.info()["memory_cut"] == count


def test_eval_runs_every_paradigm_at_one_budget():
    from sculptor_rl.eval.run import EvalConfig

    for name in PARADIGMS:
        cfg = EvalConfig(environment=name, context_budget=700)
        assert cfg.modes == ["fold", "memact", "resum", "mem1", "memagent", "acm", "full", "truncate", "bm25"]
        assert cfg.tasks == list(FAMILIES)
        for mode in cfg.modes:
            env, params = cfg.mode_env(mode)
            assert env == mode and params_of(env, params) is not None
            assert params.get("context_budget") == (None if mode in ("acm", "full") else 700)


# ---- one GSPO step per paradigm, on its teacher's rollouts, with a tiny random model ----

_SPLIT: dict[str, type] = {}


def _split_reward(base: type) -> type:
    """The paradigm whose reward also tells a group's two rollouts apart (its teacher solves both), so a GSPO
    step has a signal (registered once per process)."""
    def reward(self, traj) -> float:
        return base.reward(self, traj) - 0.5 * traj.rollout_id.endswith("/1")

    if base.name not in _SPLIT:
        _SPLIT[base.name] = register_env(type(f"Split{base.__name__}", (base,),
                                              {"name": f"{base.name}-split", "reward": reward}))
    return _SPLIT[base.name]


@pytest.mark.slow
@pytest.mark.parametrize("name,segments", [(name, 0) for name in PARADIGMS] + [("memact", 1)])
def test_one_gspo_step_on_the_teachers_rollouts(name, segments, fmt, tmp_path):
    import torch
    from conftest import digest
    from transformers import LlamaConfig, LlamaForCausalLM

    from sculptor_rl.jsonl import write_jsonl
    from sculptor_rl.train.rl import SculptorGRPOConfig, build_trainer

    env = _split_reward(env_class(name))
    torch.manual_seed(0)
    model_dir = tmp_path / "tiny"
    LlamaForCausalLM(LlamaConfig(vocab_size=len(fmt.tokenizer), hidden_size=32, intermediate_size=64,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=4096, tie_word_embeddings=True)).save_pretrained(model_dir)
    fmt.tokenizer.save_pretrained(model_dir)
    tasks = FAMILIES["babilong"].generate(1, 9, context_tokens=500)
    write_jsonl(tasks, tmp_path / "tasks.jsonl")
    cfg = SculptorGRPOConfig(
        model=str(model_dir), tasks=str(tmp_path / "tasks.jsonl"), output_dir=str(tmp_path / "rl"),
        environment=env.name, environment_params={"context_budget": 384}, engine="hf", max_steps=1,
        num_generations=2, per_device_train_batch_size=2, gradient_accumulation_steps=1,
        gradient_checkpointing=False, max_new_tokens=64, max_tool_calls=20, max_context_tokens=4096,
        learning_rate=1e-3, lr_scheduler_type="constant", bf16=False, report_to="none", save_strategy="no",
        use_cpu=True, seed=1, segments_per_group=segments)
    trainer = build_trainer(cfg, engine=ScriptedTeacher(tasks, environment=env.name))
    before = digest(trainer.model)
    trainer.train()
    (log,) = [e for e in trainer.state.log_history if "reward" in e]
    assert log["reward"] == 0.75 and log["accuracy"] == 1.0  # both solved; the second rollout's reward split off
    if segments:  # DCPO's sampling: one segment of the group's two rollouts trained
        assert log["samples_per_rollout"] == 0.5
    else:  # the paradigm's context changes cut each rollout into samples
        assert log["samples_per_rollout"] > 1
    assert digest(trainer.model) != before


def test_dcpo_segment_sampling():
    import random
    from collections import Counter

    from sculptor_rl.train.micro_batches import dcpo_segments

    # group 0: rollouts 0..3 with 1, 3, 2, 1 segments; group 1: rollouts 4..7 with 2, 2, 2, 2
    rollouts = [0, 1, 1, 1, 2, 2, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    for seed in range(50):
        rng = random.Random(seed)
        few = dcpo_segments(rollouts, 4, 3, rng)  # more rollouts than segments asked: 3 different rollouts each
        assert len(few) == 6 and len(set(few)) == 6
        for group in ({0, 1, 2, 3}, {4, 5, 6, 7}):
            picked = [rollouts[i] for i in few if rollouts[i] in group]
            assert len(picked) == 3 and len(set(picked)) == 3
        many = dcpo_segments(rollouts, 4, 6, rng)  # fewer rollouts than segments: each one, then round-robin
        assert len(many) == 12
        for group in ({0, 1, 2, 3}, {4, 5, 6, 7}):
            picked = Counter(rollouts[i] for i in many if rollouts[i] in group)
            assert set(picked) == group and sum(picked.values()) == 6 and max(picked.values()) <= 2
        # a rollout gives unused segments first (group 1: two each, so 6 different), then repeats (group 0's
        # one-segment rollouts, and 10 asked of its 7)
        assert len({i for i in many if rollouts[i] >= 4}) == 6
        lots = [i for i in dcpo_segments(rollouts, 4, 10, rng) if rollouts[i] < 4]
        counts = Counter(rollouts[i] for i in lots)
        assert len(lots) == 10 and sorted(counts.values()) == [2, 2, 3, 3]  # one each, then 6 round-robin
        for k, n in counts.items():  # a rollout's segments are all used before one repeats
            assert len({i for i in lots if rollouts[i] == k}) == min(n, rollouts.count(k))


def test_dcpo_sampling_of_a_rounds_samples(fmt):
    from sculptor_rl.train.micro_batches import round_samples

    tasks = FAMILIES["babilong"].generate(2, 4)
    trajs = run_rollouts(tasks, ScriptedTeacher(tasks, environment="memact"), fmt,
                         make_env_factory("memact", {"context_budget": BUDGET}, tokenizer=fmt.tokenizer),
                         LoopConfig(), num_generations=2, progress=False)
    every, adv = round_samples(trajs, [0.5, -0.5, 1.0, -1.0])
    assert len(every) == sum(len(build_samples(t)) for t in trajs) > 8
    picked, picked_adv = round_samples(trajs, [0.5, -0.5, 1.0, -1.0], segments_per_group=3, num_generations=2, seed=5)
    assert len(picked) == 6  # exactly 3 per task group, each with its own rollout's advantage
    for s, a in zip(picked, picked_adv):
        k = int(s.rollout_id.split(":")[0])
        assert a == [0.5, -0.5, 1.0, -1.0][k] and any(s.input_ids == e.input_ids for e in every)
    assert sorted(int(s.rollout_id.split(":")[0]) // 2 for s in picked) == [0, 0, 0, 1, 1, 1]
