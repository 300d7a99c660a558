"""Shared-prefix forward: the loss and every parameter's gradient equal the plain forward's, on the batches
Algorithm 1 makes (a shared system turn, a GRPO group, a rollout's samples after a context change, rows with
nothing shared), in fp32 and bf16, under LoRA; the fallback says why, once; micro-batch packing."""

import logging

import pytest
import torch

from sculptor_rl.train import shared_prefix
from sculptor_rl.train.masked_lm import masked_token_logprobs
from sculptor_rl.train.shared_prefix import computed_tokens, pack, prefix_tree, token_logprobs
from shared_prefix_cases import BATCHES, PROMPT, SYSTEM, batch, loss_and_grads, tiny_model, tokens



def assert_same(model, rows, rtol, **kw):
    loss, logp, ent, grads = loss_and_grads(model, rows, False)
    loss_s, logp_s, ent_s, grads_s = loss_and_grads(model, rows, True, **kw)
    assert torch.allclose(loss_s, loss, rtol=rtol, atol=rtol * 1e-2)
    assert torch.allclose(logp_s, logp, rtol=rtol, atol=rtol * 10)
    assert torch.allclose(ent_s, ent, rtol=rtol, atol=rtol * 10)
    assert grads.keys() == grads_s.keys() and grads
    for name, g in grads.items():  # relative to the gradient's scale
        assert (grads_s[name] - g).norm() <= rtol * 10 * g.norm() + 1e-9, name


@pytest.mark.parametrize("case", BATCHES)
@pytest.mark.parametrize("min_shared", [1, shared_prefix.MIN_SHARED])
def test_fp32_loss_and_every_gradient_equal_the_plain_forward(case, min_shared):
    assert_same(tiny_model(), BATCHES[case], 1e-5, min_shared=min_shared)


@pytest.mark.parametrize("case", ["grpo group", "rollout samples"])
def test_bf16_autocast_equal_within_bf16_tolerance(case):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert_same(tiny_model(), BATCHES[case], 2e-2, min_shared=1)


def test_the_shared_tokens_are_forwarded_once():
    model, rows = tiny_model(), BATCHES["grpo group"]
    seen = []
    model.model.embed_tokens.register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    ids, attention, labels = batch(rows)
    token_logprobs(model, ids, attention, labels, min_shared=1)
    # the prompt once, then the branches below it: 2 completions, 5 tokens two others share, those two's rests
    assert seen == [len(PROMPT), 12, 20, 5, 9, 14]
    assert computed_tokens([r for r, _ in rows]) == sum(seen)
    tree = prefix_tree(ids, attention.sum(-1).tolist(), min_shared=1)
    assert [(b.rows, b.start, b.end) for b in tree] == [([0, 1, 2, 3], 0, len(PROMPT))]


def test_branches_attend_with_the_prefix_kernel_over_their_cached_ancestors(monkeypatch):
    from transformers import AttentionInterface

    calls = []
    kernel = AttentionInterface._global_mapping[shared_prefix.PREFIX_ATTENTION]

    def spy(module, query, key, value, *args, **kw):
        calls.append((query.shape[2], key.shape[2]))
        return kernel(module, query, key, value, *args, **kw)

    monkeypatch.setitem(AttentionInterface._global_mapping, shared_prefix.PREFIX_ATTENTION, spy)
    model, rows = tiny_model(), BATCHES["grpo group"]
    ids, attention, labels = batch(rows)
    token_logprobs(model, ids, attention, labels, min_shared=1)
    # per layer (2): the prompt over itself, then each branch over its ancestors' keys and its own
    p = len(PROMPT)
    assert calls == [(n, past + n) for n, past in
                     ((p, 0), (12, p), (20, p), (5, p), (9, p + 5), (14, p + 5)) for _ in range(2)]
    assert model.config._attn_implementation == "sdpa"  # restored for the plain forward


def test_lora_gradients_equal():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for p in model.parameters():  # LoRA's B starts at zero; make every adapter weight matter
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.05)
    assert_same(model, BATCHES["rollout samples"], 1e-5, min_shared=1)
    with model.disable_adapter(), torch.no_grad():  # the reference logprobs under PEFT
        ids, attention, labels = batch(BATCHES["rollout samples"])
        plain = masked_token_logprobs(model, ids, attention, labels)[0]
        assert torch.allclose(token_logprobs(model, ids, attention, labels)[0], plain, atol=1e-5)


def hook_order(model, rows, shared: bool, ordered: bool) -> tuple[list[str], dict[str, torch.Tensor]]:
    """The order in which the parameters' gradients are handed over (post-accumulate hooks: where ZeRO-1/2 reduce
    them) in one backward, and the gradients."""
    order: list[str] = []
    hooks = [p.register_post_accumulate_grad_hook(lambda p, n=n: order.append(n))
             for n, p in model.named_parameters() if p.requires_grad]
    ids, attention, labels = batch(rows)
    run = lambda: token_logprobs(model, ids, attention, labels, shared_prefix=shared, min_shared=1)
    logp, mask = shared_prefix._with_ordered_gradients(model, run) if ordered else run()
    (-logp.sum() / mask.sum()).backward()
    for h in hooks:
        h.remove()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    return order, grads


