"""The GSPO/GRPO losses: against a direct implementation of the formulas (every importance-sampling level and
loss weighting, rollouts cut into 1-4 samples, gradients too), against the paper's eq. 1-2 over whole rollouts,
against TRL's own `GRPOTrainer` loss (one sample per rollout), and over micro-batches of unequal size (the step's
normalization)."""

import pytest
import torch

from sculptor_rl.samples import Sample
from sculptor_rl.train.loss import lm_loss, policy_loss
from sculptor_rl.train.masked_lm import kept_positions
from sculptor_rl.train.micro_batches import collate, group_advantages
from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer

EPS_LOW, EPS_HIGH = 0.02, 0.03  # small enough that the fixed ratios below get clipped both ways


def reference(logps, old, adv, mask, level, loss_type, beta=0.0, ref=None, rollouts=None, weighting="per-sample"):
    """The formulas of sculptor_rl.train.loss, one sample and one token at a time, on torch scalars (so autograd
    gives the formulas' gradients too). `rollouts[i]`: the rollout sample i was cut from (default: its own)."""
    rows = range(len(adv))
    rollouts = list(rows) if rollouts is None else rollouts
    tokens = {i: [t for t in range(mask.shape[1]) if mask[i, t]] for i in rows}
    losses = {}
    for i in rows:
        units = [j for j in rows if rollouts[j] == rollouts[i]] if level == "rollout" else [i]
        pairs = [(j, t) for j in units for t in tokens[j]]
        seq = torch.exp(sum(logps[j, t] - old[j, t] for j, t in pairs) / len(pairs))
        for t in tokens[i]:
            r = torch.exp(logps[i, t] - old[i, t]) if level == "token" else seq
            c = torch.clamp(r, 1 - EPS_LOW, 1 + EPS_HIGH)
            loss = -torch.min(r * adv[i], c * adv[i])
            if beta:
                d = ref[i, t] - logps[i, t]
                loss = loss + beta * (torch.exp(d) - d - 1) * r
            losses[i, t] = loss
    if loss_type == "dapo":
        return sum(losses.values()) / len(losses)
    if weighting == "per-sample":
        groups = [[i] for i in rows]
    else:
        groups = [[j for j in rows if rollouts[j] == r] for r in dict.fromkeys(rollouts)]
    return sum(sum(losses[j, t] for j in g for t in tokens[j]) / sum(len(tokens[j]) for j in g)
               for g in groups) / len(groups)


def fixed_batch(seed=0, rows=4, width=7):
    g = torch.Generator().manual_seed(seed)
    logps = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 3
    old = logps + (torch.rand(rows, width, generator=g, dtype=torch.float64) - 0.5) * 0.2
    ref = logps + (torch.rand(rows, width, generator=g, dtype=torch.float64) - 0.5) * 0.4
    mask = torch.zeros(rows, width, dtype=torch.float64)
    for i, (a, b) in enumerate([(0, 7), (2, 5), (1, 2), (3, 7)][:rows]):
        mask[i, a:b] = 1
    mask[0, 3] = 0  # a tool result between two trained completions
    adv = torch.tensor([1.3, -0.7, 0.4, -1.1][:rows], dtype=torch.float64)
    return logps, old, ref, adv, mask


@pytest.mark.parametrize("level", ["sequence", "token"])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_policy_loss_is_the_formula(level, loss_type, beta):
    logps, old, ref, adv, mask = fixed_batch()
    loss, stats = policy_loss(logps, old, adv, mask, level=level, loss_type=loss_type, epsilon_low=EPS_LOW,
                              epsilon_high=EPS_HIGH, beta=beta, ref_logps=ref)
    expected = reference(logps, old, adv, mask, level, loss_type, beta, ref)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    assert 0 < stats["clip_ratio/low_mean"] + stats["clip_ratio/high_mean"]  # the clip range is exercised


