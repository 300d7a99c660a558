"""Token log-probabilities computed only where the loss needs them.

The LM head (49k x hidden for SmolLM2, 150k+ for Qwen) is a large share of a training step, and an ACM
sample trains a few hundred completion tokens out of thousands of context tokens. TRL's fused LM head skips
the untrained positions only on Triton devices; this does it everywhere through the model's own
`logits_to_keep` argument.
"""

from __future__ import annotations

import torch


def masked_token_logprobs(model, input_ids, attention_mask, labels) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of each trained next token, and the mask of trained positions, both `[batch, k]`.

    `labels` follow the HF convention (-100 = not trained, unshifted). The `k` kept positions are those whose
    next token is trained in any row of the batch; elsewhere in a row the mask is 0 and the value 0.
    """
    target = labels[:, 1:]
    mask = target != -100
    keep = mask.any(0).nonzero().squeeze(-1)  # hidden state p predicts token p + 1
    logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep, use_cache=False).logits
    target, mask = target[:, keep], mask[:, keep]
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logp * mask, mask
