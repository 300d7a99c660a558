"""The multi-turn agent loop: render → generate → parse → run tools → repeat, many rollouts at once.

The loop knows no tool, task family or reward rule: an environment (`sculptor_rl.envs.Env`) owns its system
prompt, tools, rendering, scoring and reward, and the loop calls its hooks. The messages are structured (assistant
turns carry `tool_calls` with ids, tool turns `tool_call_id`); each prompt is the policy's chat template over them
(`ChatFormat.prompt`), and each completion is parsed in the policy's own tool-call format. Per step it keeps the
exact prompt ids the engine saw, the generated ids and logprobs, the parsed calls and whether the context was
modified — everything Algorithm 1 (`sculptor_rl.samples`) needs to build training samples without re-tokenizing.

Two schedules (`LoopConfig.schedule`) run the same steps. Lock-step: each step sends every live rollout to
`engine.generate` at once, so a rollout whose tools have run waits for the batch's longest completion.
Per-rollout: one asyncio task per rollout awaits `engine.agenerate` and sends its next request as soon as its own
tools have run; the engine generates whatever is in flight together (vLLM's continuous batching). Environments
run in the caller's thread either way. Rollouts are independent, so they produce the same trajectories under both
schedules (with greedy decoding, up to the engine's batch-dependent rounding); an environment that shares state
between rollouts sees their steps in another order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, fields
from typing import Callable

from tqdm.auto import tqdm

from ..engines.base import Completion, Engine, Request
from ..envs.base import Env
from ..toolcalls import ParsedCompletion
from ..trajectory import Step, Trajectory
from .chat import ChatFormat

__all__ = ["LoopConfig", "SCHEDULES", "assistant_turn", "run_rollouts"]

log = logging.getLogger(__name__)

SCHEDULES = ("auto", "per-rollout", "lockstep")  # LoopConfig.schedule


@dataclass
class LoopConfig:
    """The loop's settings, under the same names in every config that runs the loop (rl, eval, serve, rollout)."""

    max_tool_calls: int = 20  # a rollout making more calls stops (reward -1); per turn where the env goes on (on_cap)
    max_context_tokens: int = 131072  # prompt + completion tokens; beyond: stop (reward -1), or the env's on_cap
    max_new_tokens: int = 512  # per completion
    parser: str = "auto"  # the tool-call format (toolcalls.PARSERS); auto: the one the chat template renders
    chat_template: str | None = None  # a template file or a named variant (agent.chat); None: the model's own
    chat_template_kwargs: dict | None = None  # passed to the template, e.g. {"enable_thinking": false}
    # per-rollout: each rollout sends its next request as soon as its own tools have run (an engine with
    # `agenerate`); lockstep: each step sends all live rollouts at once and waits for the slowest; auto:
    # per-rollout where the engine has `agenerate` and gains from it (not vLLM on CPU: `per_rollout_pays`) and no
    # event loop runs in the caller's thread, else lockstep
    schedule: str = "auto"

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
    q_len: int  # messages of the task (the env's first ones, or all of them when it went on): context measures
    steps: list[Step] = field(default_factory=list)
    prompt_text: str = ""  # the template's rendering of the current prompt
    seen: tuple[list[int], str] | None = None  # the last step's prompt + completion: ids and rendered text
    calls: int = 0  # calls made in the rollout: their ids (`call00007`, the 9 characters Mistral's templates ask)
    tool_calls: int = 0  # calls since the turn began (the rollout's start, or the env going on)
    answer: str | None = None  # the final completion's content (reasoning and end-of-turn token removed)
    stop: str | None = None  # "answer" | "max_tool_calls" | "max_context_tokens" | "template_error"


def _with_ids(message: dict, first: int) -> dict:
    """A structured assistant turn whose calls carry ids: their own (a model that writes ids), else numbered
    across the rollout from `first`."""
    calls = [{"type": "function", **call, "id": call.get("id") or f"call{first + k:05d}"}
             for k, call in enumerate(message.get("tool_calls") or [])]
    message = {k: v for k, v in message.items() if k != "tool_calls"}  # no empty list: Llama 3.1 raises on it
    return {**message, "tool_calls": calls} if calls else message


def assistant_turn(parsed: ParsedCompletion, first: int) -> dict:
    """The structured assistant message of a parsed completion, as the loop appends it: its content, its
    reasoning, and its well-formed calls with ids (`_with_ids`, numbered from `first`)."""
    calls = [{"function": {"name": c.name, "arguments": c.arguments}, **({"id": c.id} if c.id else {})}
             for c in parsed.calls if c.error is None]
    reasoning = {"reasoning_content": parsed.reasoning} if parsed.reasoning is not None else {}
    return _with_ids({"role": "assistant", "content": parsed.content, "tool_calls": calls, **reasoning}, first)


