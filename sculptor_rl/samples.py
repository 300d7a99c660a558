"""Conditional trajectory collection with incremental loss masks (Sculptor, Algorithm 1), on token ids.

A rollout is Q, completions C0..Cn and tool results T0..T(n-1). A sample closes at a completion C_i whose next
prompt does not begin with prompt_i + C_i, and at the last completion:

    sample = prompt_i + C_i      loss on C_j for j in (previous close, i]

`prompt_i` is what the engine saw when it generated C_i: the context as modified by every earlier
context-modifying call, followed by C_j, T_j of the completions since the last modification. Those earlier
completions therefore sit in the sample exactly where the engine saw them, and each completion is trained
once, in the context it was generated in. This is the design's general rule ("Any model"), which contains the
paper's: a context-modifying call rewrites the prompt, so a sample closes after it, and read-only calls never
close one; a chat template that re-renders earlier turns (Qwen3's empty think blocks, gpt-oss's analysis) closes
one too. The tool results after the closing completion (the paper's T_i) are left out: they change no loss.

Nothing is re-tokenized: completions are the engine's ids and prompts the ids the engine received, and a sample
is the last prompt + completion of its run, which begins with every earlier prompt + completion of the run. So a
completion sits in its sample exactly where the engine saw it by construction; re-tokenization drift (the most
reported bug in peer RL stacks) can only start a new sample, never train a context nobody saw.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

from .jsonl import read_jsonl, write_jsonl
from .trajectory import Trajectory, from_record

__all__ = ["Sample", "TokenizerMismatch", "build_samples", "trim", "write_samples", "read_samples",
           "policy_samples", "check_tokenizer"]


@dataclass
class Sample:
    rollout_id: str
    input_ids: list[int]
    loss_mask: list[int]  # 1 exactly on the trained completions' tokens (their end-of-turn token included)
    completions: list[int]  # indices of the trained completions in the rollout
    logprobs: list[float] | None  # the engine's logprobs, aligned with input_ids (0.0 off the mask); RL's old logp
    reward: float = 0.0
    tokenizer: dict = field(default_factory=dict)  # what made the ids (`ChatFormat.provenance`: name, hash)
    policy_version: int | None = None  # RL: the optimizer step whose weights generated it (staleness)


def trim(sample: Sample) -> Sample:
    """The sample without the tokens after its last trained one (a tool result): under causal attention they
    change no loss, and training needs not compute them."""
    end = max((i for i, m in enumerate(sample.loss_mask) if m), default=len(sample.loss_mask) - 1) + 1
    return replace(sample, input_ids=sample.input_ids[:end], loss_mask=sample.loss_mask[:end],
                   logprobs=None if sample.logprobs is None else sample.logprobs[:end])


def _extends(nxt: list[int], ids: list[int]) -> bool:
    return len(nxt) >= len(ids) and nxt[: len(ids)] == ids


def build_samples(traj: Trajectory) -> list[Sample]:
    """Algorithm 1, by the general rule: a sample is a maximal run of steps whose prompts each begin with the
    previous step's prompt + completion."""
    samples: list[Sample] = []
    first = 0  # the first completion not trained yet
    last = len(traj.steps) - 1
    for i, step in enumerate(traj.steps):
        ids = step.prompt_ids + step.completion_ids
        if i < last and _extends(traj.steps[i + 1].prompt_ids, ids):
            continue
        mask = [0] * len(ids)
        has_lp = all(traj.steps[j].logprobs is not None for j in range(first, i + 1))
        logprobs = [0.0] * len(ids) if has_lp else None
        for j in range(first, i + 1):  # step j's prompt + completion begin `ids` (the run's rule)
            at, out = len(traj.steps[j].prompt_ids), traj.steps[j].completion_ids
            mask[at : at + len(out)] = [1] * len(out)
            if has_lp:
                logprobs[at : at + len(out)] = traj.steps[j].logprobs
        samples.append(Sample(traj.rollout_id, ids, mask, list(range(first, i + 1)), logprobs, traj.reward,
                              traj.tokenizer))
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


class TokenizerMismatch(ValueError):
    """Token ids made by one tokenizer, about to be used with another."""


def policy_samples(trajs: Iterable[Trajectory], tokenizer: dict | None = None) -> list[Sample]:
    """Algorithm 1 samples of `trajs`, which must all come from one tokenizer (and `tokenizer`'s, where given):
    what `sculptor-rl samples` and the pipeline's collect stage write."""
    samples, made_by = [], None
    for t in trajs:
        if made_by is None:
            made_by = t.tokenizer
            if tokenizer is not None:
                check_tokenizer(made_by, tokenizer, f"trajectory {t.rollout_id}")
        elif t.tokenizer.get("hash") != made_by.get("hash"):
            raise TokenizerMismatch(f"trajectory {t.rollout_id} was made by tokenizer {_named(t.tokenizer)}, the ones "
                                    f"before it by {_named(made_by)}: samples of one file must share a tokenizer")
        samples += build_samples(t)
    return samples


def check_tokenizer(made_by: dict, using: dict, what: str) -> None:
    """A TokenizerMismatch unless ids made by `made_by` (a provenance record) may be used with `using`."""
    if not made_by.get("hash"):
        raise TokenizerMismatch(f"{what} records no tokenizer (made before sculptor-rl recorded one): its ids "
                                "cannot be checked; make it again")
    if made_by["hash"] != using["hash"]:
        raise TokenizerMismatch(f"{what} was made by tokenizer {_named(made_by)}, not {_named(using)} (vocabulary, "
                                "chat template or template kwargs differ): its token ids mean other text here. "
                                "Use the model (and chat_template) that made it, or make it again with this one")


def _named(p: dict) -> str:
    return f"{p.get('name') or '?'} [{p.get('hash') or 'no hash'}]"