def rollout_batch(seed=0, sizes=(1, 3, 4, 2, 1), width=9):
    """Rollouts cut into 1-4 samples each (fp64, random), their samples shuffled (a rollout's samples need not be
    adjacent). Each rollout's old logprobs are shifted as a whole, so its ratio lands inside or outside the clip
    range at each level."""
    g = torch.Generator().manual_seed(seed)
    rollouts = [r for r, n in enumerate(sizes) for _ in range(n)]
    order = torch.randperm(len(rollouts), generator=g).tolist()
    rollouts = [rollouts[k] for k in order]
    rows = len(rollouts)
    logps = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 3
    shift = torch.tensor([-0.05, 0.04, 0.0, 0.01, -0.02], dtype=torch.float64)[rollouts].unsqueeze(-1)
    old = logps + shift + (torch.rand(rows, width, generator=g, dtype=torch.float64) - 0.5) * 0.1
    ref = logps + (torch.rand(rows, width, generator=g, dtype=torch.float64) - 0.5) * 0.4
    mask = torch.zeros(rows, width, dtype=torch.float64)
    for i in range(rows):  # a run of trained tokens, with an untrained tool result inside some
        a = int(torch.randint(0, 4, (1,), generator=g))
        b = int(torch.randint(a + 1, width + 1, (1,), generator=g))
        mask[i, a:b] = 1
        if b - a > 3:
            mask[i, a + 1] = 0
    adv = torch.tensor([1.3, -0.7, 0.4, -1.1, 0.9], dtype=torch.float64)[rollouts]
    return logps, old, ref, adv, mask, torch.tensor(rollouts)


@pytest.mark.parametrize("level", ["rollout", "sequence", "token"])
@pytest.mark.parametrize("loss_type,weighting", [("grpo", "per-sample"), ("grpo", "per-rollout"),
                                                 ("dapo", "per-sample")])
@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_rollout_options_are_the_formula_with_gradients(level, loss_type, weighting, beta):
    logps, old, ref, adv, mask, rollouts = rollout_batch()
    logps.requires_grad_(True)
    loss, stats = policy_loss(logps, old, adv, mask, level=level, loss_type=loss_type, epsilon_low=EPS_LOW,
                              epsilon_high=EPS_HIGH, beta=beta, ref_logps=ref, rollout_ids=rollouts * 7,
                              loss_weighting=weighting)
    expected = reference(logps, old, adv, mask, level, loss_type, beta, ref, rollouts.tolist(), weighting)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    (grad,) = torch.autograd.grad(loss, logps)
    (grad_expected,) = torch.autograd.grad(expected, logps)
    assert torch.allclose(grad, grad_expected, rtol=1e-10, atol=1e-14)
    assert grad.abs().sum() > 0
    assert 0 < stats["clip_ratio/low_mean"] + stats["clip_ratio/high_mean"] < 1  # some clipped, some not


def test_rollout_level_with_per_rollout_weight_is_the_papers_eq_1_2():
    """Concatenate each rollout's trained tokens over its samples into one trajectory τ_i: then
    s_i = (π(τ_i)/π_old(τ_i))^(1/|τ_i|) (eq. 2) and the loss is -(1/G) Σ_i min(s_i A_i, clip(s_i) A_i) (eq. 1)."""
    logps, old, _, adv, mask, rollouts = rollout_batch(seed=3)
    terms = []
    for r in rollouts.unique().tolist():
        rows = (rollouts == r).nonzero().flatten()
        sel = mask[rows].bool()
        tau_new, tau_old = logps[rows][sel], old[rows][sel]  # log π of τ_i's tokens, sample after sample
        s = torch.exp((tau_new.sum() - tau_old.sum()) / len(tau_new))
        a = adv[rows[0]]
        terms.append(torch.min(s * a, torch.clamp(s, 1 - EPS_LOW, 1 + EPS_HIGH) * a))
    eq1 = -sum(terms) / len(terms)
    loss, _ = policy_loss(logps, old, adv, mask, level="rollout", loss_type="grpo", epsilon_low=EPS_LOW,
                          epsilon_high=EPS_HIGH, rollout_ids=rollouts, loss_weighting="per-rollout")
    assert loss.item() == pytest.approx(eq1.item(), rel=1e-12)
    # the per-sample options differ on this batch: they are not eq. 1-2 over the trajectory
    for level, weighting in [("sequence", "per-rollout"), ("rollout", "per-sample")]:
        other, _ = policy_loss(logps, old, adv, mask, level=level, loss_type="grpo", epsilon_low=EPS_LOW,
                               epsilon_high=EPS_HIGH, rollout_ids=rollouts, loss_weighting=weighting)
        assert other.item() != pytest.approx(eq1.item(), rel=1e-6)


