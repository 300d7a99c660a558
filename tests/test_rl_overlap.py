"""Overlapped rounds with bounded staleness (`max_staleness`, `sculptor_rl.train.overlap`): the behaviour-policy
correction is its formula, `max_staleness: 0` is the synchronous objective exactly, a round older than the bound
is dropped, and a short real run with Ray workers trains on rounds its producer made while it stepped."""

import math
import time
from dataclasses import replace

import pytest
import torch

from sculptor_rl.train.loss import behaviour_weights, lm_loss, policy_loss
from sculptor_rl.train.micro_batches import collate
from sculptor_rl.train.overlap import RoundProducer
from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer
from sculptor_rl.train.rl_config import check_config
from sculptor_rl.train.weight_sync import EngineSync, PublishedWeights
from test_rl_loss import EPS_HIGH, EPS_LOW, cut_rollouts, fixed_batch, tiny_model_dir


def direct_weights(old, mu, mask, mode, low, high):
    """TRL's modes, one token (or one sample) at a time on Python floats."""
    rows, width = mask.shape
    out = [[1.0] * width for _ in range(rows)]
    for i in range(rows):
        diffs = [float(old[i, t] - mu[i, t]) if mask[i, t] else 0.0 for t in range(width)]
        ratios = [math.exp(sum(diffs))] * width if mode.startswith("sequence") else [math.exp(d) for d in diffs]
        for t, r in enumerate(ratios):
            if mode.endswith("truncate"):
                out[i][t] = min(max(r, low if low is not None else -math.inf), high)
            else:
                out[i][t] = 0.0 if r < (low if low is not None else -math.inf) or r > high else r
    return torch.tensor(out, dtype=torch.float64)


def corrected_reference(logps, old, mu, adv, mask, level, mode, low, high):
    """loss.py's corrected objective (grpo, per sample, beta 0), a token at a time: the clipped term times the
    behaviour weight, averaged over each sample's trained tokens, then over samples."""
    w = direct_weights(old.detach(), mu, mask, mode, low, high)
    total, n = 0, 0
    for i in range(len(adv)):
        tokens = [t for t in range(mask.shape[1]) if mask[i, t]]
        seq = torch.exp(sum(logps[i, t] - old[i, t] for t in tokens) / len(tokens))
        terms = []
        for t in tokens:
            r = torch.exp(logps[i, t] - old[i, t]) if level == "token" else seq
            c = torch.clamp(r, 1 - EPS_LOW, 1 + EPS_HIGH)
            terms.append(-torch.min(r * adv[i], c * adv[i]) * w[i, t])
        total, n = total + sum(terms) / len(terms), n + 1
    return total / n


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_truncate", "token_mask", "sequence_mask"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_the_correction_is_its_formula(mode, level):
    logps, old, _, adv, mask = fixed_batch()
    g = torch.Generator().manual_seed(3)
    mu = old + (torch.rand(old.shape, generator=g, dtype=torch.float64) - 0.5) * 1.6  # older policy: far off
    low, high = (0.5, 1.6) if mode.startswith("token") else (None, 1.3)
    w = behaviour_weights(old, mu, mask, mode, low, high)
    expected = direct_weights(old, mu, mask, mode, low, high)
    assert torch.allclose(w.expand_as(mask) * mask, expected * mask)
    assert ((expected * mask != 1) & (mask > 0)).any()  # the bounds bit somewhere: not all ones
    mine = logps.clone().requires_grad_()
    loss, _ = policy_loss(mine, old, adv, mask, level=level, loss_type="grpo", epsilon_low=EPS_LOW,
                          epsilon_high=EPS_HIGH, importance_weights=w)
    theirs = logps.clone().requires_grad_()
    ref = corrected_reference(theirs, old, mu, adv, mask, level, mode, low, high)
    (g1,) = torch.autograd.grad(loss, mine)
    (g2,) = torch.autograd.grad(ref, theirs)
    assert torch.allclose(loss, ref) and torch.allclose(g1, g2)


def trainer_for(fmt, tmp_path, **kw):
    from transformers import AutoModelForCausalLM

    path = tiny_model_dir(len(fmt.tokenizer), tmp_path / "tiny")
    task = {"id": "t0", "task": "pi_llm", "messages": [{"role": "user", "content": "x"}], "answer": {"k": "v"}}
    cfg = SculptorGRPOConfig(output_dir=str(tmp_path), tasks="unused.jsonl", engine="hf", num_generations=2,
                             per_device_train_batch_size=2, bf16=False, report_to="none", lm_coef=0.1, **kw)
    return SculptorGRPOTrainer(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), cfg, [task],
                               fmt.tokenizer, fmt)


