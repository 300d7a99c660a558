"""Shared-prefix forward: rows of a micro-batch that begin with the same tokens are computed once up to where
they part.

Algorithm 1 samples share a lot: every sample holds the same system turn (the tool schemas, ~1k tokens for
the embedded model), a GRPO group's rollouts share the task prompt, and a rollout's samples share everything up
to the first context change. The rows form a prefix tree (`prefix_tree`); each node's tokens are forwarded
once, with `use_cache=True`, and its children continue from its keys/values, expanded along the batch dim, so
the gradients of every row flow back into the shared tokens once. Each node is one forward of batch 1: no
padding, and the LM head runs only where a trained token of one of its rows is predicted (`masked_lm`; siblings
batched together would each need the union of their positions). The position before a child's first token is
its parent's last: its logits are the parent's, gathered at each row's own next token. The result has
`masked_token_logprobs`' `[B, k]` layout, and losses and gradients equal the plain computation to float
tolerance (`tests/test_shared_prefix.py`).

Memory: each child's attention holds its own copy of the prefix's keys/values (HF's cache concatenates) — per
token 2·kv_heads·head_dim values per layer, against the plain path's full activations of every row; the prefix's
activations are stored once.

Under DeepSpeed and DDP the tree runs inside one call of the wrapper, the branches calling the module it wraps
(`_in_one_engine_forward`): every rank calls it once per micro-batch, whatever its tree, and under DeepSpeed the
gradients reach its reduce hooks in one order on every rank (`_with_ordered_gradients`). A step's gradients on 2
ranks equal the 1-rank step's (`tests/test_many_ranks.py`). Sharded parameters (ZeRO-3, FSDP2) take the plain
path: they are gathered at each module call, and ranks with different trees would gather different numbers of
times.

Falls back to the plain path, with one log line saying why, for a model whose forward takes no
`past_key_values`, sliding-window or other non-full attention layers (a cached prefix would not be windowed like
the plain row), rows that are not right-padded, and gradient checkpointing with gradients on: HF's checkpointed
layers drop `past_key_values` (recomputing a layer would append to the cache twice). Without gradients (old and
reference logprobs) checkpointing does nothing useful, so it is switched off for that forward instead.

Micro-batches: `computed_tokens` is what a micro-batch costs (each shared prefix once, or padded rows), and
`pack` fills micro-batches up to a token budget from units (a sample, or a rollout's samples) kept in an order
where neighbours share prefixes. `BatchSettings` holds the two config fields SFT and RL share.
"""

from __future__ import annotations

import inspect
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn.utils.stateless import _reparametrize_module  # torch.func.functional_call's swap
from transformers import AttentionInterface, DynamicCache, PretrainedConfig

from .masked_lm import kept_positions, masked_token_logprobs

log = logging.getLogger(__name__)

MIN_SHARED = 32  # a shared run shorter than this is recomputed per row: not worth a forward call of its own
_logged: set[str] = set()


@dataclass
class BatchSettings:
    """The micro-batch fields of the SFT and RL configs (one name in both)."""

    shared_prefix: bool = field(default=True, metadata={
        "help": "compute the tokens that rows of a micro-batch share (system turn, a group's prompt, a rollout's "
                "samples up to a context change) once; same loss and gradients (sculptor_rl.train.shared_prefix)"})
    max_tokens_per_batch: int | None = field(default=None, metadata={
        "help": "micro-batches hold up to this many computed tokens (shared prefixes counted once with "
                "shared_prefix) instead of a row count; None: SFT takes per_device_train_batch_size rows, RL "
                "splits each round into steps_per_generation micro-batches of about equal size"})


@dataclass
class Branch:
    """Tokens [start, end) that every row in `rows` holds; `children` continue some of them from `end`."""

    rows: list[int]
    start: int
    end: int
    children: list[Branch] = field(default_factory=list)