def test_one_sample_per_rollout_makes_the_options_coincide():
    logps, old, ref, adv, mask = fixed_batch()
    kw = dict(loss_type="grpo", epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH, beta=0.05, ref_logps=ref)
    base, _ = policy_loss(logps, old, adv, mask, level="sequence", **kw)
    for ids in (None, torch.tensor([4, 2, 9, 0])):
        same, _ = policy_loss(logps, old, adv, mask, level="rollout", rollout_ids=ids, loss_weighting="per-rollout",
                              **kw)
        assert same.item() == pytest.approx(base.item(), rel=1e-12)


def test_bad_options_are_refused():
    logps, old, _, adv, mask = fixed_batch()
    kw = dict(epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH)
    with pytest.raises(ValueError, match="per-rollout' takes loss_type 'grpo'"):
        policy_loss(logps, old, adv, mask, level="rollout", loss_type="dapo", loss_weighting="per-rollout", **kw)
    with pytest.raises(ValueError, match="loss_weighting must be one of"):
        policy_loss(logps, old, adv, mask, level="rollout", loss_type="grpo", loss_weighting="per-task", **kw)
    with pytest.raises(ValueError, match="importance_sampling_level must be one of"):
        policy_loss(logps, old, adv, mask, level="trajectory", loss_type="grpo", **kw)


def test_lm_loss_is_nll_of_positive_advantage_tokens():
    logps, _, _, adv, mask = fixed_batch()
    expected = -sum(logps[i, t].item() for i in range(4) for t in range(7) if mask[i, t] and adv[i] > 0)
    count = sum(1 for i in range(4) for t in range(7) if mask[i, t] and adv[i] > 0)
    assert lm_loss(logps, adv, mask).item() == pytest.approx(expected / count, rel=1e-12)


@pytest.mark.parametrize("level,loss_type", [("sequence", "grpo"), ("token", "dapo")])
def test_micro_batches_with_step_counts_sum_to_the_whole_step(level, loss_type):
    """Unequal micro-batches (1 and 3 samples) normalized by the step's counts add up to the loss of the step."""
    logps, old, _, adv, mask = fixed_batch()
    logps.requires_grad_(True)
    kw = dict(level=level, loss_type=loss_type, epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH)
    whole, _ = policy_loss(logps, old, adv, mask, **kw)
    (grad_whole,) = torch.autograd.grad(whole, logps)
    counts = dict(num_samples=4, num_tokens=mask.sum())
    parts = [policy_loss(logps[s], old[s], adv[s], mask[s], **kw, **counts)[0] for s in (slice(0, 1), slice(1, 4))]
    (grad_parts,) = torch.autograd.grad(sum(parts), logps)
    assert sum(parts).item() == pytest.approx(whole.item(), rel=1e-12)
    assert torch.allclose(grad_parts, grad_whole)
    # the same micro-batches each normalized by their own counts weight samples unequally
    own = sum(policy_loss(logps[s], old[s], adv[s], mask[s], **kw)[0] for s in (slice(0, 1), slice(1, 4))) / 2
    assert own.item() != pytest.approx(whole.item(), rel=1e-6)