@pytest.mark.parametrize("lora", [False, True])
def test_gradients_reach_the_hooks_in_one_order_whatever_the_tree(lora):
    """ZeRO-1/2 add the ranks' gradients up by the order their hooks fire: ranks whose prefix trees differ in shape
    (or a rank whose micro-batch takes the plain forward) must hand them over in one order."""
    model = tiny_model()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    runs = [(rows, shared) for rows in BATCHES.values() for shared in (True, False)]
    free = {tuple(hook_order(model, rows, shared, False)[0]) for rows, shared in runs}
    assert len(free) > 1  # each tree's own order: what the ranks had
    ordered = [hook_order(model, rows, shared, True) for rows, shared in runs]
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert all(order == ordered[0][0] for order, _ in ordered) and sorted(ordered[0][0]) == sorted(trained)
    for (rows, shared), (_, grads) in zip(runs, ordered):  # and the gradients are the plain forward's
        _, plain = hook_order(model, rows, False, False)
        for name, g in plain.items():
            assert (grads[name] - g).norm() <= 1e-4 * g.norm() + 1e-9, name


def test_checkpointing_falls_back_with_one_log_line_and_no_grad_still_shares(monkeypatch, caplog):
    monkeypatch.setattr(shared_prefix, "_logged", set())
    model = tiny_model()
    model.gradient_checkpointing_enable()
    model.train()
    rows = BATCHES["grpo group"]
    with caplog.at_level(logging.WARNING, logger=shared_prefix.__name__):
        loss_and_grads(model, rows, True)
        assert_same(model, rows, 1e-5)
    lines = [r.getMessage() for r in caplog.records if r.name == shared_prefix.__name__]
    assert len(lines) == 1 and "gradient checkpointing" in lines[0]
    ids, attention, labels = batch(rows)
    seen = []
    model.model.embed_tokens.register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    with torch.no_grad():
        shared = token_logprobs(model, ids, attention, labels, min_shared=1)[0]
    assert seen[0] == len(PROMPT)  # shared without gradients, and checkpointing is back on after it
    assert model.model.layers[0].gradient_checkpointing
    assert torch.allclose(shared, masked_token_logprobs(model, ids, attention, labels)[0], atol=1e-5)


def test_left_padded_rows_fall_back(monkeypatch, caplog):
    monkeypatch.setattr(shared_prefix, "_logged", set())
    ids, attention, labels = batch(BATCHES["system turn"])
    attention = attention.flip(-1)
    with caplog.at_level(logging.WARNING, logger=shared_prefix.__name__):
        token_logprobs(tiny_model(), ids, attention, labels)
    assert "right-padded" in caplog.text


def test_pack_keeps_units_whole_under_the_budget():
    a, b, c = [SYSTEM + tokens(10, 50)], [SYSTEM + tokens(10, 51), SYSTEM + tokens(20, 52)], [tokens(60, 53)]
    assert computed_tokens(a + b) == 40 + 10 + 10 + 20
    assert computed_tokens(a + b, shared_prefix=False) == 3 * 60
    assert pack([a, b, c], 80) == [[0, 1], [2]]
    assert pack([a, b, c], 79) == [[0], [1], [2]]
    assert pack([a, b, c], 10) == [[0], [1], [2]]  # a unit over the budget goes alone
    assert pack([a, b, c], None) == [[0, 1, 2]]


def test_sft_token_budget_batches_hold_neighbours_in_prefix_order_once_per_epoch():
    from sculptor_rl.train.sft import TokenBudgetBatches

    seqs = [SYSTEM + tokens(20, 60 + k) for k in range(6)] + [tokens(30, 70 + k) for k in range(3)]
    batches = TokenBudgetBatches(seqs, 100, shared_prefix=True, seed=0)
    assert sorted(i for b in batches.batches for i in b) == list(range(9))
    assert all(computed_tokens([seqs[i] for i in b]) <= 100 for b in batches.batches)
    # the rows sharing the system turn are neighbours: 40 shared + 3 x 20 fill a micro-batch
    assert [(len(b), max(b) < 6) for b in batches.batches if min(b) < 6] == [(3, True), (3, True)]
    first = list(batches)
    batches.set_epoch(1)
    assert sorted(map(tuple, first)) == sorted(map(tuple, batches)) and len(batches) == len(first)


