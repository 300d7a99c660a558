"""The GSPO / GRPO clipped objectives and the auxiliary LM loss, on batches of Algorithm 1 samples.

All tensors are `[B, T]`: B samples, T positions of trained tokens (padded); `mask` is 1 on a sample's trained
tokens (its loss mask) and 0 on padding. `advantages` is `[B]`: the group-normalized advantage of the rollout
the sample was cut from (every sample of a rollout carries the same one). `rollout_ids` is `[B]`: equal for the
samples cut from one rollout (default: every sample its own rollout). R(i) below is sample i's rollout.

    ratio    token    ("GRPO"):  r_it = exp(logp_it - old_it)
             sequence ("GSPO"):  r_i  = exp(mean_t∈mask_i (logp_it - old_it))          (same for all t of i)
             rollout  (eq. 2):   r_i  = exp(Σ_{j∈R(i)} Σ_t m_jt (logp_jt - old_jt) / Σ_{j∈R(i)} Σ_t m_jt)
    per token                    l_it = -min(r A_i, clip(r, 1 - ε_low, 1 + ε_high) A_i) + β KL_it
                                 (`delta`, TRL's two-sided clipping: min(r, δ) in the first term)
    loss_type "grpo", loss_weighting
      "per-sample":              L = Σ_i (Σ_t m_it l_it / Σ_t m_it) / N_samples     (mean over samples)
      "per-rollout":             L = Σ_R (Σ_{i∈R} Σ_t m_it l_it / Σ_{i∈R} Σ_t m_it) / N_rollouts
    loss_type "dapo":            L = Σ_it m_it l_it / N_tokens                       (mean over trained tokens)
    LM term (lm_coef):           L_lm = -Σ_{i: A_i > 0} Σ_t m_it logp_it / N_lm_tokens

GSPO as in its paper (and TRL) is level "sequence" with loss_type "grpo": the mean over samples of each
sample's sequence-level clipped objective. The Sculptor paper's eq. 1-2 apply GSPO to a trajectory τ_i whose
completions Algorithm 1 spreads over several samples, each completion trained once in the context it was
generated in; so π(τ_i|x) is the product over the rollout's samples of their trained tokens' probabilities and
|τ_i| their count. Level "rollout" is that ratio exactly (one ratio for all of a rollout's tokens), and
loss_weighting "per-rollout" makes each rollout one term of eq. 1's (1/G) Σ_i however many samples it was cut
into: with both (and β = 0) every trained token of rollout i carries the same -min(s_i A_i, clip(s_i) A_i), so L
is eq. 1's mean over rollouts; both are the trainer's defaults. "per-sample" (TRL's unit) counts each sample
once instead, which gives a rollout with more context changes more weight. "per-rollout" takes loss_type "grpo" (a mean per rollout);
"dapo" already counts every token once.

Behaviour-policy correction (overlapped rounds, `max_staleness` > 0): the tokens were sampled by the engine at
an older policy version μ, not by π_old, so each token's term (before the KL term, as TRL) is multiplied by the
truncated importance weight of TRL's `vllm_importance_sampling_mode` (`behaviour_weights`), with μ the engine's
logprobs and C_min, C_max TRL's `vllm_importance_sampling_clip_min` / `_max`:
    token_truncate:     w_it = clamp(exp(old_it - μ_it), C_min, C_max)
    sequence_truncate:  w_i  = clamp(exp(Σ_t m_it (old_it - μ_it)), C_min, C_max)
    token_mask / sequence_mask: the same ratios, set to 0 outside [C_min, C_max] instead of clamped.
With level "rollout" the sequence modes take one weight per rollout, the sum over all of its samples' trained
tokens, as its ratio does.
Truncation bounds the variance a stale or mismatched token can add (Yao et al. 2025, "truncated importance
sampling"); the weights are constants (no gradient through them).

KL_it is TRL's k3 estimator exp(ref - logp) - (ref - logp) - 1 (times r when `bias_correction_kl`, as TRL
does). The LM term is next-token NLL on the trained tokens of samples with a positive advantage (rollouts that
beat their group): behaviour cloning of the better rollouts, which keeps the policy close to well-formed tool
use. On all sampled tokens instead it would be zero in expectation (E_y~π[∇ log π(y)] = 0) and only add noise.

A rollout yields a variable number of samples, so one optimizer step's samples are split into micro-batches
of unequal size. Each micro-batch is therefore normalized by the counts of the WHOLE step (all micro-batches,
all ranks) divided by the number of ranks: summing the micro-batches' gradients and averaging them over ranks
(DDP / DeepSpeed) then gives exactly the mean over the step, however the samples fell. With its own counts, one
micro-batch gives TRL's `GRPOTrainer` loss for the same `importance_sampling_level` and `loss_type`.
The rollout ratio and the per-rollout mean are sums over all of a rollout's samples, so with either the trainer
keeps a rollout's samples in one micro-batch (`SculptorGRPOTrainer._micro_batches`): carrying partial sums
across micro-batches instead would need the other micro-batches' current logprobs before the first backward
pass, an extra forward of the whole step. Otherwise every sample is its own term and may go anywhere.
"""