@pytest.mark.parametrize("level,weighting", [("rollout", "per-rollout"), ("rollout", "per-sample"),
                                             ("sequence", "per-rollout")])
def test_whole_rollouts_per_micro_batch_with_step_counts_sum_to_the_whole_step(level, weighting):
    """Micro-batches holding whole rollouts (as the trainer splits them), normalized by the step's counts of
    samples and rollouts, add up to the step's loss and gradients."""
    logps, old, _, adv, mask, rollouts = rollout_batch()
    logps.requires_grad_(True)
    kw = dict(level=level, loss_type="grpo", loss_weighting=weighting, epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH)
    whole, _ = policy_loss(logps, old, adv, mask, rollout_ids=rollouts, **kw)
    (grad_whole,) = torch.autograd.grad(whole, logps)
    counts = dict(num_samples=len(rollouts), num_rollouts=len(rollouts.unique()))
    parts = [(rollouts <= 1).nonzero().flatten(), (rollouts > 1).nonzero().flatten()]  # rollouts {0, 1}, {2, 3, 4}
    total = sum(policy_loss(logps[p], old[p], adv[p], mask[p], rollout_ids=rollouts[p], **kw, **counts)[0]
                for p in parts)
    (grad_parts,) = torch.autograd.grad(total, logps)
    assert total.item() == pytest.approx(whole.item(), rel=1e-12)
    assert torch.allclose(grad_parts, grad_whole, rtol=1e-10, atol=1e-14)


