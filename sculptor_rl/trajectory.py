"""The rollout record: what one multi-turn rollout did, step by step, on token ids. One JSON object per line.

Prompt ids are stored compactly: a step's prompt usually extends the previous step's prompt + completion
(no context modification in between), so each step stores how many of those tokens it reuses
(`prompt_reuse`) and the ids that follow (`prompt_new`). `Trajectory.prompt_ids(t)` rebuilds them exactly.
"""

from __future__ import annotations

import functools
import types
import typing
from collections import Counter
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Iterable, Iterator, TypedDict

from .jsonl import read_jsonl, write_jsonl

__all__ = ["CallRecord", "Step", "Trajectory", "write_trajectories", "read_trajectories", "from_record"]


class CallRecord(TypedDict):
    """One tool call of a step, as the loop records it."""

    name: str | None  # None for a call block that could not be parsed
    arguments: object
    ok: bool
    modified: bool
    format_error: bool
    result: str


@dataclass
class Step:
    prompt_ids: list[int]  # exactly what the engine saw
    completion_ids: list[int]  # exactly what it generated (a text-only engine's text, tokenized once)
    logprobs: list[float] | None  # per completion token, from the engine
    text: str
    finish_reason: str = "stop"
    calls: list[CallRecord] = field(default_factory=list)
    next_turn: bool = False  # a completion without calls after which the env went on with a new user turn

    @property
    def modified(self) -> bool:
        """Did a call in this completion modify the context, or the env restart the prompt after it (a new
        turn)? (Algorithm 1 starts a new sample where the next prompt does not extend this one, which such a
        change causes, and so does a template that re-renders history.)"""
        return self.next_turn or any(c["modified"] for c in self.calls)


@dataclass
class Trajectory:
    task_id: str
    task: str
    steps: list[Step]
    messages: list[dict]  # the conversation as the model saw it at the end
    answer: str | None  # the final completion's text; None when a cap stopped the rollout
    score: float
    stop_reason: str  # "answer" | "max_tool_calls" | "max_context_tokens" | "template_error"
    context_tokens_before: int  # task messages (system + user), original
    context_tokens_after: int  # the same messages as rendered at the end
    reward: float = 0.0
    rollout_id: str = ""
    info: dict = field(default_factory=dict)  # the environment's own record (Env.info()), e.g. tools per turn
    tokenizer: dict = field(default_factory=dict)  # what made the ids (`ChatFormat.provenance`: name, hash)

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
        """The inverse of `to_json`; a record of the wrong shape is a TypeError naming the field."""
        if not isinstance(d, dict) or not isinstance(d.get("steps"), list):
            raise TypeError("a trajectory record is an object with a list 'steps'")
        d = dict(d)
        d.pop("counts", None)
        steps, prev = [], []
        for t, raw in enumerate(d.pop("steps")):
            where = f"steps[{t}]."
            if not isinstance(raw, dict):
                raise TypeError(f"{where[:-1]} must be an object")
            raw = dict(raw)
            reuse = _checked(raw.pop("prompt_reuse", None), int, where + "prompt_reuse")
            if not 0 <= reuse <= len(prev):
                raise TypeError(f"{where}prompt_reuse={reuse} but the step before holds {len(prev)} tokens")
            ids = prev[:reuse] + _checked(raw.pop("prompt_new", None), list[int], where + "prompt_new")
            steps.append(from_record(Step, {"prompt_ids": ids, **raw}, where))
            prev = ids + steps[-1].completion_ids
        return from_record(cls, {"steps": steps, **d})


def from_record(cls, record: dict, where: str = ""):
    """The dataclass `cls` built from a JSON object whose fields are checked against `cls`'s annotations, so a
    wrong record fails here, as a TypeError naming the field (e.g. `steps[2].completion_ids[5]`), not later."""
    if not isinstance(record, dict):
        raise TypeError(f"{where or 'the record'} must be an object, got {type(record).__name__}")
    hints = _hints(cls)
    declared = {f.name: f for f in fields(cls)}
    for name in record:
        if name not in declared:
            raise TypeError(f"unknown field {where}{name!r} (fields: {', '.join(declared)})")
    for name, f in declared.items():
        if name not in record and f.default is MISSING and f.default_factory is MISSING:
            raise TypeError(f"missing field {where}{name!r}")
    return cls(**{name: _checked(value, hints[name], where + name) for name, value in record.items()})


_SCALARS = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}  # the JSON types of an annotation


def _checked(value, hint, where: str):
    """`value` if it is of the annotated type `hint` (the JSON kinds: str, int, float, bool, None, list[X],
    dict, dataclasses, TypedDicts and unions of them), else a TypeError naming `where`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is object or (is_dataclass(hint) and isinstance(value, hint)):
        return value
    if origin in (types.UnionType, typing.Union):
        for option in args:
            try:
                return _checked(value, option, where)
            except TypeError:
                pass
    elif hint is type(None) and value is None:
        return value
    elif origin is list and isinstance(value, list):
        (item,) = args
        kinds = _SCALARS.get(item)
        if kinds and all(type(x) in kinds for x in value):  # the fast path for token ids and logprobs
            return value
        return [_checked(x, item, f"{where}[{i}]") for i, x in enumerate(value)]
    elif type(value) in _SCALARS.get(hint, ()) or hint is dict and type(value) is dict:
        return value
    elif typing.is_typeddict(hint) and isinstance(value, dict):
        missing = [k for k in _hints(hint) if k not in value]
        if missing:
            raise TypeError(f"{where} lacks {', '.join(map(repr, missing))}")
        for k, h in _hints(hint).items():
            _checked(value[k], h, f"{where}.{k}")
        return value
    elif is_dataclass(hint) and isinstance(value, dict):
        return from_record(hint, value, where + ".")
    raise TypeError(f"{where} must be {_name(hint)}, got {type(value).__name__} {value!r:.60}")


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


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