def _run_calls(r: _Live, calls: list[dict], errors: list[str], cfg: LoopConfig, example: str) -> list[dict]:
    """Execute one completion's calls in order (the well-formed ones, with their ids, then its malformed blocks
    answered with their error)."""
    records = []
    for call in [*calls, *errors]:
        known = {t["function"]["name"] for t in r.env.tools}  # an earlier call may have changed the tools
        if r.tool_calls == cfg.max_tool_calls:
            r.stop = "max_tool_calls"
            break
        r.tool_calls += 1
        if isinstance(call, str):  # a block that could not be parsed
            text = f"Error: {call}. Write a call as {example}."
            name = arguments = None
            ok = modified = False
            reply = {"role": "tool", "content": text}
        else:
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            result = r.env.execute(name, arguments)
            text, ok, modified = result.text, result.ok, result.modified
            reply = {"role": "tool", "content": text, "tool_call_id": call["id"], "name": name}
        r.env.append(reply)
        records.append({"name": name, "arguments": arguments, "ok": ok, "modified": modified,
                        "format_error": name is None or name not in known, "result": text})
    return records


def _went_on(r: _Live) -> None:
    """The env opened a new turn (`on_answer` or `on_cap` True): the prompt restarts from its `render()`, Algorithm 1
    closes a sample after the last step, and the call count starts again."""
    if r.steps:
        r.steps[-1].next_turn = True
    r.q_len, r.tool_calls, r.stop = len(r.env.render()), 0, None


def run_rollouts(
    tasks: list[dict],
    engine: Engine,
    fmt: ChatFormat,
    make_env: Callable[[dict, int], Env],
    cfg: LoopConfig = LoopConfig(),
    num_generations: int = 1,
    progress: bool = True,
) -> list[Trajectory]:
    """Run `num_generations` rollouts per task, on the schedule `cfg.schedule` picks (`LoopConfig`): lock-step,
    every step sends all live rollouts to the engine at once; per-rollout, each rollout sends its next request as
    soon as its own tools have run. Either way a rollout goes through the same steps (`_request`, `_apply`).
    After a step where an env went on (`on_answer` True), the prompt restarts from its `render()` (re-rendered by
    the chat template), so an env may rewrite or drop earlier messages there; Algorithm 1 closes a sample then.
    A cap (max_tool_calls, max_context_tokens) stops a rollout unless its env goes on (`on_cap`: the turn fails,
    the next one opens)."""
    pairs = [(task, g) for task in tasks for g in range(num_generations)]
    envs = [make_env(task, i) for i, (task, _) in enumerate(pairs)]
    live = [_Live(i, f"{task['id']}/{g}", task, env, q_len=len(env.render()))
            for i, ((task, g), env) in enumerate(zip(pairs, envs))]
    max_len = min(cfg.max_context_tokens, engine.max_model_len or cfg.max_context_tokens)
    bar = _Progress(len(live), progress)
    if _per_rollout(cfg, engine):
        asyncio.run(_all_rollouts(live, engine, fmt, cfg, max_len, bar))
    else:
        active = list(live)
        while active:
            requests, ready = [], []
            for r in active:
                req = _request(r, fmt, cfg, max_len)
                if req is not None:
                    requests.append(req)
                    ready.append(r)
            completions: list[Completion] = engine.generate(requests) if requests else []
            for r, req, out in zip(ready, requests, completions):
                bar.step(_apply(r, req, out, fmt, cfg))
            left = [r for r in active if r.stop is None]
            bar.finished(len(active) - len(left))
            active = left
    bar.close()
    return [_finish(r, fmt) for r in live]


def _per_rollout(cfg: LoopConfig, engine: Engine) -> bool:
    """Whether `cfg.schedule` runs the rollouts on their own (see `LoopConfig.schedule`)."""
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"schedule {cfg.schedule!r}: choose one of {', '.join(SCHEDULES)}")
    can = hasattr(engine, "agenerate")
    if cfg.schedule == "per-rollout" and not can:
        raise ValueError(f"schedule per-rollout: the engine {type(engine).__name__} has no agenerate; "
                         "use schedule lockstep")
    if cfg.schedule == "auto" and can and _loop_running():
        log.info("schedule auto: an event loop runs in this thread (a notebook?), so the rollouts go lock-step")
        return False
    if cfg.schedule == "auto":  # an engine may know that lock-step serves it better (vLLM on CPU cores)
        return can and getattr(engine, "per_rollout_pays", True)
    return cfg.schedule != "lockstep" and can


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _all_rollouts(live: list[_Live], engine: Engine, fmt: ChatFormat, cfg: LoopConfig, max_len: int,
                        bar: _Progress) -> None:
    """The per-rollout schedule: one task per rollout. The first error (an engine's, a served client gone) cancels
    the others, whose engine requests are then aborted, and is raised as the lock-step loop raises it."""

    async def one(r: _Live) -> None:
        while r.stop is None and (req := _request(r, fmt, cfg, max_len)) is not None:
            bar.step(_apply(r, req, await engine.agenerate(req), fmt, cfg))
        bar.finished(1)

    running = [asyncio.ensure_future(one(r)) for r in live]
    try:
        await asyncio.gather(*running)
    finally:
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)


