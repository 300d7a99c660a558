"""MemTool sessions through the agent loop: the scripted teacher in every mode, Algorithm 1 samples, the prompt
restart between requests, caps and rewards; one run on the real vLLM engine (slow)."""

from __future__ import annotations

import pytest

from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.engines import Completion
from sculptor_rl.envs import make_env_factory
from sculptor_rl.envs.memtool.env import MODES
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.envs.memtool.catalogue import catalogue
from sculptor_rl.envs.memtool import metrics
from sculptor_rl.rollout import RolloutConfig, rollout
from sculptor_rl.samples import build_samples
from sculptor_rl.envs.tasks import generate
from sculptor_rl.toolcalls import format_tool_call

from conftest import assert_prompts_show_the_workspace

LOOP = LoopConfig(max_tool_calls=80, max_new_tokens=256)


@pytest.fixture(scope="module")
def sessions():
    return generate("memtool", 3, seed=5, requests=5, calls_per_request=2, reuse=0.5)


@pytest.mark.parametrize("mode, params", [(mode, {}) for mode in MODES] + [
    ("workflow", {"limit": 6}),  # every search step passes the limit: the re-prune loop brings it back
    ("autonomous", {"history": "summarize", "history_turns": 1}),  # the policy writes the history summary
])
def test_teacher_completes_sessions_with_valid_samples(sessions, fmt, mode, params):
    make_env = make_env_factory("memtool", {"mode": mode, **params})
    trajs = run_rollouts(sessions, ScriptedTeacher(sessions), fmt, make_env, LOOP, progress=False)
    summary = metrics.summarize(trajs)[mode]
    assert summary["task_completion"] == 1.0 and summary["tool_correctness"] == 1.0
    assert summary["limit_breaches"] == summary["format_errors"] == 0 and summary["reward"] == 1.0
    assert summary["removal_ratio"] > 0.7 and summary["loaded_max"] <= 15
    for traj in trajs:
        assert traj.stop_reason == "answer" and traj.score == 1.0 and traj.reward == 1.0
        if "limit" in params:  # request 1's search step loaded 10 tools: the re-prune step kept the 2 it needs
            assert traj.info["turns"][0]["added"] == 10 and traj.info["turns"][0]["loaded"] == 2
        if "history" in params:  # requests 1-3 left the window: the summary names them
            assert "Summary of earlier requests:\nRequest 1 of 5" in traj.messages[0]["content"]
            assert "Request 3 of 5" in traj.messages[0]["content"]
        assert len(traj.info["turns"]) == 5 and all(t["completed"] for t in traj.info["turns"])
        # every request but the last ends with an answer after which the prompt restarts (a new sample)
        assert sum(s.next_turn for s in traj.steps) >= 4
        samples = build_samples(traj)
        assert sum(sum(s.loss_mask) for s in samples) == traj.generated_tokens
        assert sorted(i for s in samples for i in s.completions) == list(range(len(traj.steps)))
        # a sample closes where the next prompt does not extend: after a tool change or a rewritten history,
        # not after a new turn the template only appends
        breaks = sum(not nxt.prompt_ids[: len(s.prompt_ids) + len(s.completion_ids)] == s.prompt_ids + s.completion_ids
                     for s, nxt in zip(traj.steps, traj.steps[1:]))
        assert len(samples) == breaks + 1 <= sum(s.modified for s in traj.steps[:-1]) + 1
        # each step's prompt is exactly the chat template over what the env showed then
        assert_prompts_show_the_workspace(traj, make_env(traj_task(sessions, traj), 0), fmt)


def traj_task(sessions, traj):
    return next(s for s in sessions if s["id"] == traj.task_id)


class Script:
    """A text engine: completion k of a rollout is script(k, request)."""

    max_model_len = None

    def __init__(self, script):
        self.script, self.k = script, {}

    def generate(self, requests):
        out = []
        for r in requests:
            k = self.k[r.rollout_id] = self.k.get(r.rollout_id, -1) + 1
            out.append(Completion(text=self.script(k, r)))
        return out


def test_answers_without_tools_go_through_the_session(sessions, fmt):
    (traj,) = run_rollouts(sessions[:1], Script(lambda k, r: "I cannot tell."), fmt,
                           make_env_factory("memtool"), LOOP, progress=False)
    assert len(traj.steps) == 5 and [s.next_turn for s in traj.steps] == [True] * 4 + [False]
    assert traj.stop_reason == "answer" and traj.score == 0.0 and traj.reward == 0.0
    assert [t["calls"] for t in traj.info["turns"]] == [0] * 5


def test_limit_breach_and_format_errors_cost_the_reward(sessions, fmt):
    companies = catalogue().companies

    def greedy(k, r):  # searches two more companies each time (5 tools each), then answers
        names = [companies[2 * k].name, companies[2 * k + 1].name]
        return format_tool_call("Search_Tools", {"keywords": names}) if k < 3 else "done"

    make_env = make_env_factory("memtool", {"limit": 12})
    (traj,) = run_rollouts(sessions[:1], Script(greedy), fmt, make_env, LOOP, progress=False)
    assert traj.info["turns"][0]["breaches"] == 2 and traj.format_errors == 0 and traj.reward == -1.0
    assert traj.info["turns"][0]["loaded"] == 30  # the paper's rule: the searches past the limit still added

    (traj,) = run_rollouts(sessions[:1], Script(lambda k, r: format_tool_call("get_revenue_zzz", {"year": 2020})
                                                if k == 0 else "done"), fmt, make_env, LOOP, progress=False)
    assert traj.format_errors == 1 and traj.reward == -1.0  # a tool the agent does not hold


