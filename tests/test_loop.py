"""The agent loop on a text engine that replays fixed completions (the vLLM run is in test_vllm_rollouts.py)."""

import asyncio
import re

import pytest
from conftest import assert_prompts_show_the_workspace

from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.toolcalls import format_tool_call
from sculptor_rl.engines import Completion
from sculptor_rl.envs import make_env_factory
from sculptor_rl.envs.tasks import generate, render_answer
from sculptor_rl.trajectory import Trajectory


def acm_env(seed):
    return make_env_factory("acm", seed=seed)


class Replay:
    """Completion k of a rollout of a task of `tasks` is `script(task, k, messages)`; records every batch it is
    sent. Requests carry no task: it is found by the request's rollout id, as the scripted teachers do."""

    max_model_len = None

    def __init__(self, script, tasks):
        self.script, self.batches, self.tasks = script, [], {t["id"]: t for t in tasks}

    def generate(self, requests):
        self.batches.append(len(requests))
        return [Completion(text=self.script(self.tasks[r.rollout_id.rsplit("/", 1)[0]],
                                            sum(m["role"] == "assistant" for m in r.messages), r.messages))
                for r in requests]


class OneByOne(Replay):
    """`Replay` taking one request at a time (`agenerate`), as the per-rollout schedule sends them; the rollouts
    named in `slow` get each completion back only after 50 event-loop turns. `sent`: the rollout of each request,
    in the order they came."""

    def __init__(self, script, tasks, slow=()):
        super().__init__(script, tasks)
        self.slow, self.sent = set(slow), []

    async def agenerate(self, request):
        self.sent.append(request.rollout_id)
        for _ in range(50 if request.rollout_id in self.slow else 0):
            await asyncio.sleep(0)
        (out,) = self.generate([request])
        return out


SCHEDULED = pytest.mark.parametrize("engine_class,schedule", [(Replay, "lockstep"), (OneByOne, "per-rollout")])


def _fid(messages):
    return re.findall(r"\bf[a-z0-9]{5}\b", messages[-1]["content"])


def acm_script(task, k, messages):
    """fragment → search (read-only) → fold the first fragment → answer."""
    user = task["messages"][0]["content"]
    lines = user.split("\n\n")[1].split("\n")
    if k == 0:
        return format_tool_call("fragment_context", {"start_marker": lines[0], "end_marker": lines[-1],
                                                      "num_fragments": 4})
    if k == 1:
        return format_tool_call("search_context", {"query": lines[0]})
    if k == 2:
        first = re.findall(r"\bf[a-z0-9]{5}\b", messages[-3]["content"])[0]
        return format_tool_call("fold_fragment", {"fragment_id": first})
    return render_answer(task)


@pytest.fixture(scope="module")
def tasks():
    return generate("pi_llm", 3, seed=7, keys=2, updates=40)


def test_rollout_records_steps_flags_and_answer(tasks, fmt):
    engine = Replay(acm_script, tasks)
    trajs = run_rollouts(tasks, engine, fmt, acm_env(0), LoopConfig(), num_generations=2, progress=False)
    assert len(trajs) == 6 and engine.batches == [6, 6, 6, 6]  # all live rollouts in one batch per step
    for t in trajs:
        assert [s.modified for s in t.steps] == [True, False, True, False]
        assert [c["name"] for s in t.steps for c in s.calls] == ["fragment_context", "search_context", "fold_fragment"]
        assert t.stop_reason == "answer" and t.score == 1.0 and t.reward == 1.0
        assert t.context_tokens_after < t.context_tokens_before
        # between context modifications each prompt extends the previous prompt + completion
        s = t.steps
        assert s[2].prompt_ids[: len(s[1].prompt_ids) + len(s[1].completion_ids)] == s[1].prompt_ids + s[1].completion_ids
        assert s[1].prompt_ids[: len(s[0].prompt_ids)] != s[0].prompt_ids  # the fragment tags changed Q
    assert len({t.rollout_id for t in trajs}) == 6


def test_prompt_ids_decode_to_the_rendered_workspace(tasks, fmt):
    """Replays each rollout in a fresh workspace and compares every step's prompt with the template."""
    (traj,) = run_rollouts(tasks[:1], Replay(acm_script, tasks), fmt, acm_env(0), progress=False)
    assert_prompts_show_the_workspace(traj, acm_env(0)(tasks[0], 0), fmt)


