"""The multi-turn agent loop: render → generate → parse → run tools → repeat, many rollouts in one batch.

The loop knows no tool, task family or reward rule: an environment (`sculptor_rl.envs.Env`) owns its system
prompt, tools, rendering, scoring and reward, and the loop calls its hooks. Per step it keeps the exact prompt ids
the engine saw, the generated ids and logprobs, the parsed calls and whether the context was modified —
everything Algorithm 1 (`sculptor_rl.trajectory`) needs to build training samples without re-tokenizing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Callable

from tqdm.auto import tqdm

from ..engines.base import Completion, Engine, Request
from ..envs.base import Env
from ..toolcalls import PARSERS, ToolCall
from ..trajectory import Step, Trajectory
from .chat import ChatFormat

__all__ = ["LoopConfig", "run_rollouts"]


@dataclass
class LoopConfig:
    """The loop's settings, under the same names in every config that runs the loop (rl, eval, serve, rollout)."""

    max_tool_calls: int = 20  # a rollout making more calls stops (reward -1); per turn where the env goes on (on_cap)
    max_context_tokens: int = 131072  # prompt + completion tokens; beyond: stop (reward -1), or the env's on_cap
    max_new_tokens: int = 512  # per completion
    parser: str = "hermes"

    @classmethod
    def of(cls, cfg) -> "LoopConfig":
        """The loop settings of a config that has them among its fields."""
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})


@dataclass
class _Live:
    """One rollout in progress: its environment and what it has generated so far."""

    index: int
    rollout_id: str
    task: dict
    env: Env
    q_len: int  # messages rendered into the head: the env's first ones, or all of them when it went on (on_answer)
    base: int = 0  # the first step whose completion follows the head (earlier ones are rendered inside it)
    steps: list[Step] = field(default_factory=list)
    asst_index: list[int] = field(default_factory=list)  # message index of each step's assistant turn
    tool_calls: int = 0  # calls since the turn began (the rollout's start, or the env going on)
    stop: str | None = None  # "answer" | "max_tool_calls" | "max_context_tokens"


def _prompt_ids(r: _Live, fmt: ChatFormat, head_cache: dict) -> list[int]:
    """The prompt the engine sees now: rendered task messages, then each earlier turn as generated."""
    shown, orig = r.env.render(), r.env.original()
    q = shown[: r.q_len]
    key = (tuple((m["role"], m["content"]) for m in q), repr(r.env.tools))
    if key not in head_cache:
        head_cache.clear()  # one entry per rollout at a time is enough; contexts can be large
        head_cache[key] = fmt.head_ids(q, r.env.tools)
    ids = list(head_cache[key])
    bounds = r.asst_index + [len(shown)]
    for t in range(r.base, len(r.steps)):
        step, a = r.steps[t], r.asst_index[t]
        if shown[a]["content"] == orig[a]["content"]:
            ids += step.completion_ids
            if not step.completion_ids or step.completion_ids[-1] not in fmt.stop_ids:
                ids.append(fmt.eos_id)  # a completion cut by max_new_tokens: close its turn
        else:  # an ACM tool rewrote this assistant turn (role "assistant"/"all")
            ids += fmt.completion_ids(shown[a]["content"])
        ids += fmt.bridge_ids(tuple((m["role"], m["content"]) for m in shown[a + 1 : bounds[t + 1]]))
    return ids


def _run_calls(r: _Live, calls: list[ToolCall], cfg: LoopConfig) -> list[dict]:
    """Execute one completion's calls in order; a malformed block is answered with an error message."""
    records = []
    for call in calls:
        known = {t["function"]["name"] for t in r.env.tools}  # an earlier call may have changed the tools
        if r.tool_calls == cfg.max_tool_calls:
            r.stop = "max_tool_calls"
            break
        r.tool_calls += 1
        if call.error:
            text = f'Error: {call.error}. Write a call as <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>.'
            ok = modified = False
        else:
            result = r.env.execute(call.name, call.arguments)
            text, ok, modified = result.text, result.ok, result.modified
        r.env.append({"role": "tool", "content": text})
        records.append({"name": call.name, "arguments": call.arguments, "ok": ok, "modified": modified,
                        "format_error": call.error is not None or call.name not in known, "result": text})
    return records