def _request(r: _Live, fmt: ChatFormat, cfg: LoopConfig, max_len: int) -> Request | None:
    """The rollout's next request; None, and the rollout stopped, where the template refuses its conversation
    or its context is full and the env does not go on (`on_cap`)."""
    ids = _prompt(r, fmt)
    while ids is not None and len(ids) >= max_len and r.env.on_cap("max_context_tokens"):
        _went_on(r)
        ids = _prompt(r, fmt)
    if ids is None:
        return None
    room = max_len - len(ids)
    if room <= 0:
        r.stop = "max_context_tokens"
        return None
    return Request(prompt_ids=ids, messages=r.env.render(), tools=r.env.tools,
                   max_new_tokens=min(cfg.max_new_tokens, room), rollout_id=r.rollout_id)


def _apply(r: _Live, req: Request, out: Completion, fmt: ChatFormat, cfg: LoopConfig) -> int:
    """Take the engine's completion of `req` into the rollout: its step, the parsed turn, its calls run (or its
    answer given to the env); returns the tokens generated."""
    if out.token_ids is not None:
        ids = list(out.token_ids)
    elif out.message is not None:  # rendered in the policy's own format
        ids = fmt.render_completion(req.messages, req.tools, _with_ids(out.message, r.calls))
    else:
        ids = fmt.completion_ids(out.text)
    text = fmt.decode(ids)
    turn_text = fmt.strip_stop(text)
    parsed = fmt.parser.parse(turn_text, r.env.tools)
    message = assistant_turn(parsed, r.calls)
    calls = message.get("tool_calls", [])
    r.calls += len(calls)
    # a template that renders no calls (Phi-4-mini's) shows the turn as the model wrote it
    r.env.append(message if fmt.renders_calls else {"role": "assistant", "content": turn_text})
    step = Step(prompt_ids=req.prompt_ids, completion_ids=ids, logprobs=out.logprobs, text=turn_text,
                finish_reason=out.finish_reason)
    r.steps.append(step)
    r.seen = (req.prompt_ids + ids, r.prompt_text + text)
    if parsed.calls:
        step.calls = _run_calls(r, calls, [c.error for c in parsed.calls if c.error is not None], cfg,
                                fmt.parser.example)
        if r.stop == "max_tool_calls" and r.env.on_cap(r.stop):
            _went_on(r)
    elif r.env.on_answer(parsed.content):
        _went_on(r)
    else:
        r.stop, r.answer = "answer", parsed.content
    return len(ids)


class _Progress:
    """The rollouts bar: finished rollouts, with live ones, steps and rates beside them (a long session moves the
    bar only at its end)."""

    def __init__(self, total: int, show: bool):
        self.bar = tqdm(total=total, desc="rollouts", unit="rollout", disable=not show, dynamic_ncols=True)
        self.start, self.generated, self.steps = time.perf_counter(), 0, 0

    def step(self, generated: int) -> None:
        self.generated, self.steps = self.generated + generated, self.steps + 1

    def finished(self, n: int) -> None:
        self.bar.update(n)
        elapsed = time.perf_counter() - self.start
        self.bar.set_postfix(live=self.bar.total - self.bar.n, steps=self.steps,
                             rollouts_s=f"{self.bar.n / elapsed:.2f}", tok_s=f"{self.generated / elapsed:.0f}")

    def close(self) -> None:
        self.bar.close()


def _prompt(r: _Live, fmt: ChatFormat) -> list[int] | None:
    """The prompt the engine sees now: the template's rendering of the env's messages, extending the last step's
    ids where it extends its text (`ChatFormat.prompt`); None, and the rollout stopped, where the template refuses
    the conversation (e.g. a tool message with no call before it, after a malformed block)."""
    try:
        ids, r.prompt_text = fmt.prompt(r.env.render(), r.env.tools, r.seen)
    except Exception as e:  # jinja2 raises many kinds (TemplateError, the template's own raise_exception)
        log.warning("rollout %s: the chat template refused the conversation (%s); stopping it", r.rollout_id, e)
        r.stop = "template_error"
        return None
    return ids


def _finish(r: _Live, fmt: ChatFormat) -> Trajectory:
    answer = r.answer if r.stop == "answer" else None
    shown, orig = r.env.render(), r.env.original()
    traj = Trajectory(
        task_id=r.task["id"], task=r.task.get("task", ""), steps=r.steps, messages=shown, answer=answer,
        score=r.env.score(answer),
        stop_reason=r.stop or "max_context_tokens",
        context_tokens_before=sum(len(fmt.encode(m["content"])) for m in orig[: r.q_len]),
        context_tokens_after=sum(len(fmt.encode(m["content"])) for m in shown[: r.q_len]),
        rollout_id=r.rollout_id, info=r.env.info(), tokenizer=fmt.provenance,
    )
    traj.reward = r.env.reward(traj)
    return traj