@SCHEDULED
def test_format_errors_are_answered_and_penalized(tasks, fmt, engine_class, schedule):
    def script(task, k, messages):
        return ["<tool_call>{oops}</tool_call>", format_tool_call("no_such_tool", {}), render_answer(task)][k]

    (t,) = run_rollouts(tasks[:1], engine_class(script, tasks), fmt, acm_env(0), LoopConfig(schedule=schedule),
                        progress=False)
    assert t.stop_reason == "answer" and t.score == 1.0
    assert t.format_errors == 2 and t.reward == -1.0
    assert t.steps[0].calls[0]["result"].startswith("Error: tool call is not valid JSON")
    assert t.messages[3]["role"] == "tool" and "Error" in t.messages[3]["content"]


@SCHEDULED
def test_tool_call_cap_stops_the_rollout(tasks, fmt, engine_class, schedule):
    def script(task, k, messages):  # three searches per completion, forever
        return "\n".join(format_tool_call("search_context", {"query": "value"}) for _ in range(3))

    (t,) = run_rollouts(tasks[:1], engine_class(script, tasks), fmt, acm_env(0),
                        LoopConfig(max_tool_calls=7, schedule=schedule), progress=False)
    assert t.stop_reason == "max_tool_calls" and t.num_tool_calls == 7 and t.reward == -1.0
    assert t.answer is None and t.score == 0.0


@SCHEDULED
def test_context_cap_stops_the_rollout(tasks, fmt, engine_class, schedule):
    def script(task, k, messages):
        return format_tool_call("search_context", {"query": "value", "max_results": 50, "context_size": 1000})

    env = acm_env(0)(tasks[0], 0)
    head = len(fmt.head_ids(env.render(), env.tools))
    (t,) = run_rollouts(tasks[:1], engine_class(script, tasks), fmt, acm_env(0),
                        LoopConfig(max_context_tokens=head + 1500, schedule=schedule), progress=False)
    assert t.stop_reason == "max_context_tokens" and t.reward == -1.0
    assert all(len(s.prompt_ids) < head + 1500 for s in t.steps)


def test_trajectory_json_round_trip_is_exact(tasks, fmt):
    trajs = run_rollouts(tasks, Replay(acm_script, tasks), fmt, acm_env(3), progress=False)
    for t in trajs:
        d = t.to_json()
        assert d["steps"][1]["prompt_reuse"] == 0 or d["steps"][1]["prompt_reuse"] < len(t.steps[1].prompt_ids)
        assert d["steps"][2]["prompt_reuse"] == len(t.steps[1].prompt_ids) + len(t.steps[1].completion_ids)
        back = Trajectory.from_json(d)
        assert back == t


def test_per_rollout_schedule_sends_a_rollouts_next_request_without_waiting(tasks, fmt):
    """One rollout's engine is slow: the others run all their steps meanwhile (lock-step, each of their steps
    would wait for it), and every rollout comes out as the lock-step loop makes it."""
    slow = f"{tasks[0]['id']}/0"
    engine = OneByOne(acm_script, tasks, slow=[slow])
    per_rollout = run_rollouts(tasks, engine, fmt, acm_env(0), LoopConfig(schedule="per-rollout"), num_generations=2,
                               progress=False)
    fast = [i for i, r in enumerate(engine.sent) if r != slow]
    assert len(fast) == 5 * 4 and engine.sent.index(slow, 1) > fast[-1]
    lockstep = run_rollouts(tasks, Replay(acm_script, tasks), fmt, acm_env(0), LoopConfig(schedule="lockstep"),
                            num_generations=2, progress=False)
    assert [t.to_json() for t in per_rollout] == [t.to_json() for t in lockstep]


def test_schedule_names_are_checked(tasks, fmt):
    with pytest.raises(ValueError, match="no agenerate"):
        run_rollouts(tasks, Replay(acm_script, tasks), fmt, acm_env(0), LoopConfig(schedule="per-rollout"))
    with pytest.raises(ValueError, match="choose one of auto, per-rollout, lockstep"):
        run_rollouts(tasks, Replay(acm_script, tasks), fmt, acm_env(0), LoopConfig(schedule="async"))


def test_auto_goes_per_rollout_only_where_the_engine_gains(tasks, fmt):
    """`schedule: auto` sends one request at a time to an engine with `agenerate`, unless the engine says lock-step
    serves it better (`per_rollout_pays`: vLLM on CPU cores)."""
    gains = OneByOne(acm_script, tasks)
    run_rollouts(tasks, gains, fmt, acm_env(0), LoopConfig(), progress=False)
    assert gains.sent
    on_cpu = OneByOne(acm_script, tasks)
    on_cpu.per_rollout_pays = False
    run_rollouts(tasks, on_cpu, fmt, acm_env(0), LoopConfig(), progress=False)
    assert not on_cpu.sent  # every request went through `generate`, lock-step