def test_group_advantages_match_trl_scaling():
    rewards = torch.tensor([1.0, 0.0, -1.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = group_advantages(rewards, 4, "group")
    first = rewards[:4]
    assert torch.allclose(adv[:4], (first - first.mean()) / (first.std() + 1e-4))
    assert torch.equal(adv[4:], torch.zeros(4))  # a group that all agrees carries no signal
    thirds = torch.full((8,), 2 / 3)  # partial credit: a float mean need not equal its terms
    assert torch.equal(group_advantages(thirds, 8), torch.zeros(8))
    assert torch.allclose(group_advantages(rewards, 4, "none")[:4], first - first.mean())


# ---- against TRL's GRPOTrainer._compute_loss, on a tiny model ----


def tiny_model_dir(vocab: int, path) -> str:
    """A tiny random Llama saved to `path` (TRL builds its reference model from the policy's path)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path)


def cut_rollouts(vocab: int, sizes=(1, 1, 1, 1)):
    """Samples as Algorithm 1 makes them (prompt, then trained completions with an untrained tool result between),
    `sizes[k]` of them cut from rollout k."""
    g = torch.Generator().manual_seed(1)
    shapes = [(5, [4]), (9, [3, -2, 2]), (3, [6]), (7, [2, -3, 5])]  # prompt length, then +trained / -untrained runs
    samples = []
    for k, size in enumerate(sizes):
        for j in range(size):
            prompt, runs = shapes[(k + j) % len(shapes)]
            n = prompt + sum(abs(r) for r in runs)
            ids = torch.randint(3, vocab, (n,), generator=g).tolist()
            mask = [0] * prompt + [m for r in runs for m in [int(r > 0)] * abs(r)]
            samples.append(Sample(f"r{k}", ids, mask, [j], None))
    return samples


def trl_inputs(samples, advantages, old_of, pad_id, ref_of=None):
    """The same samples in GRPOTrainer's layout: prompt = tokens before the first trained one (left-padded),
    completion = the rest (right-padded) with the untrained tool results out of `tool_mask`."""
    starts = [s.loss_mask.index(1) for s in samples]
    P = max(starts)
    C = max(len(s.input_ids) - a for s, a in zip(samples, starts))
    out = {k: torch.zeros(len(samples), n, dtype=torch.long) for k, n in
           [("prompt_ids", P), ("prompt_mask", P), ("completion_ids", C), ("completion_mask", C), ("tool_mask", C)]}
    out["prompt_ids"].fill_(pad_id)
    out["completion_ids"].fill_(pad_id)
    old = torch.zeros(len(samples), C)
    ref = torch.zeros(len(samples), C)
    for i, (s, a) in enumerate(zip(samples, starts)):
        out["prompt_ids"][i, P - a :] = torch.tensor(s.input_ids[:a])
        out["prompt_mask"][i, P - a :] = 1
        c = len(s.input_ids) - a
        out["completion_ids"][i, :c] = torch.tensor(s.input_ids[a:])
        out["completion_mask"][i, :c] = 1
        out["tool_mask"][i, :c] = torch.tensor(s.loss_mask[a:])
        for j in range(a, len(s.input_ids)):
            if s.loss_mask[j]:
                old[i, j - a] = old_of[(i, j)]
                ref[i, j - a] = ref_of[(i, j)] if ref_of else 0.0
    out["old_per_token_logps"] = old
    if ref_of:
        out["ref_per_token_logps"] = ref
    out["advantages"] = torch.tensor(advantages)
    out["num_items_in_batch"] = (out["completion_mask"] * out["tool_mask"]).sum()
    return out


@pytest.mark.parametrize("level,loss_type,beta,delta", [
    ("sequence", "grpo", 0.0, None), ("token", "dapo", 0.0, None), ("token", "grpo", 0.0, None),
    ("sequence", "grpo", 0.05, None), ("token", "grpo", 0.0, 1.04), ("sequence", "grpo", 0.05, 1.04)])
def test_equals_trl_grpo_trainer_loss(level, loss_type, beta, delta, fmt, tmp_path):
    """One sample per rollout and one micro-batch: our trainer's loss and gradients equal TRL's `_compute_loss`
    (`delta`: TRL's two-sided clipping, here on a negative advantage whose ratio is above delta)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    vocab = len(fmt.tokenizer)
    common = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, bf16=False,
                  report_to="none", importance_sampling_level=level, loss_type=loss_type, epsilon=EPS_LOW,
                  epsilon_high=EPS_HIGH, beta=beta, gradient_checkpointing=False, delta=delta)
    from transformers import AutoModelForCausalLM

    path = tiny_model_dir(vocab, tmp_path / "tiny")
    ours_model, trl_model = (AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32) for _ in range(2))
    task = {"id": "t0", "task": "pi_llm", "messages": [{"role": "user", "content": "x"}], "answer": {"k": "v"}}
    ours = SculptorGRPOTrainer(ours_model, SculptorGRPOConfig(**common, engine="hf", tasks="unused.jsonl", lm_coef=0.0,
                                                              loss_weighting="per-sample"),  # TRL's unit
                               [task], fmt.tokenizer, fmt)
    theirs = GRPOTrainer(trl_model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                         args=GRPOConfig(**common), train_dataset=Dataset.from_dict({"prompt": ["x"] * 4}),
                         processing_class=fmt.tokenizer)
    for t in (ours, theirs):
        t.current_gradient_accumulation_steps = 1
        t.model.train()

    samples = cut_rollouts(vocab)
    advantages = [1.2, 0.6, 0.3, -0.2]  # not summing to ~0, so the loss is not a cancellation
    if delta:
        advantages[0] = -1.2  # its ratios ~exp(0.05) > delta: capped
    batch = collate(samples, advantages, fmt.tokenizer.pad_token_id)
    batch.update(num_samples=4.0, num_rollouts=4.0, num_tokens=float((batch["labels"] != -100).sum()),
                 num_lm_tokens=0.0)
    with torch.no_grad():
        current, mask, _ = ours._logps(ours.model, batch)
        ref_current = ours._logps(ours.ref_model, batch)[0] if beta else None
    noise = torch.Generator().manual_seed(2)
    bias = [-0.05, 0.01, 0.0, 0.04]  # sequence-level ratios exp(-bias): clipped high (A > 0) and low (A < 0)
    old_of, ref_of, old, ref = {}, {}, torch.zeros_like(current), torch.zeros_like(current)
    for i in range(len(samples)):
        for k, p in enumerate(kept_positions(batch["labels"]).tolist()):
            if mask[i, k]:
                jitter = 0.08 * (torch.rand(1, generator=noise).item() - 0.5)
                old[i, k] = old_of[(i, p + 1)] = current[i, k] + bias[i] + jitter
                if beta:
                    shift = 0.3 * (torch.rand(1, generator=noise).item() - 0.5)
                    ref[i, k] = ref_of[(i, p + 1)] = ref_current[i, k] + shift
    batch["old_logps"] = old
    if beta:
        batch["ref_logps"] = ref

    loss_ours = ours._compute_loss(ours.model, batch)
    loss_ours.backward()
    loss_trl = theirs._compute_loss(theirs.model, trl_inputs(samples, advantages, old_of, fmt.tokenizer.pad_token_id,
                                                            ref_of if beta else None))
    loss_trl.backward()
    assert loss_ours.item() == pytest.approx(loss_trl.item(), rel=1e-5)
    assert abs(loss_ours.item()) > 1e-3
    for (name, p), q in zip(ours.model.named_parameters(), theirs.model.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-3, atol=1e-6), name
    assert any(m for m in ("clip_ratio/low_mean", "clip_ratio/high_mean") if ours._metrics["train"][m][-1] > 0)
    if delta:
        ours.args.delta = None
        assert ours._compute_loss(ours.model, batch).item() != pytest.approx(loss_ours.item(), rel=1e-3)


@pytest.mark.parametrize("level,loss_type,weighting", [
    ("sequence", "grpo", "per-sample"), ("token", "dapo", "per-sample"), ("rollout", "grpo", "per-rollout"),
    ("rollout", "grpo", "per-sample"), ("sequence", "grpo", "per-rollout")])
def test_trainer_micro_batches_add_up_to_one_batch(level, loss_type, weighting, fmt, tmp_path):
    """The trainer's split of a round into unequal micro-batches (rollouts of 1-3 samples, kept whole where the
    objective sums over a rollout, else split by sample; an untrained filler when there are more micro-steps than
    units) gives the loss and gradients of the whole round in one batch."""
    from transformers import AutoModelForCausalLM

    path = tiny_model_dir(len(fmt.tokenizer), tmp_path / "tiny")
    task = {"id": "t0", "task": "pi_llm", "messages": [{"role": "user", "content": "x"}], "answer": {"k": "v"}}

    def trainer(ga, per_device):
        cfg = SculptorGRPOConfig(output_dir=str(tmp_path), tasks="unused.jsonl", engine="hf", num_generations=2,
                                 per_device_train_batch_size=per_device, gradient_accumulation_steps=ga, bf16=False,
                                 report_to="none", importance_sampling_level=level, loss_type=loss_type,
                                 loss_weighting=weighting, lm_coef=0.1)
        t = SculptorGRPOTrainer(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), cfg, [task],
                                fmt.tokenizer, fmt)
        t.current_gradient_accumulation_steps = ga
        return t

    def round_loss(t, samples, advantages):
        batches = t._micro_batches(samples, advantages)
        assert len(batches) == t.args.gradient_accumulation_steps
        trained = [b["rollout_ids"][(b["labels"] != -100).any(-1)] for b in batches]
        assert sum(len(r) for r in trained) == sum(1 for a in advantages if a)  # each computed sample once
        if level == "rollout" or weighting == "per-rollout":  # whole rollouts: they add up to the round's rollouts
            assert sum(len(r.unique()) for r in trained) == len({s.rollout_id for s, a in zip(samples, advantages)
                                                                 if a})
        total = sum(t._compute_loss(t.model, b) for b in batches)
        total.backward()
        return total.item(), [p.grad.clone() for p in t.model.parameters()]

    sizes, rollout_adv = (2, 1, 3, 1), [1.2, 0.6, 0.3, -0.2]
    samples = cut_rollouts(len(fmt.tokenizer), sizes)
    advantages = [a for a, n in zip(rollout_adv, sizes) for _ in range(n)]
    whole, grads = round_loss(trainer(1, 4), samples, advantages)
    split, split_grads = round_loss(trainer(3, 2), samples, advantages)  # 3 micro-batches of 1-2 rollouts
    assert split == pytest.approx(whole, rel=1e-5)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(grads, split_grads))
    few, few_grads = round_loss(trainer(3, 2), samples[:3], advantages[:3])  # 2 rollouts, 3 micro-steps
    alone, alone_grads = round_loss(trainer(1, 4), samples[:3], advantages[:3])
    assert few == pytest.approx(alone, rel=1e-5)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(alone_grads, few_grads))

    # rollouts with advantage 0 (beta 0): counted in the normalization, not computed; the same loss and gradients
    # as one batch of every sample with the whole round's counts
    zero = [a for a, n in zip([1.2, 0.0, 0.3, 0.0], sizes) for _ in range(n)]
    t = trainer(3, 2)
    computed = sum(int((b["labels"] != -100).any(-1).sum()) for b in t._micro_batches(samples, zero))
    assert computed == sizes[0] + sizes[2] and t._metrics["train"]["frac_samples_skipped"][-1] == 2 / 7
    skipping, skipping_grads = round_loss(t, samples, zero)
    ref = trainer(1, 4)
    full = collate(samples, zero, fmt.tokenizer.pad_token_id)
    full.update(num_samples=7.0, num_rollouts=4.0, num_tokens=float(sum(sum(s.loss_mask) for s in samples)),
                num_lm_tokens=float(sum(sum(s.loss_mask) for s, a in zip(samples, zero) if a > 0)))
    direct = ref._compute_loss(ref.model, full)
    direct.backward()
    assert abs(direct.item()) > 1e-4 and skipping == pytest.approx(direct.item(), rel=1e-5)
    assert all(torch.allclose(p.grad, g, rtol=1e-4, atol=1e-7) for p, g in zip(ref.model.parameters(), skipping_grads))