def test_tool_call_cap_fails_the_request_and_the_session_goes_on(sessions, fmt):
    def forever(k, r):
        return format_tool_call("Search_Tools", {"keywords": ["revenue"]})

    (traj,) = run_rollouts(sessions[:1], Script(forever), fmt, make_env_factory("memtool"),
                           LoopConfig(max_tool_calls=6), progress=False)
    turns = traj.info["turns"]  # the cap is per request: each of the 5 fails after its 6 calls
    assert len(turns) == 5 and [t["capped"] for t in turns] == ["max_tool_calls"] * 5
    assert traj.num_tool_calls == 30 and traj.stop_reason == "max_tool_calls" and traj.reward == -1.0
    assert turns[0]["loaded"] == 5 and not any(t["completed"] for t in turns)
    assert sum(s.next_turn for s in traj.steps) == 4  # a sample closes where each failed request gave way
    samples = build_samples(traj)
    assert sum(sum(s.loss_mask) for s in samples) == traj.generated_tokens


def _user_turn(request) -> str:
    return next(m["content"] for m in reversed(request.messages) if m["role"] in ("user", "tool"))


def test_a_prompt_over_the_window_drops_history_first(sessions, fmt):
    """Request 1's long reply pushes request 2's prompt over the window: it leaves the history (H again), and
    request 2 goes on."""
    def script(k, r):
        return "the figures: " + "unknown " * 600 if _user_turn(r).startswith("Request 1 ") else "done"

    make_env = make_env_factory("memtool")
    env = make_env(sessions[0], 0)
    head = len(fmt.head_ids(env.render(), env.tools))
    (traj,) = run_rollouts(sessions[:1], Script(script), fmt, make_env,
                           LoopConfig(max_context_tokens=head + 400), progress=False)
    assert traj.stop_reason == "answer" and len(traj.steps) == 5 and traj.reward == 0.0
    assert not any(t["capped"] for t in traj.info["turns"])
    later = [fmt.tokenizer.decode(s.prompt_ids) for s in traj.steps[1:]]
    assert not any("unknown unknown" in p for p in later) and "Request 2 of 5" in later[0]


def test_a_prompt_over_the_window_fails_the_request_then_the_prune_step_recovers(sessions, fmt):
    """hybrid: request 2 loads 30 tools; their schemas pass the window, so (history dropped) the request fails;
    request 3's prune step holds no tool schema, removes them, and the session goes on."""
    companies = catalogue().companies

    def script(k, r):
        text = _user_turn(r)
        if "Workflow step (remove tools)" in text:
            return text.rsplit("Loaded tools: ", 1)[1].rstrip(".")
        if text.startswith("Request 2 "):
            return format_tool_call("Search_Tools", {"keywords": [c.name for c in companies[:6]]})
        return "done"

    make_env = make_env_factory("memtool", {"mode": "hybrid"})
    (traj,) = run_rollouts(sessions[:1], Script(script), fmt, make_env,
                           LoopConfig(max_context_tokens=2000), progress=False)
    turns = traj.info["turns"]
    assert [t["capped"] for t in turns] == [None, "max_context_tokens", None, None, None]
    assert turns[1]["added"] == turns[2]["removed"] == 30 and turns[2]["loaded"] == 0
    assert traj.stop_reason == "answer" and traj.reward == -1.0  # a capped request costs the cap penalty
    prune = fmt.tokenizer.decode(traj.steps[2].prompt_ids)  # request 3's prune step: request 1 stays dropped
    assert "Request 2 of 5" in prune and "Request 1 of 5" not in prune
    assert metrics.summarize([traj])["hybrid"]["capped_requests"] == 1
    samples = build_samples(traj)
    assert sum(sum(s.loss_mask) for s in samples) == traj.generated_tokens


@pytest.mark.slow
def test_vllm_rollouts_on_memtool(fmt, vllm_engine):
    """The embedded model in each mode: token ids and logprobs from the engine make valid samples."""
    short = generate("memtool", 1, seed=5, requests=2, calls_per_request=1)
    for mode in MODES:
        cfg = RolloutConfig(environment="memtool", environment_params={"mode": mode}, num_generations=2,
                            max_tool_calls=6, max_new_tokens=48)
        trajs = rollout(short, cfg, fmt=fmt, engine=vllm_engine, progress=False)
        assert len(trajs) == 2
        for traj in trajs:
            assert traj.info["mode"] == mode and traj.info["turns"]
            samples = build_samples(traj)
            assert sum(sum(s.loss_mask) for s in samples) == traj.generated_tokens
            assert all(s.logprobs is not None and len(s.logprobs) == len(s.input_ids) for s in samples)
        summary = metrics.summarize(trajs)[mode]
        assert 0.0 <= summary["task_completion"] <= 1.0