def prefix_tree(ids: torch.Tensor, lengths: list[int], min_shared: int = MIN_SHARED) -> list[Branch]:
    """The rows of `ids` ([B, T], row i's tokens are ids[i, :lengths[i]]) as a prefix tree: the root branches."""
    return _branches(ids, lengths, list(range(len(lengths))), 0, min_shared)


def _branches(ids, lengths, rows, start, min_shared) -> list[Branch]:
    by_token: dict[int, list[int]] = {}
    for r in rows:
        if lengths[r] > start:
            by_token.setdefault(int(ids[r, start]), []).append(r)
    out = []
    for group in by_token.values():
        end = _common_end(ids, lengths, group, start)
        if len(group) == 1 or end - start >= min_shared:
            out.append(Branch(group, start, end, _branches(ids, lengths, group, end, min_shared)))
            continue
        # a short shared run: each sub-branch carries these tokens itself
        for b in _branches(ids, lengths, group, end, min_shared):
            out.append(Branch(b.rows, start, b.end, b.children))
        out += [Branch([r], start, end) for r in group if lengths[r] == end]
    return out


def _common_end(ids, lengths, rows, start) -> int:
    """Where the rows part (or the first of them ends); a lone row runs to its own end."""
    end = min(lengths[r] for r in rows)
    if len(rows) == 1:
        return end
    differ = (ids[rows, start:end] != ids[rows[0], start:end]).any(0).nonzero()
    return start + int(differ[0]) if len(differ) else end