@pytest.mark.parametrize("skip", [True, False])
def test_a_step_without_signal_moves_no_weight(skip, fmt, tmp_path):
    """Two real optimizer steps (transformers' loop, AdamW): the first round has a signal, the second's groups all
    tie (advantage 0, beta 0: a zero gradient). With skip_empty_updates the second step leaves every weight as the
    first left it; without, AdamW's momentum moves them anyway (what the option is for)."""
    from transformers import AutoModelForCausalLM, TrainerCallback

    path = tiny_model_dir(len(fmt.tokenizer), tmp_path / "tiny")
    task = {"id": "t0", "task": "pi_llm", "messages": [{"role": "user", "content": "x"}], "answer": {"k": "v"}}
    cfg = SculptorGRPOConfig(output_dir=str(tmp_path / "out"), tasks="unused.jsonl", engine="hf", num_generations=2,
                             per_device_train_batch_size=2, gradient_accumulation_steps=1, bf16=False,
                             report_to="none", max_steps=2, learning_rate=1e-2, save_strategy="no",
                             skip_empty_updates=skip, lr_scheduler_type="constant")
    t = SculptorGRPOTrainer(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), cfg, [task],
                            fmt.tokenizer, fmt)
    samples = cut_rollouts(len(fmt.tokenizer), (1, 2))
    rounds = iter([[1.0, -1.0, -1.0], [0.0, 0.0, 0.0]])
    t._generate_round = lambda rows: t._micro_batches(samples, next(rounds))  # the rollouts are not under test
    weights = []

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            weights.append([p.detach().clone() for p in model.parameters()])

    t.add_callback(Snapshot())
    before = [p.detach().clone() for p in t.model.parameters()]
    t.train()
    logged = [r["update_skipped"] for r in t.state.log_history if "update_skipped" in r]
    assert len(weights) == 2 and logged == ([0.0, 1.0] if skip else [])
    assert any(not torch.equal(a, b) for a, b in zip(before, weights[0]))  # the first step learned
    unchanged = all(torch.equal(a, b) for a, b in zip(weights[0], weights[1]))
    assert unchanged == skip


