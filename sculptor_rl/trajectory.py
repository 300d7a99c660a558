"""The rollout record: what one multi-turn rollout did, step by step, on token ids. One JSON object per line.

Prompt ids are stored compactly: a step's prompt usually extends the previous step's prompt + completion
(no context modification in between), so each step stores how many of those tokens it reuses
(`prompt_reuse`) and the ids that follow (`prompt_new`). `Trajectory.prompt_ids(t)` rebuilds them exactly.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from .jsonl import read_jsonl, write_jsonl

__all__ = ["Step", "Trajectory", "write_trajectories", "read_trajectories"]


@dataclass
class Step:
    prompt_ids: list[int]  # exactly what the engine saw
    completion_ids: list[int]  # exactly what it generated (a text-only engine's text, tokenized once)
    logprobs: list[float] | None  # per completion token, from the engine
    text: str
    finish_reason: str = "stop"
    calls: list[dict] = field(default_factory=list)  # name, arguments, ok, modified, format_error, result
    next_turn: bool = False  # a completion without calls after which the env went on with a new user turn

    @property
    def modified(self) -> bool:
        """Did a call in this completion modify the context, or the env restart the prompt after it (a new
        turn)? Algorithm 1 starts a new sample after it."""
        return self.next_turn or any(c["modified"] for c in self.calls)


@dataclass
class Trajectory:
    task_id: str
    task: str
    steps: list[Step]
    messages: list[dict]  # the conversation as the model saw it at the end
    answer: str | None  # the final completion's text; None when a cap stopped the rollout
    score: float
    stop_reason: str  # "answer" | "max_tool_calls" | "max_context_tokens"
    context_tokens_before: int  # task messages (system + user), original
    context_tokens_after: int  # the same messages as rendered at the end
    reward: float = 0.0
    rollout_id: str = ""
    info: dict = field(default_factory=dict)  # the environment's own record (Env.info()), e.g. tools per turn

    def prompt_ids(self, t: int) -> list[int]:
        return self.steps[t].prompt_ids

    @property
    def num_tool_calls(self) -> int:
        return sum(len(s.calls) for s in self.steps)

    @property
    def format_errors(self) -> int:
        return sum(c["format_error"] for s in self.steps for c in s.calls)

    @property
    def tool_counts(self) -> Counter:
        return Counter(c["name"] for s in self.steps for c in s.calls if c["name"])

    @property
    def generated_tokens(self) -> int:
        return sum(len(s.completion_ids) for s in self.steps)

    @property
    def context_reduction(self) -> float:
        return 1.0 - self.context_tokens_after / max(self.context_tokens_before, 1)

    def to_json(self) -> dict:
        d = asdict(self)
        prev: list[int] = []
        for raw, step in zip(d["steps"], self.steps):
            reuse = _common_prefix(prev, step.prompt_ids)
            raw["prompt_reuse"], raw["prompt_new"] = reuse, step.prompt_ids[reuse:]
            del raw["prompt_ids"]
            prev = step.prompt_ids + step.completion_ids
        d["counts"] = {
            "tool_calls": self.num_tool_calls,
            "format_errors": self.format_errors,
            "per_tool": dict(self.tool_counts),
            "generated_tokens": self.generated_tokens,
            "context_reduction": round(self.context_reduction, 4),
        }
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Trajectory":
        d = dict(d)
        d.pop("counts", None)
        steps, prev = [], []
        for raw in d.pop("steps"):
            raw = dict(raw)
            ids = prev[: raw.pop("prompt_reuse")] + raw.pop("prompt_new")
            steps.append(Step(prompt_ids=ids, **raw))
            prev = ids + steps[-1].completion_ids
        return cls(steps=steps, **d)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case, at C speed
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


def write_trajectories(trajectories: Iterable[Trajectory], path: str | Path) -> int:
    return write_jsonl((t.to_json() for t in trajectories), path)


def read_trajectories(path: str | Path) -> Iterator[Trajectory]:
    return read_jsonl(path, Trajectory.from_json, "trajectory record")