class _PrefixCausal(torch.autograd.Function):
    """Attention of a branch's L queries over S keys: the first S - L (its ancestors', cached) all visible, its own
    L causal. SDPA with a mask would compute all L x S scores (the CPU flash kernel skips blocks only for
    `is_causal`, which aligns top-left) and HF would build that mask in every forward; instead two flash calls,
    unmasked and causal, merged by their log-sum-exp. The backward runs the flash backward of each part with the
    MERGED output and log-sum-exp, which gives each part's exact share of the gradients (as ring attention does)."""

    @staticmethod
    def forward(ctx, q, k, v, scale):
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        past = k.shape[2] - q.shape[2]
        if past:
            o1, lse1 = flash(q, k[:, :, :past], v[:, :, :past], 0.0, False, scale=scale)
            o2, lse2 = flash(q, k[:, :, past:], v[:, :, past:], 0.0, True, scale=scale)
            lse = torch.logaddexp(lse1, lse2)
            out = (torch.exp(lse1 - lse)[..., None] * o1 + torch.exp(lse2 - lse)[..., None] * o2).to(q.dtype)
        else:
            out, lse = flash(q, k, v, 0.0, True, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.past = scale, past
        return out

    @staticmethod
    def backward(ctx, grad):
        backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
        q, k, v, out, lse = ctx.saved_tensors
        past = ctx.past
        if not past:
            return *backward(grad, q, k, v, out, lse, 0.0, True, scale=ctx.scale), None
        dq1, dk1, dv1 = backward(grad, q, k[:, :, :past], v[:, :, :past], out, lse, 0.0, False, scale=ctx.scale)
        dq2, dk2, dv2 = backward(grad, q, k[:, :, past:], v[:, :, past:], out, lse, 0.0, True, scale=ctx.scale)
        return dq1 + dq2, torch.cat([dk1, dk2], 2), torch.cat([dv1, dv2], 2), None


def prefix_causal_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """HF attention function (`AttentionInterface`) for one branch of a prefix tree: batch 1, no padding, keys =
    the cached ancestors' then its own. Registered as PREFIX_ATTENTION; no mask function is registered under
    that name, so HF builds no mask."""
    out = _PrefixCausal.apply(query, key, value, scaling)  # the flash kernel takes GQA's fewer key/value heads
    return out.transpose(1, 2).contiguous(), None


PREFIX_ATTENTION = "sculptor_prefix_causal"
AttentionInterface.register(PREFIX_ATTENTION, prefix_causal_attention)


@contextmanager
def _prefix_attention(model, device: torch.device):
    """Branches attend with `prefix_causal_attention` where it applies (SDPA models on CPU); elsewhere with the
    model's own implementation and HF's mask (same result, every masked score computed)."""
    configs = [m.config for m in model.modules() if isinstance(getattr(m, "config", None), PretrainedConfig)]
    configs = list({id(c): c for c in configs}.values())
    swap = device.type == "cpu" and all(c._attn_implementation == "sdpa" and not (
        model.training and getattr(c, "attention_dropout", 0.0)) for c in configs)  # it has no dropout
    if swap:
        for c in configs:
            c._attn_implementation = PREFIX_ATTENTION
    try:
        yield
    finally:
        if swap:
            for c in configs:
                c._attn_implementation = "sdpa"


def fallback_reason(model) -> str | None:
    """Why `model` cannot share prefixes (None: it can)."""
    base = model
    while hasattr(base, "module"):  # DDP, DeepSpeed
        base = base.module
    if hasattr(base, "get_base_model"):  # PEFT
        base = base.get_base_model()
    cfg = getattr(base, "config", None)
    if "past_key_values" not in inspect.signature(base.forward).parameters or getattr(base, "_is_stateful", False):
        return f"{type(base).__name__}'s forward takes no past_key_values"
    if set(getattr(cfg, "layer_types", None) or ()) - {"full_attention"} or getattr(cfg, "sliding_window", None):
        return "the model has sliding-window or other non-full attention layers"
    if sharded(base):
        return ("the parameters are sharded (ZeRO-3, FSDP): each module call gathers them, and ranks with different "
                "prefix trees would gather a different number of times (a hang)")
    if torch.is_grad_enabled() and base.training and _checkpointed(base):
        return ("gradient checkpointing is on (HF's checkpointed layers drop past_key_values); set "
                "gradient_checkpointing: false to share prefixes")
    return None


def sharded(model) -> bool:
    """Whether `model`'s parameters are sharded across ranks and gathered at each module call: DeepSpeed ZeRO-3
    (`ds_id` on every parameter) or FSDP2 (DTensor parameters)."""
    p = next(model.parameters(), None)
    return p is not None and (hasattr(p, "ds_id") or type(p).__name__ == "DTensor" or
                              type(getattr(p, "data", None)).__name__ == "DTensor")


def _checkpointed(model) -> list:
    return [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True]


@contextmanager
def _no_checkpointing(model):
    """Without gradients checkpointing saves nothing; HF's checkpointed layers would drop the cache."""
    layers = [] if torch.is_grad_enabled() else _checkpointed(model)
    for m in layers:
        m.gradient_checkpointing = False
    try:
        yield
    finally:
        for m in layers:
            m.gradient_checkpointing = True


def token_logprobs(model, input_ids, attention_mask, labels, temperature: float = 1.0, entropy: bool = False,
                   shared_prefix: bool = True, min_shared: int = MIN_SHARED) -> tuple[torch.Tensor, ...]:
    """`masked_token_logprobs`, with shared prefixes computed once when `shared_prefix` and the model allows it."""
    lengths = attention_mask.sum(-1) if attention_mask is not None else torch.full(
        (len(input_ids),), input_ids.shape[1], device=input_ids.device)
    reason = fallback_reason(model) if shared_prefix else None
    # where this model may share prefixes, its plain forwards too run in one engine call: under ZeRO-1/2 a rank's
    # plain micro-batch (one row, a filler) then hands over its gradients in the order the others' trees do
    engine = _engine(model) if shared_prefix and reason is None else None
    if reason is None and shared_prefix and attention_mask is not None and not torch.equal(
            attention_mask.bool(), torch.arange(input_ids.shape[1], device=lengths.device) < lengths[:, None]):
        reason = "the rows are not right-padded"
    if not shared_prefix or reason or len(input_ids) == 1 or not (labels != -100).any():  # one row: nothing to share
        if reason and reason not in _logged:
            _logged.add(reason)
            log.warning("shared prefix off, plain forward: %s", reason)
        run = lambda m: masked_token_logprobs(m, input_ids, attention_mask, labels, temperature, entropy)
        return run(model) if engine is None else _in_one_engine_forward(engine, run)
    with _no_checkpointing(model), _prefix_attention(model, input_ids.device):
        run = lambda m: _shared_logprobs(m, input_ids, lengths.tolist(), labels, temperature, entropy, min_shared)
        return run(model) if engine is None else _in_one_engine_forward(engine, run)


def _engine(model):
    """The wrapper among `model`'s that must be called once per micro-batch (DeepSpeedEngine, DDP), or None.
    DDP broadcasts its buffers (a collective) at each call: ranks whose prefix trees have different numbers of
    branches would call it a different number of times and hang."""
    while hasattr(model, "module"):
        if type(model).__name__ in ("DeepSpeedEngine", "DistributedDataParallel"):
            return model
        model = model.module
    return None


def _in_one_engine_forward(engine, run):
    """`run(forward)` as the body of one call of `engine` (DeepSpeed's, or DDP), the branches calling the wrapped
    module's `forward`.

    DeepSpeed's `engine.forward` keeps per-call state for the backward that follows: it starts a micro-step
    (ZeRO-3 counts them there, to copy or add the gradients) and hooks the outputs so that the backward begins
    with its prologue. The branches calling the module directly skip that (measured under ZeRO-3: a 2-micro-batch
    step lost a micro-batch's gradients), and one engine call per branch runs a prologue per branch for one
    epilogue. So the engine is called once per micro-batch, as in the plain forward, with the module's forward
    standing in for the tree; ZeRO-3's parameter gathering hooks sit on the submodules and run for each branch.
    Under DeepSpeed with gradients the gradients reach its hooks in one order (`_with_ordered_gradients`)."""
    module = engine.module
    own = module.__dict__.get("forward")  # an instance-level forward (a wrapper's), else the class's
    forward = module.forward
    ordered = type(engine).__name__ == "DeepSpeedEngine" and torch.is_grad_enabled()
    module.forward = lambda: _with_ordered_gradients(module, lambda: run(forward)) if ordered else run(forward)
    try:
        return engine()
    finally:
        if own is None:
            del module.forward
        else:
            module.forward = own


class _GradientsAfterAll(torch.autograd.Function):
    """The identity on the trained parameters, as one node: its backward runs once every use of them is done, and
    hands every parameter its gradient together, in the parameters' order."""

    @staticmethod
    def forward(ctx, *params):
        return tuple(p.view_as(p) for p in params)

    @staticmethod
    def backward(ctx, *grads):
        return grads  # a parameter no branch used gets zeros (materialized): every rank's hooks fire for every one


def _with_ordered_gradients(module, run):
    """`run()` with `module`'s trained parameters taken through `_GradientsAfterAll`: their gradients then reach
    the optimizer in the same order on every rank, whatever the rank's prefix tree.

    ZeRO-1/2 reduce each gradient as its hook fires, packed into buckets by arrival and summed across ranks by
    position (`stage_1_and_2.reduce_independent_p_g_buckets_and_remove_grads`, `average_tensor`): ranks must fire
    them in the same order. A prefix tree's backward finishes a parameter's gradient after its last use, and
    trees of different shapes finish them in different orders (measured: three of a layer's projections in
    another order on each rank), so a rank's gradient was added to another parameter's (GSPO's step 93x the
    1-rank one on 2 ranks; SFT's two trees had the same shape; a rank's plain micro-batch among trees mismatches
    likewise, so `token_logprobs` takes it through here too). The
    gradients now all arrive at the end of the backward (no reduce overlaps it). The swap of the parameters for
    the node's outputs is torch.func.functional_call's own, without the call (the engine makes it)."""
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    if not named:
        return run()
    views = _GradientsAfterAll.apply(*(p for _, p in named))
    with _reparametrize_module(module, {n: v for (n, _), v in zip(named, views)}, tie_weights=True):
        return run()


def _shared_logprobs(model, ids, lengths, labels, temperature, entropy, min_shared):
    keep = kept_positions(labels)
    target = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)  # target[:, p]: the token p predicts
    column = torch.full((ids.shape[1],), -1, dtype=torch.long, device=ids.device)
    column[keep] = torch.arange(len(keep), device=ids.device)
    pieces: list[tuple[torch.Tensor, ...]] = []  # (rows, columns, logps, entropies) to place in [B, k]

    def forward(b: Branch, past) -> None:
        """Branch b's tokens after `past`, the keys/values (per layer) of tokens [0, b.start) of its rows."""
        wanted = (target[b.rows, b.start : b.end] != -100).any(0).nonzero().squeeze(-1)  # local positions
        out = model(input_ids=ids[b.rows[0], b.start : b.end][None], use_cache=True, logits_to_keep=wanted,
                    past_key_values=None if past is None else DynamicCache(ddp_cache_data=past))
        if len(wanted):
            logp_all = torch.log_softmax(out.logits[0].float() / temperature, dim=-1)  # [m, V]
            pos = wanted + b.start
            tgt = target[b.rows][:, pos].clamp(min=0)  # [R, m]: each row's own next tokens
            logp = logp_all.gather(-1, tgt.T).T
            with torch.no_grad():
                ent = -(logp_all.exp() * logp_all).sum(-1).expand_as(logp).reshape(-1) if entropy else None
            rows = torch.tensor(b.rows, device=ids.device)[:, None].expand_as(tgt)
            pieces.append((rows.reshape(-1), column[pos].expand_as(tgt).reshape(-1), logp.reshape(-1), ent))
        past = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        for child in b.children:
            forward(child, past)

    for root in prefix_tree(ids, lengths, min_shared):
        forward(root, None)
    rows, cols = torch.cat([p[0] for p in pieces]), torch.cat([p[1] for p in pieces])
    shape = (len(ids), len(keep))
    logp = torch.zeros(shape, device=ids.device).index_put((rows, cols), torch.cat([p[2] for p in pieces]))
    mask = target[:, keep] != -100
    if not entropy:
        return logp * mask, mask
    ent = torch.zeros(shape, device=ids.device).index_put((rows, cols), torch.cat([p[3] for p in pieces]))
    return logp * mask, mask, ent * mask