def test_staleness_zero_is_the_synchronous_objective(fmt, tmp_path):
    """With max_staleness 0 the engine's logprobs (here far from the trainer's) change neither the loss nor its
    gradients: the trainer's loss is the on-policy formula (policy term with old = current, + LM term), exactly.
    With overlapped rounds the same batch gives the corrected loss."""
    t = trainer_for(fmt, tmp_path, importance_sampling_level="sequence", loss_weighting="per-sample")
    g = torch.Generator().manual_seed(2)
    samples = [replace(s, logprobs=(-torch.rand(len(s.input_ids), generator=g) * 4).tolist())
               for s in cut_rollouts(len(fmt.tokenizer), sizes=(1, 2, 1, 1))]
    adv = [1.0, -0.5, -0.5, 0.8, -0.3]
    batch = collate(samples, adv, t.pad_id)
    batch.update(num_samples=5.0, num_tokens=float((batch["labels"] != -100).sum()), num_rollouts=4.0,
                 num_lm_tokens=float((batch["labels"][torch.tensor(adv) > 0] != -100).sum()))
    model = t.model
    with torch.no_grad():  # an older policy: the engine's logprobs within ±1.5 of the trainer's
        near = t._logps(model, batch)[0]
    batch["sampling_logps"] = near + (torch.rand(near.shape, generator=g) - 0.5) * 3

    def grads_of(loss):
        model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    loss = t._compute_loss(model, batch)
    got = grads_of(loss)
    logps, mask, _ = t._logps(model, batch)
    direct, _ = policy_loss(logps, logps.detach(), batch["advantages"], mask, level="sequence", loss_type="grpo",
                            epsilon_low=t.epsilon_low, epsilon_high=t.epsilon_high, rollout_ids=batch["rollout_ids"],
                            num_samples=5.0, num_rollouts=4.0, num_tokens=batch["num_tokens"])
    direct = direct + 0.1 * lm_loss(logps, batch["advantages"], mask, num_tokens=batch["num_lm_tokens"])
    assert torch.equal(loss, direct)
    assert all(torch.equal(a, b) for a, b in zip(got, grads_of(direct)))
    assert "importance_weight/mean" not in t._metrics["train"]

    t.args.max_staleness = 1  # the same batch, as an overlapped round (the config checks need another engine)
    corrected = t._compute_loss(model, batch)
    assert not torch.allclose(corrected, loss)
    w = behaviour_weights(logps.detach(), batch["sampling_logps"], mask, "token_truncate", None, 3.0)
    expected, _ = policy_loss(logps, logps.detach(), batch["advantages"], mask, level="sequence", loss_type="grpo",
                              epsilon_low=t.epsilon_low, epsilon_high=t.epsilon_high,
                              rollout_ids=batch["rollout_ids"], num_samples=5.0, num_rollouts=4.0,
                              num_tokens=batch["num_tokens"], importance_weights=w)
    expected = expected + 0.1 * lm_loss(logps, batch["advantages"], mask, num_tokens=batch["num_lm_tokens"])
    assert torch.allclose(corrected, expected)
    m = t._metrics["train"]
    assert m["importance_weight/max"][-1] <= 3.0 and 0 < m["importance_weight/truncated_frac"][-1] < 1


@pytest.mark.parametrize("kw,message", [
    ({"engine": "vllm"}, "keeps the synchronous rounds"),
    ({"engine": "hf"}, "keeps the synchronous rounds"),
    ({"engine": "ray", "environment": "memtoolagent", "memory_updates": "rules",
      "environment_params": {"memory": "m.jsonl"}}, "memory_updates"),
    ({"engine": "ray", "steps_per_generation": 2}, "one optimizer step"),
    ({"engine": "ray", "vllm_importance_sampling_mode": "none"}, "vllm_importance_sampling_mode"),
])
def test_overlap_refuses_what_it_cannot_run(kw, message):
    cfg = SculptorGRPOConfig(output_dir="/tmp/unused", tasks="t.jsonl", max_staleness=1, bf16=False, use_cpu=True,
                             report_to="none", **kw)
    with pytest.raises(ValueError, match=message):
        check_config(cfg)
    check_config(SculptorGRPOConfig(output_dir="/tmp/unused", tasks="t.jsonl", max_staleness=1, engine="ray",
                                    bf16=False, use_cpu=True, report_to="none"))  # what it can run


class ReloadingEngine:
    """An engine in another process, as the trainer sees one: it reloads weights from a folder."""

    def __init__(self):
        self.reloaded = []

    def reload_weights(self, path):
        self.reloaded.append(path)