@pytest.mark.parametrize("level,weighting", [("rollout", "per-rollout"), ("sequence", "per-sample")])
def test_rl_round_packed_by_tokens_with_sharing_equals_one_plain_batch(fmt, tmp_path, level, weighting):
    """The RL trainer: a round packed into micro-batches by computed tokens (one-token fillers after) with shared
    prefixes gives the loss and gradients of the whole round in one plain batch. Where the objective sums over a
    rollout (level rollout, per-rollout weighting) a rollout's samples share a micro-batch whatever it costs; else
    the samples are packed one by one and a micro-batch stays within the budget."""
    from test_rl_loss import tiny_model_dir
    from transformers import AutoModelForCausalLM

    from sculptor_rl.samples import Sample
    from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer

    vocab = len(fmt.tokenizer)
    path = tiny_model_dir(vocab, tmp_path / "tiny")
    task = {"id": "t0", "task": "pi_llm", "messages": [{"role": "user", "content": "x"}], "answer": {"k": "v"}}

    def rand(n, seed):
        return torch.randint(3, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()

    samples = []  # 2 groups of 2 rollouts; rollout r1 cut into 2 samples at a context change
    for g, rollouts in enumerate((("r0", "r1"), ("r2", "r3"))):
        prompt = rand(40, 0) + rand(30, 1 + g)  # the system turn, then the group's task
        for k, rid in enumerate(rollouts):
            c = rand(12 + 3 * k, 10 + 2 * g + k)
            samples.append(Sample(rid, prompt + c, [0] * 70 + [1] * len(c), [0], None))
            if rid == "r1":
                changed = prompt[:50] + rand(4, 9) + prompt[50:] + c + rand(8, 20)
                samples.append(Sample(rid, changed, [0] * (74 + len(c)) + [1] * 8, [1], None))
    advantages = {"r0": 0.9, "r1": -0.4, "r2": 0.3, "r3": -0.7}

    def round_loss(ga, **kw):
        cfg = SculptorGRPOConfig(output_dir=str(tmp_path), tasks="unused.jsonl", engine="hf", num_generations=2,
                                 per_device_train_batch_size=4 // ga if ga < 4 else 1, gradient_accumulation_steps=ga,
                                 bf16=False, report_to="none", importance_sampling_level=level,
                                 loss_weighting=weighting, lm_coef=0.1, gradient_checkpointing=False, **kw)
        t = SculptorGRPOTrainer(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), cfg, [task],
                                fmt.tokenizer, fmt)
        t.current_gradient_accumulation_steps = ga
        batches = t._micro_batches(samples, [advantages[s.rollout_id] for s in samples])
        total = sum(t._compute_loss(t.model, b) for b in batches)
        total.backward()
        return batches, total.item(), [p.grad.clone() for p in t.model.parameters()]

    _, whole, grads = round_loss(1, shared_prefix=False)
    # group 1 computes 144 tokens (70 shared, 27 completions, 47 after the context change), group 2 97 of which
    # 40 (the system turn) are group 1's
    budget = 180 if level == "rollout" else 120
    batches, packed, packed_grads = round_loss(4, shared_prefix=True, max_tokens_per_batch=budget)
    trained = [b for b in batches if (b["labels"] != -100).any()]
    rows = [[ids[: int(m.sum())].tolist() for ids, m in zip(b["input_ids"], b["attention_mask"])] for b in trained]
    assert sorted(r for b in rows for r in b) == sorted(s.input_ids for s in samples)  # each sample trained once
    r1 = [k for k, b in enumerate(rows) for r in b for s in samples if s.rollout_id == "r1" and r == s.input_ids]
    if level == "rollout":  # whole rollouts: 180 holds one group, not both → 2 micro-batches + 2 fillers
        assert [len(b) for b in rows] == [3, 2] and len(batches) - len(trained) == 2 and len(set(r1)) == 1
    else:  # r1's two samples (85 + 97 tokens, 50 shared) cannot share 120 tokens: a micro-batch each
        assert all(computed_tokens(b) <= budget for b in rows) and len(set(r1)) == 2
    assert batches[-1]["input_ids"].shape[1] == 1 and (batches[-1]["labels"] == -100).all()
    assert packed == pytest.approx(whole, rel=1e-5) and abs(whole) > 1e-3
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(grads, packed_grads))
    if level == "rollout":
        return
    # a budget no sample fits, 5 samples for 4 micro-steps: packed by a larger budget, still sharing (from 1 token,
    # the smallest budget a config allows, the budget must still grow)
    for tiny_budget in (60, 1):
        batches, tight, tight_grads = round_loss(4, shared_prefix=True, max_tokens_per_batch=tiny_budget)
        assert len(batches) == 4
        # not an even split by length: some micro-batch holds two rollouts of a group, sharing the group's prompt
        assert any(len({tuple(ids[:70].tolist()) for ids in b["input_ids"]}) < len(b["input_ids"]) for b in batches)
        assert tight == pytest.approx(whole, rel=1e-5)
        assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(grads, tight_grads))