def computed_tokens(seqs: list[list[int]], shared_prefix: bool = True) -> int:
    """The tokens a micro-batch of these rows computes: each shared prefix once (the size of their prefix tree:
    in sorted order, each row adds what it does not share with the one before), or padded rows without sharing."""
    if not seqs:
        return 0
    if not shared_prefix:
        return len(seqs) * max(map(len, seqs))
    rows = [np.asarray(s) for s in sorted(map(list, seqs))]
    total = len(rows[0])
    for a, b in zip(rows, rows[1:]):
        m = min(len(a), len(b))
        differ = np.flatnonzero(a[:m] != b[:m])
        total += len(b) - (int(differ[0]) if len(differ) else m)
    return total


def pack(units: list[list[list[int]]], max_tokens: int | None, shared_prefix: bool = True) -> list[list[int]]:
    """Consecutive units (each a list of rows that must stay together) into micro-batches of at most `max_tokens`
    computed tokens (a unit larger than that alone); the indices of the units in each. None: one micro-batch."""
    batches: list[list[int]] = []
    rows: list[list[int]] = []
    for u, unit in enumerate(units):
        if batches and (max_tokens is None or computed_tokens(rows + unit, shared_prefix) <= max_tokens):
            batches[-1].append(u)
            rows += unit
        else:
            batches.append([u])
            rows = list(unit)
    return batches
