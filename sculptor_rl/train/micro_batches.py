"""A generation round's rollouts as the micro-batches of its optimizer steps: group-normalized advantages, the
Algorithm 1 samples each rollout is cut into, and their packing into `steps_per_generation` right-padded
micro-batches, each normalized by the counts of its whole optimizer step (all ranks). The trainer
(`sculptor_rl.train.rl`) calls `micro_batches` once per round; the loss is `sculptor_rl.train.loss`."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import replace

import torch

from ..samples import Sample, build_samples, trim
from .masked_lm import kept_positions
from .shared_prefix import pack

log = logging.getLogger(__name__)


def group_advantages(rewards: torch.Tensor, num_generations: int, std: str | float = "group") -> torch.Tensor:
    """(r - mean of its group) / (std + 1e-4), rewards grouped as consecutive runs of `num_generations`.
    `std`: "group" (each group's), "none" (no division) or a number (TRL's "batch": the std of all rollouts)."""
    grouped = rewards.view(-1, num_generations)
    same = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # exactly 0, not the mean's rounding (2/3 x 8)
    centered = (grouped - grouped.mean(dim=1, keepdim=True)).masked_fill(same, 0.0).view(-1)
    if std == "none":
        return centered
    if std == "group":
        std = grouped.std(dim=1).repeat_interleave(num_generations)
    return centered / (std + 1e-4)


def split_balanced(lengths: list[int], parts: int) -> list[list[int]]:
    """Indices split into `parts` lists of about equal total length (longest first, each to the lightest part)."""
    bins: list[list[int]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        k = loads.index(min(loads))
        bins[k].append(i)
        loads[k] += lengths[i]
    return bins


def round_samples(trajs, advantages: list[float], policy_version: int | None = None, mask_truncated: bool = False,
                  segments_per_group: int = 0, num_generations: int = 1, seed: int = 0
                  ) -> tuple[list[Sample], list[float]]:
    """A round's trainable samples (Algorithm 1, trimmed) and each one's advantage, its rollout's;
    `policy_version`: the optimizer step whose weights generated the round. `mask_truncated` (TRL's
    `mask_truncated_completions`): a completion the engine cut at max_new_tokens is not trained (its rollout
    still counts in its group's advantages, as in TRL). `segments_per_group` > 0: DCPO's segment sampling of that
    many samples per group of `num_generations` rollouts (`dcpo_segments`, seeded by `seed`)."""
    samples, sample_adv = [], []
    for k, (traj, adv) in enumerate(zip(trajs, advantages)):
        for s in build_samples(traj):
            if mask_truncated:
                s = without_truncated(s, traj)
            if any(s.loss_mask):  # the rollout's index keeps its id unique in the round (a task drawn twice)
                samples.append(replace(trim(s), rollout_id=f"{k}:{s.rollout_id}", policy_version=policy_version))
                sample_adv.append(adv)
    if segments_per_group:
        chosen = dcpo_segments([int(s.rollout_id.split(":", 1)[0]) for s in samples], num_generations,
                               segments_per_group, random.Random(seed))
        samples, sample_adv = [samples[i] for i in chosen], [sample_adv[i] for i in chosen]
    return samples, sample_adv


def dcpo_segments(rollouts: list[int], num_generations: int, per_group: int, rng) -> list[int]:
    """DCPO's segment sampling (MemAct, arXiv 2510.12635; YuxiangZhang0114/MemAct-Anonymized 9b65b84,
    `verl/experimental/agent_loop/agent_loop.py`, `_sampling_random`): exactly `per_group` of a group's samples
    (segments) are trained, whatever its rollouts' counts. `rollouts[i]`: the index of sample i's rollout in the
    round (a group: consecutive runs of `num_generations` rollouts). With at least `per_group` rollouts, that many
    different rollouts give one segment each; with fewer, each gives one and the rest are filled round-robin over the
    rollouts (shuffled), unused segments first, again at random where a rollout has none left. Returns the chosen
    sample indices, group by group (a segment may be chosen twice)."""
    groups: dict[int, dict[int, list[int]]] = {}
    for i, k in enumerate(rollouts):
        groups.setdefault(k // num_generations, {}).setdefault(k, []).append(i)
    chosen = []
    for by_rollout in groups.values():
        ids = list(by_rollout)
        if len(ids) >= per_group:
            chosen += [rng.choice(by_rollout[k]) for k in rng.sample(ids, per_group)]
            continue
        used = {k: {rng.choice(by_rollout[k])} for k in ids}
        chosen += [next(iter(used[k])) for k in ids]
        order = rng.sample(ids, len(ids))
        for j in range(per_group - len(ids)):
            k = order[j % len(order)]
            fresh = [i for i in by_rollout[k] if i not in used[k]]
            pick = rng.choice(fresh or by_rollout[k])
            used[k].add(pick)
            chosen.append(pick)
    return chosen


def without_truncated(sample: Sample, traj) -> Sample:
    """`sample` with no loss on its completions that stopped at the length cap (`finish_reason` "length")."""
    mask = list(sample.loss_mask)
    for j in sample.completions:
        step = traj.steps[j]
        if step.finish_reason == "length":
            at = len(step.prompt_ids)  # the sample's ids begin with step j's prompt + completion
            mask[at : at + len(step.completion_ids)] = [0] * len(step.completion_ids)
    return replace(sample, loss_mask=mask)


def collate(samples: list[Sample], advantages: list[float], pad_id: int) -> dict[str, torch.Tensor]:
    """A right-padded micro-batch; `labels` are the input ids where the loss mask is 1, -100 elsewhere, and
    `rollout_ids` number the samples' rollouts (equal for samples of one rollout).
    Per-token tensors (`sampling_logps`: the engine's; later `old_logps`, `ref_logps`) are `[B, k]` at the
    `kept_positions`, the layout of `masked_token_logprobs`."""
    width = max(len(s.input_ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    engine_lp = torch.zeros(len(samples), width)
    for row, s in enumerate(samples):
        n = len(s.input_ids)
        ids[row, :n], attention[row, :n] = torch.tensor(s.input_ids), 1
        labels[row, :n] = torch.where(torch.tensor(s.loss_mask).bool(), ids[row, :n], -100)
        if s.logprobs is not None:
            engine_lp[row, :n] = torch.tensor(s.logprobs)
    rollout_index = {r: k for k, r in enumerate(dict.fromkeys(s.rollout_id for s in samples))}
    batch = {"input_ids": ids, "attention_mask": attention, "labels": labels,
             "advantages": torch.tensor(advantages, dtype=torch.float32),
             "rollout_ids": torch.tensor([rollout_index[s.rollout_id] for s in samples])}
    if all(s.logprobs is not None for s in samples):
        batch["sampling_logps"] = engine_lp[:, kept_positions(labels) + 1]
    return batch


def micro_batches(samples: list[Sample], advantages: list[float], args, *, level: str, beta: float, pad_id: int,
                  reduce: Callable[[torch.Tensor], torch.Tensor], world: int
                  ) -> tuple[list[dict], list[bool], float]:
    """`args.steps_per_generation` micro-batches, each normalized by the counts of its optimizer step (all ranks:
    `reduce` sums a tensor over the `world` ranks); also, per optimizer step, whether it carries any learning
    signal, and the share of samples left out of the computation (advantage 0).
    The rollout-level ratio (`level`) and the per-rollout weighting sum over all of a rollout's samples (equal
    `rollout_id`), so with either they stay in one micro-batch (`sculptor_rl.train.loss`); otherwise each
    sample is its own term and is packed alone, in prefix order: a group's first samples share their whole
    prompt (a rollout's own samples share only the system turn), and a micro-batch is bounded by
    `max_tokens_per_batch` whatever a rollout's length. On the long recipe's largest round that computes 34 %
    fewer tokens than whole rollouts at the same budget, in 0.74x the time (bench/rl_memory.py). A round that
    needs more micro-batches than `steps_per_generation` is packed by a budget raised in steps of 25 % until
    it fits.
    With beta 0 a rollout whose advantage is 0 (its group all scored alike) adds exactly nothing to the loss or
    its gradients (the policy term is times A, the LM term takes A > 0 only), so when the round is one
    optimizer step its samples are counted in the normalization but not computed: a round where every group
    agrees costs no training forward at all.
    A rank whose rollouts made no trainable sample trains untrained one-token fillers, entering every collective
    the others do; when no rank has one, every rank raises the same error."""
    spg, ga = args.steps_per_generation, args.gradient_accumulation_steps
    rollouts: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        rollouts.setdefault(s.rollout_id, []).append(i)
    members = list(rollouts.values())  # in round order: a group's rollouts are consecutive
    skipped = []
    if not beta and spg == ga:
        skipped = [i for m in members if advantages[m[0]] == 0 for i in m]
        members = [m for m in members if advantages[m[0]] != 0]
    units = members  # what a micro-batch takes whole: a rollout's samples, or one sample
    if level != "rollout" and args.loss_weighting != "per-rollout":
        units = sorted(([i] for m in members for i in m), key=lambda u: samples[u[0]].input_ids)
    budget = args.max_tokens_per_batch
    seqs = [[samples[i].input_ids for i in u] for u in units]
    packed = pack(seqs, budget, args.shared_prefix) if budget and units else []
    if len(packed) > spg:  # a larger budget keeps the sharing that an even split would lose
        needed = len(packed)
        while len(packed) > spg:
            budget += max(1, budget // 4)  # 25 %, and at least a token: a budget of 1-3 would not grow
            packed = pack(seqs, budget, args.shared_prefix)
        log.warning("the round's %d %s need %d micro-batches of max_tokens_per_batch=%d tokens, more than "
                    "steps_per_generation=%d: packed by %d tokens instead", len(units),
                    "rollouts" if units is members else "samples", needed, args.max_tokens_per_batch,
                    spg, budget)
    if not packed:
        packed = split_balanced([sum(len(samples[i].input_ids) for i in u) for u in units], spg)
    parts = [[i for r in part for i in units[r]] for part in packed] + [[]] * (spg - len(packed))
    batches = []
    for idx in parts:
        if idx:
            batches.append(collate([samples[i] for i in idx], [advantages[i] for i in idx], pad_id))
        else:  # fewer samples than micro-steps (or none on this rank): an untrained token keeps every rank's
            # forward/backward, and the collectives in them, in step
            batches.append(collate([Sample("filler", [pad_id], [0], [], None)], [0.0], pad_id))
    counts = []
    for step in range(spg // ga):  # trained samples, trained tokens, LM tokens (A > 0), rollouts, A != 0
        idx = [i for part in parts[step * ga : (step + 1) * ga] for i in part] + (skipped if step == 0 else [])
        idx = [i for i in idx if any(samples[i].loss_mask)]
        counts += [len(idx), sum(sum(samples[i].loss_mask) for i in idx),
                   sum(sum(samples[i].loss_mask) for i in idx if advantages[i] > 0),
                   len({samples[i].rollout_id for i in idx}), sum(advantages[i] != 0 for i in idx)]
    counts = reduce(torch.tensor(counts, dtype=torch.float32)).tolist()
    if not sum(counts[0::5]):  # every rank knows it after the same collectives: one error everywhere
        raise RuntimeError("no rollout on any rank produced a trainable completion (are the task prompts longer "
                           "than max_context_tokens or the engine's max_model_len?)")
    for k, b in enumerate(batches):
        n_samples, n_tokens, n_lm, n_rollouts, _ = counts[5 * (k // ga) : 5 * (k // ga) + 5]
        b.update(num_samples=n_samples / world, num_tokens=n_tokens / world, num_lm_tokens=n_lm / world,
                 num_rollouts=n_rollouts / world)
    # with beta 0 a step whose samples (on every rank) all have advantage 0 has a zero gradient
    signal = [bool(beta) or counts[5 * k + 4] > 0 for k in range(spg // ga)]
    return batches, signal, len(skipped) / max(len(samples), 1)