@pytest.mark.parametrize("kw,message", [
    (dict(importance_sampling_level="trajectory"), "importance_sampling_level must be one of"),
    (dict(loss_weighting="per-task"), "loss_weighting must be one of"),
    (dict(loss_weighting="per-rollout", loss_type="dapo"), "'per-rollout' takes loss_type 'grpo'"),
])
def test_config_checks_the_loss_options(kw, message):
    from sculptor_rl.train.rl_config import check_config

    cfg = SculptorGRPOConfig(output_dir="/tmp/unused", tasks="t.jsonl", use_cpu=True, report_to="none",
                             per_device_train_batch_size=8, **kw)
    with pytest.raises(ValueError, match=message):
        check_config(cfg)


def test_plan_shows_the_loss_options():
    from sculptor_rl.train.rl_config import check_config, plan

    cfg = SculptorGRPOConfig(output_dir="/tmp/unused", tasks="t.jsonl", use_cpu=True, report_to="none",
                             per_device_train_batch_size=8, importance_sampling_level="rollout",
                             loss_weighting="per-rollout")
    check_config(cfg)
    objective = next(line for line in plan(cfg).splitlines() if line.startswith("objective"))
    assert "over a rollout's samples, paper eq. 2" in objective and "loss_type grpo, per-rollout" in objective


