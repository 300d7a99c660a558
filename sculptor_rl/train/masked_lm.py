"""Token log-probabilities computed only where the loss needs them.

The LM head (49k x hidden for SmolLM2, 150k+ for Qwen) is a large share of a training step, and an ACM
sample trains a few hundred completion tokens out of thousands of context tokens. TRL's fused LM head skips
the untrained positions only on Triton devices; this does it everywhere through the model's own
`logits_to_keep` argument.
"""

from __future__ import annotations

import torch


def masked_token_logprobs(model, input_ids, attention_mask, labels, temperature: float = 1.0,
                          entropy: bool = False) -> tuple[torch.Tensor, ...]:
    """Log-probability of each trained next token, and the mask of trained positions, both `[batch, k]`.

    `labels` follow the HF convention (-100 = not trained, unshifted). The `k` kept positions are those whose
    next token is trained in any row of the batch (`kept_positions`); elsewhere in a row the mask is 0 and the
    value 0. Logits are divided by `temperature` (RL scores tokens under the sampling distribution). With
    `entropy`, a third `[batch, k]` tensor: each kept next-token distribution's entropy (no gradient).
    """
    keep = kept_positions(labels)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep, use_cache=False).logits
    target = labels[:, 1:][:, keep]
    mask = target != -100
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    if not entropy:
        return logp * mask, mask
    with torch.no_grad():
        ent = -(logp_all.exp() * logp_all).sum(-1)
    return logp * mask, mask, ent * mask


def kept_positions(labels: torch.Tensor) -> torch.Tensor:
    """The positions whose hidden state predicts a trained token (p predicts token p + 1) in any row."""
    return (labels[:, 1:] != -100).any(0).nonzero().squeeze(-1)
