"""The shared-prefix test cases, without pytest: tests/test_shared_prefix.py runs them on CPU and
bench/gpu_check.py on CUDA (a GPU image may have no pytest). A tiny Llama, and the batches Algorithm 1 makes: a
shared system turn, a GRPO group, a rollout's samples after a context change, rows with nothing shared."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sculptor_rl.train.shared_prefix import token_logprobs

V = 97


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256))


def tokens(n, seed):
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def batch(rows: list[tuple[list[int], list[int]]]):
    """(ids, loss mask) rows → right-padded input_ids, attention_mask, labels."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for r, (toks, mask) in enumerate(rows):
        ids[r, : len(toks)], attention[r, : len(toks)] = torch.tensor(toks), 1
        labels[r, : len(toks)] = torch.where(torch.tensor(mask).bool(), torch.tensor(toks), -100)
    return ids, attention, labels


def trained_tail(toks, n):
    return toks, [0] * (len(toks) - n) + [1] * n


SYSTEM = tokens(40, 1)
PROMPT = SYSTEM + tokens(30, 2)
Q = tokens(50, 3)
C0, T0, C1, T1, C2 = (tokens(n, 10 + k) for k, n in enumerate((8, 12, 9, 11, 7)))
Q1 = Q[:20] + tokens(6, 4) + Q[20:]  # Q after a fragment call: tags inserted at token 20
Q2 = Q1[:35] + tokens(3, 5) + Q1[38:]  # then a fold further on
BATCHES = {
    "system turn": [trained_tail(SYSTEM + tokens(n, 20 + n), 6) for n in (15, 30, 22)],
    "grpo group": [trained_tail(PROMPT + c, len(c)) for c in
                   (tokens(12, 30), tokens(20, 31), tokens(5, 32) + tokens(9, 33), tokens(5, 32) + tokens(14, 34))],
    "rollout samples": [  # Algorithm 1: loss on C0 | C1, C2 | and a row ending inside the others' shared run
        (SYSTEM + Q + C0 + T0, [0] * (40 + 50) + [1] * 8 + [0] * 12),
        (SYSTEM + Q1 + C0 + T0 + C1 + T1 + C2, [0] * (40 + 56 + 8 + 12) + [1] * 9 + [0] * 11 + [1] * 7),
        (SYSTEM + Q2 + C0 + T0 + C1, [0] * (40 + 56 + 8 + 12) + [1] * 9),
        (SYSTEM + Q1[:30], [0] * 60 + [1] * 10)],
    "nothing shared": [trained_tail(tokens(n, 40 + n), 5) for n in (17, 33, 26)],
}


def loss_and_grads(model, rows, shared, **kw):
    model.zero_grad()
    device = next(model.parameters()).device
    ids, attention, labels = (t.to(device) for t in batch(rows))
    logp, mask, ent = token_logprobs(model, ids, attention, labels, entropy=True, shared_prefix=shared, **kw)
    loss = -logp.sum() / mask.sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return loss.detach(), logp.detach(), ent, grads