def test_rollout_level_takes_one_behaviour_weight_per_rollout():
    """Level rollout: a sequence mode's truncated weight is the rollout's π_old / μ over all of its samples' trained
    tokens (eq. 2's probability of the rollout), shared by its samples; without rollouts, one per sample."""
    from sculptor_rl.train.loss import behaviour_weights

    logps, old, _, _, mask = fixed_batch()
    engine = old - 0.01 * torch.arange(1, 5, dtype=old.dtype)[:, None]  # samples 0-1: rollout 0, 2-3: rollout 1
    rollouts = torch.tensor([0, 0, 1, 1])
    w = behaviour_weights(old, engine, mask, "sequence_truncate", 0.0, 10.0, rollouts)
    per_sample = ((old - engine) * mask).sum(-1)
    expected = torch.exp(torch.stack([per_sample[:2].sum(), per_sample[:2].sum(), per_sample[2:].sum(),
                                      per_sample[2:].sum()]))[:, None]
    assert torch.allclose(w, expected) and w[0] == w[1] and w[2] == w[3]
    assert torch.allclose(behaviour_weights(old, engine, mask, "sequence_truncate", 0.0, 10.0),
                          torch.exp(per_sample)[:, None])
    capped = behaviour_weights(old, engine, mask, "sequence_truncate", 0.0, 1.05, rollouts)
    assert torch.equal(capped, torch.clamp(expected, max=1.05))


def test_mask_truncated_completions_trains_no_completion_cut_at_the_length_cap():
    """TRL's `mask_truncated_completions`: a completion that stopped at max_new_tokens gets no loss; the rollout's
    other completions keep theirs."""
    from sculptor_rl.trajectory import Step, Trajectory
    from sculptor_rl.train.micro_batches import round_samples

    steps = [Step([1, 2, 3], [4, 5], None, "a", "stop"), Step([1, 2, 3, 4, 5, 6], [7, 8, 9], None, "b", "length")]
    traj = Trajectory("t", "pi_llm", steps, [], None, 0.0, "max_tool_calls", 0, 0, rollout_id="r")
    kept, _ = round_samples([traj], [1.0])
    masked, _ = round_samples([traj], [1.0], mask_truncated=True)
    assert kept[0].loss_mask == [0, 0, 0, 1, 1, 0, 1, 1, 1]
    assert masked[0].loss_mask == [0, 0, 0, 1, 1]  # trimmed after the last trained token