def _went_on(r: _Live) -> None:
    """The env opened a new turn (`on_answer` or `on_cap` True): the prompt restarts from its `render()`, Algorithm 1
    closes a sample after the last step, and the call count starts again."""
    if r.steps:
        r.steps[-1].next_turn = True
    r.base, r.q_len, r.tool_calls, r.stop = len(r.steps), len(r.env.render()), 0, None


def run_rollouts(
    tasks: list[dict],
    engine: Engine,
    fmt: ChatFormat,
    make_env: Callable[[dict, int], Env],
    cfg: LoopConfig = LoopConfig(),
    num_generations: int = 1,
    progress: bool = True,
) -> list[Trajectory]:
    """Run `num_generations` rollouts per task; every step sends all live rollouts to the engine at once.
    After a step where an env went on (`on_answer` True), the prompt restarts from its `render()` (re-rendered by
    the chat template), so an env may rewrite or drop earlier messages there; Algorithm 1 closes a sample then.
    A cap (max_tool_calls, max_context_tokens) stops a rollout unless its env goes on (`on_cap`: the turn fails,
    the next one opens)."""
    parser = PARSERS[cfg.parser]()
    pairs = [(task, g) for task in tasks for g in range(num_generations)]
    envs = [make_env(task, i) for i, (task, _) in enumerate(pairs)]
    live = [_Live(i, f"{task['id']}/{g}", task, env, q_len=len(env.render()))
            for i, ((task, g), env) in enumerate(zip(pairs, envs))]
    max_len = min(cfg.max_context_tokens, engine.max_model_len or cfg.max_context_tokens)
    head_caches = [dict() for _ in live]
    bar = tqdm(total=len(live), desc="rollouts", unit="rollout", disable=not progress, dynamic_ncols=True)
    start, generated, steps = time.perf_counter(), 0, 0
    active = list(live)
    while active:
        requests, ready = [], []
        for r in active:
            ids = _prompt_ids(r, fmt, head_caches[r.index])
            while len(ids) >= max_len and r.env.on_cap("max_context_tokens"):
                _went_on(r)
                ids = _prompt_ids(r, fmt, head_caches[r.index])
            room = max_len - len(ids)
            if room <= 0:
                r.stop = "max_context_tokens"
                continue
            requests.append(Request(prompt_ids=ids, messages=r.env.render(), tools=r.env.tools,
                                    max_new_tokens=min(cfg.max_new_tokens, room), rollout_id=r.rollout_id))
            ready.append(r)
        completions: list[Completion] = engine.generate(requests) if requests else []
        for r, req, out in zip(ready, requests, completions):
            ids = out.token_ids if out.token_ids is not None else fmt.completion_ids(out.text)
            generated, steps = generated + len(ids), steps + 1
            parsed = parser.parse(out.text)
            r.asst_index.append(len(r.env.render()))
            r.env.append({"role": "assistant", "content": out.text})
            step = Step(prompt_ids=req.prompt_ids, completion_ids=list(ids), logprobs=out.logprobs, text=out.text,
                        finish_reason=out.finish_reason)
            r.steps.append(step)
            if parsed.calls:
                step.calls = _run_calls(r, parsed.calls, cfg)
                if r.stop == "max_tool_calls" and r.env.on_cap(r.stop):
                    _went_on(r)
            elif r.env.on_answer(out.text):
                _went_on(r)
            else:
                r.stop = "answer"
        active = [r for r in active if r.stop is None]
        done = bar.n
        bar.update(len(live) - len(active) - done)
        elapsed = time.perf_counter() - start
        bar.set_postfix(live=len(active), steps=steps, rollouts_s=f"{bar.n / elapsed:.2f}",  # steps: a long
                        tok_s=f"{generated / elapsed:.0f}")  # session moves the bar only at its end
    bar.close()
    return [_finish(r, fmt) for r in live]


def _finish(r: _Live, fmt: ChatFormat) -> Trajectory:
    answer = r.steps[-1].text if r.stop == "answer" else None
    shown, orig = r.env.render(), r.env.original()
    traj = Trajectory(
        task_id=r.task["id"], task=r.task.get("task", ""), steps=r.steps, messages=shown, answer=answer,
        score=r.env.score(answer),
        stop_reason=r.stop or "max_context_tokens",
        context_tokens_before=sum(len(fmt.encode(m["content"])) for m in orig[: r.q_len]),
        context_tokens_after=sum(len(fmt.encode(m["content"])) for m in shown[: r.q_len]),
        rollout_id=r.rollout_id, info=r.env.info(),
    )
    traj.reward = r.env.reward(traj)
    return traj
