"""Conditional trajectory collection with incremental loss masks (Sculptor, Algorithm 1), on token ids.

A rollout is Q, completions C0..Cn and tool results T0..T(n-1). A sample closes at every completion whose
calls modified the context and at the last completion:

    sample = prompt_i + C_i (+ T_i unless i is the last)      loss on C_j for j in (previous close, i]

`prompt_i` is what the engine saw when it generated C_i: the context as modified by every earlier
context-modifying call, followed by C_j, T_j of the completions since the last modification. Those earlier
completions therefore sit in the sample exactly where the engine saw them, and each completion is trained
once, in the context it was generated in. Read-only calls never close a sample.

Nothing is re-tokenized: completions are the engine's ids and prompts the ids the engine received. Building a
sample checks that every trained completion's prompt is a prefix of it (re-tokenization drift, the most
reported bug in peer RL stacks, would fail here loudly instead of training on a context nobody saw).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator

from .jsonl import read_jsonl, write_jsonl
from .trajectory import Trajectory, from_record

__all__ = ["Sample", "DriftError", "build_samples", "trim", "write_samples", "read_samples"]


class DriftError(AssertionError):
    """A sample's tokens differ from what the engine saw when it generated a trained completion."""


@dataclass
class Sample:
    rollout_id: str
    input_ids: list[int]
    loss_mask: list[int]  # 1 exactly on the trained completions' tokens (their end-of-turn token included)
    completions: list[int]  # indices of the trained completions in the rollout
    logprobs: list[float] | None  # the engine's logprobs, aligned with input_ids (0.0 off the mask); RL's old logp
    reward: float = 0.0


def trim(sample: Sample) -> Sample:
    """The sample without the tokens after its last trained one (a tool result): under causal attention they
    change no loss, and training needs not compute them."""
    end = max((i for i, m in enumerate(sample.loss_mask) if m), default=len(sample.loss_mask) - 1) + 1
    return replace(sample, input_ids=sample.input_ids[:end], loss_mask=sample.loss_mask[:end],
                   logprobs=None if sample.logprobs is None else sample.logprobs[:end])


def build_samples(traj: Trajectory, tool_ids=None) -> list[Sample]:
    """Algorithm 1. `tool_ids(step) -> list[int]` gives the ids of T_i appended after C_i (context only,
    never trained); without it samples end at C_i, which changes no loss."""
    samples: list[Sample] = []
    first = 0  # the first completion not trained yet
    last = len(traj.steps) - 1
    for i, step in enumerate(traj.steps):
        if not (step.modified or i == last):
            continue
        ids = step.prompt_ids + step.completion_ids
        mask = [0] * len(ids)
        has_lp = all(traj.steps[j].logprobs is not None for j in range(first, i + 1))
        logprobs = [0.0] * len(ids) if has_lp else None
        for j in range(first, i + 1):
            seen, out = traj.steps[j].prompt_ids, traj.steps[j].completion_ids
            at = len(seen)
            if ids[:at] != seen or ids[at : at + len(out)] != out:
                raise DriftError(f"rollout {traj.rollout_id}: completion {j} is not in sample {len(samples)} as the "
                                 f"engine generated it (prompt of step {i} does not extend step {j})")
            mask[at : at + len(out)] = [1] * len(out)
            if has_lp:
                logprobs[at : at + len(out)] = traj.steps[j].logprobs
        if i < last and tool_ids is not None:
            extra = tool_ids(step)
            ids, mask = ids + extra, mask + [0] * len(extra)
            if logprobs is not None:
                logprobs += [0.0] * len(extra)
        samples.append(Sample(traj.rollout_id, ids, mask, list(range(first, i + 1)), logprobs, traj.reward))
        first = i + 1
    return samples


def write_samples(samples: Iterable[Sample], path: str | Path) -> int:
    return write_jsonl((asdict(s) for s in samples), path)


def read_samples(path: str | Path) -> Iterator[Sample]:
    return read_jsonl(path, _sample, "sample record")


def _sample(record: dict) -> Sample:
    s = from_record(Sample, record)
    for name in ("loss_mask", "logprobs"):
        values = getattr(s, name)
        if values is not None and len(values) != len(s.input_ids):
            raise TypeError(f"{name} has {len(values)} entries for {len(s.input_ids)} input_ids")
    if not set(s.loss_mask) <= {0, 1}:
        raise TypeError("loss_mask holds values other than 0 and 1")
    return s


def policy_samples(trajs: Iterable[Trajectory], fmt) -> list[Sample]:
    """Algorithm 1 samples of `trajs`, tool results rendered by the policy's chat format `fmt` (`ChatFormat`):
    what `sculptor-rl samples` and the pipeline's collect stage write."""

    def tool_ids(step):
        return fmt.bridge_ids(tuple(("tool", c["result"]) for c in step.calls))

    return [s for t in trajs for s in build_samples(t, tool_ids)]