def test_a_stale_round_is_dropped(tmp_path):
    """max_staleness 1: the producer makes rounds 0 and 1 with the initial weights (step 0) and waits for step 1's
    before round 2. A trainer that asks at step 2 (it went on without them) drops rounds 0 and 1, 2 steps old,
    with their groups, and gets round 2, made by the weights of step 2 (published meanwhile)."""
    from accelerate import Accelerator
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.distributed import DistributedBackend

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    engine = ReloadingEngine()
    accelerator = Accelerator(cpu=True)
    sync = EngineSync("shared-directory", engine, accelerator, DistributedBackend(accelerator), str(tmp_path))
    published = PublishedWeights(sync, keep=3)
    made = []

    def generate(rows, index):
        made.append(index)
        return f"trajectories of {rows}", 3  # 3 task groups

    rounds = (f"batch {k}" for k in range(100))
    producer = RoundProducer(generate, rounds, 0, 3, 1, published).start()
    try:
        deadline = time.monotonic() + 30
        while producer.ready.qsize() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert made == [0, 1]  # round 2 waits for the weights of step 1
        published.publish(model, 2)
        got, dropped, _ = producer.next_round(2)
        assert (got.index, got.version, got.result, dropped) == (2, 2, "trajectories of batch 2", 6)
        assert engine.reloaded == [str(tmp_path / "engine-weights" / "step-000002")]
        assert (tmp_path / "engine-weights" / "step-000002" / "model.safetensors").exists()
        fresh, dropped, _ = producer.next_round(3)  # round 3: made by step 2's weights, 1 step old at step 3
        assert (fresh.index, fresh.version, dropped) == (3, 2, 0)
        published.publish(model, 3)
        producer.thread.join(timeout=30)  # round 3 was the last step's: the producer ends, making no round 4
        assert not producer.thread.is_alive() and made == [0, 1, 2, 3] and producer.ready.empty()
    finally:
        producer.close()
    assert not producer.thread.is_alive()


@pytest.mark.slow
def test_overlapped_run_with_ray_workers(model_path, fmt, tmp_path):
    """3 GSPO steps with max_staleness 1 on the embedded model, the engine a Ray worker (its own process): each
    step after the first trains a round the producer generated while the trainer was stepping (1 step old), the
    worker reloads every published step, and the correction's weights are logged."""
    import ray

    from sculptor_rl.engines import SamplingConfig, make_engine
    from sculptor_rl.envs.tasks import generate
    from sculptor_rl.jsonl import write_jsonl
    from sculptor_rl.train.rl import build_trainer

    write_jsonl(generate("pi_llm", 8, seed=3, keys=1, updates=1), tmp_path / "tasks.jsonl")
    cfg = SculptorGRPOConfig(
        model=model_path, tasks=str(tmp_path / "tasks.jsonl"), output_dir=str(tmp_path / "rl"), max_steps=3,
        engine="ray", max_staleness=1, environment="acm-mentions-key", num_generations=4,
        per_device_train_batch_size=4, gradient_accumulation_steps=1, gradient_checkpointing=False,
        max_new_tokens=24, max_tool_calls=2, max_context_tokens=4096, learning_rate=2e-4,
        lr_scheduler_type="constant", bf16=False, report_to="none", save_strategy="no", use_cpu=True, seed=1)
    import test_rl_vllm  # noqa: F401 (registers acm-mentions-key: groups rarely tie)

    ray.init(num_cpus=2, include_dashboard=False)
    try:
        engine = make_engine("ray", model_path, fmt, SamplingConfig(temperature=1.0, seed=1), max_model_len=4096,
                             num_workers=1, enforce_eager=True)
        trainer = build_trainer(cfg, engine=engine)
        before = next(trainer.model.parameters()).detach().clone()
        trainer.train()
        engine.close()
    finally:
        ray.shutdown()
    logs = [e for e in trainer.state.log_history if "reward" in e]
    assert trainer.state.global_step == 3 and len(logs) == 3
    assert logs[0]["staleness/0"] == 1.0  # the first round waits for nothing: the initial weights
    assert all(e["staleness/1"] == 1.0 for e in logs[1:])  # made while the step before trained
    assert all(e["staleness/dropped_groups"] == 0 for e in logs)
    trained = [e for e in logs if "importance_weight/mean" in e]
    assert trained and all(0 < e["importance_weight/mean"] <= 3.0 and e["importance_weight/max"] <= 3.0
                           for e in trained)
    assert all(e["time/trainer_idle_s"] >= 0 and e["time/engine_idle_s"] >= 0 for e in logs)
    folders = sorted(p.name for p in (tmp_path / "rl" / "engine-weights").iterdir())
    assert folders and folders[-1] == "step-000002"  # the last published step (step 3 trains nothing after)
    assert trainer._producer is None  # stopped with training
    assert not torch.equal(before, next(trainer.model.parameters()).detach())