from __future__ import annotations

import math

import torch

__all__ = ["policy_loss", "lm_loss", "behaviour_weights", "LOSS_TYPES", "LOSS_WEIGHTINGS", "IMPORTANCE_SAMPLING_LEVELS",
           "BEHAVIOUR_CORRECTIONS"]

LOSS_TYPES = ("grpo", "dapo")
LOSS_WEIGHTINGS = ("per-sample", "per-rollout")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence", "rollout")
BEHAVIOUR_CORRECTIONS = ("token_truncate", "sequence_truncate", "token_mask", "sequence_mask")  # TRL's modes


def policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    level: str,
    loss_type: str,
    epsilon_low: float,
    epsilon_high: float,
    rollout_ids: torch.Tensor | None = None,
    loss_weighting: str = "per-sample",
    num_samples: float | torch.Tensor | None = None,
    num_rollouts: float | torch.Tensor | None = None,
    num_tokens: float | torch.Tensor | None = None,
    beta: float = 0.0,
    ref_logps: torch.Tensor | None = None,
    bias_correction_kl: bool = True,
    importance_weights: torch.Tensor | None = None,
    delta: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped surrogate loss (to minimize) and detached statistics for logging. `importance_weights`: the
    behaviour-policy correction (`behaviour_weights`, broadcast to `[B, k]`), None for on-policy samples.
    `delta`: two-sided clipping, TRL's: the unclipped ratio capped at `delta` too (None: no cap).

    `num_samples` / `num_rollouts` / `num_tokens` are the normalizers (defaults: this batch's own counts of
    samples with a trained token, of rollouts with one, and of trained tokens)."""
    if loss_weighting not in LOSS_WEIGHTINGS:
        raise ValueError(f"loss_weighting must be one of {LOSS_WEIGHTINGS}, got {loss_weighting!r}")
    if loss_weighting == "per-rollout" and loss_type != "grpo":
        raise ValueError("loss_weighting 'per-rollout' takes loss_type 'grpo' ('dapo' counts every token once)")
    mask = mask.to(logps.dtype)
    lengths = mask.sum(-1)
    adv = advantages.unsqueeze(-1)
    log_ratio = logps - old_logps
    # per-rollout sums of per-sample values: rollout r's total at position r (0 past the last rollout),
    # `which[i]` = sample i's rollout
    ids = torch.arange(len(logps), device=logps.device) if rollout_ids is None else rollout_ids.to(logps.device)
    which = torch.unique(ids, return_inverse=True)[1]

    def rollout_sum(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(x), dtype=x.dtype, device=x.device).index_add(0, which, x)

    rollout_lengths = rollout_sum(lengths)
    if level == "token":
        log_w = log_ratio
    elif level == "sequence":
        log_w = ((log_ratio * mask).sum(-1) / lengths.clamp(min=1.0)).unsqueeze(-1)
    elif level == "rollout":
        mean = rollout_sum((log_ratio * mask).sum(-1)) / rollout_lengths.clamp(min=1.0)
        log_w = mean[which].unsqueeze(-1)
    else:
        raise ValueError(f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {level!r}")
    ratio = torch.exp(log_w)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    # as TRL: the cap applies to the first term's ratio only (the KL's bias correction keeps the uncapped one)
    capped = ratio if delta is None else torch.clamp(ratio, max=delta)
    per_token = -torch.min(capped * adv, clipped * adv)
    if importance_weights is not None:
        per_token = per_token * importance_weights
    if beta:
        if ref_logps is None:
            raise ValueError("beta > 0 needs the reference model's logprobs")
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        per_token = per_token + beta * (kl * ratio if bias_correction_kl else kl)
    per_token = per_token.expand_as(mask)
    if loss_type == "grpo" and loss_weighting == "per-rollout":
        per_rollout = rollout_sum((per_token * mask).sum(-1)) / rollout_lengths.clamp(min=1.0)
        n = (rollout_lengths > 0).sum() if num_rollouts is None else num_rollouts
        loss = per_rollout.sum() / _at_least_one(n, logps)
    elif loss_type == "grpo":
        per_sample = (per_token * mask).sum(-1) / lengths.clamp(min=1.0)
        n = (lengths > 0).sum() if num_samples is None else num_samples
        loss = per_sample.sum() / _at_least_one(n, logps)
    elif loss_type == "dapo":
        n = lengths.sum() if num_tokens is None else num_tokens
        loss = (per_token * mask).sum() / _at_least_one(n, logps)
    else:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    with torch.no_grad():
        low = ((ratio < 1 - epsilon_low) & (adv < 0)).to(mask.dtype).expand_as(mask)
        high = ((ratio > 1 + epsilon_high) & (adv > 0)).to(mask.dtype).expand_as(mask)
        tokens = mask.sum().clamp(min=1.0)
        stats = {"clip_ratio/low_mean": (low * mask).sum() / tokens,
                 "clip_ratio/high_mean": (high * mask).sum() / tokens,
                 "ratio_mean": (ratio.expand_as(mask) * mask).sum() / tokens}
        if beta:
            stats["kl"] = (kl * mask).sum() / tokens
    return loss, stats


def behaviour_weights(old_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor, mode: str,
                      clip_min: float | None, clip_max: float | None,
                      rollout_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Truncated (or masked) importance weights π_old / μ of the module docstring, `[B, k]` (token modes) or `[B, 1]`
    (sequence modes), detached. A position whose engine logprob is NaN gets ratio 1, as in TRL. `rollout_ids`
    (level rollout): a sequence mode's weight is the rollout's, the product over all of its samples' trained
    tokens (eq. 2's π(τ|x) / μ(τ|x)), one weight shared by its samples."""
    if mode not in BEHAVIOUR_CORRECTIONS:
        raise ValueError(f"vllm_importance_sampling_mode must be one of {BEHAVIOUR_CORRECTIONS}, got {mode!r}")
    diff = torch.nan_to_num((old_logps.detach() - sampling_logps) * mask.to(old_logps.dtype), nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
        if rollout_ids is not None:
            which = torch.unique(rollout_ids.to(diff.device), return_inverse=True)[1]
            diff = torch.zeros_like(diff).index_add(0, which, diff)[which]
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def lm_loss(logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
            num_tokens: float | torch.Tensor | None = None) -> torch.Tensor:
    """Next-token NLL on the trained tokens of positive-advantage samples, over `num_tokens` (default: their count)."""
    m = mask.to(logps.dtype) * (advantages > 0).to(logps.dtype).unsqueeze(-1)
    n = m.sum() if num_tokens is None else num_tokens
    return -(logps * m).sum() / _at_least_one(n, logps)


def _at_least_one(n, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(n, dtype=like.dtype, device=like.device).clamp(min=1.0)
