"""The GPU check of issue 44, in two parts that each fit a few minutes on one H100 (bench/gpu_check.sh runs them).

    python3 bench/gpu_check.py part1     # no embedded model needed (its tokenizer only: .gpu/part1/tokenizer)
    python3 bench/gpu_check.py part2     # the quickstart pipeline; the embedded model must be installed
    python3 bench/gpu_check.py table $OUT/gpu_check_part1.json   # the table again, from a (partial) results file
    GPU_CHECK_DEVICE=cpu GPU_CHECK_TINY=1 python3 bench/gpu_check.py part1   # the same code paths, tiny, on CPU

Part 1 (every section is timed and recorded on its own; one that fails records its error and the next runs):
(b) shared prefix = plain path on the device: the loss, the trained tokens' logprobs and every parameter's gradient
    of `token_logprobs(shared_prefix=True)` against the plain forward, on the batches of tests/shared_prefix_cases.py
    (a tiny Llama) and on longer Algorithm 1-shaped rows for a small random Qwen3, in fp32 and under bf16 autocast;
    max abs / rel differences (gradients: ||g_shared - g_plain|| / ||g_plain||, the worst parameter), and whether
    they are within the CPU tests' tolerances (fp32 1e-5, bf16 2e-2; reported, not enforced).
(a) steps of a small random Qwen3 (4 layers) in bf16 (fp32 weights, bf16 autocast: the trainers' `bf16: true`):
    `MaskedSFTTrainer.train()` on quickstart samples (per-step time from a callback, losses finite), and GSPO
    steps through `SculptorGRPOTrainer._micro_batches` + `_compute_loss` + backward + AdamW on the same samples with
    made-up advantages (+1 / -1 by rollout), as bench/rl_memory.py replays rounds.
(c) SFT tokens/s, TRL `SFTTrainer` vs ours, side by side: bench/train_throughput.py's `sft_variants` (each variant
    in a fresh process from the same initial weights, one epoch, batch 1, bf16) on the quickstart's pi_llm samples
    (scripted teacher, tokenized with the embedded model's tokenizer) and a random Qwen3-0.6B-shaped model (its
    151,936-token LM head). Tokens/s = the samples' tokens / wall time of `trainer.train()` (its first step's
    warm-up included, alike for all).
(d) GSPO trainer tokens/s at 16k tokens on a random Qwen3-0.6B-shaped model (fp32 weights, bf16 autocast, no
    gradient checkpointing, as our RL configs): rounds of made-up samples through `_micro_batches` (the trainer's
    micro-batching), `_compute_loss` (GSPO sequence level, lm_coef 0.1), backward, AdamW step (the trainer's own
    `create_optimizer`). Tokens/s = the rows' tokens of a round / the round's wall time (all micro-batches' forward
    + backward and the optimizer step; no rollouts), the mean of the timed rounds after one warm-up round. Cells:
    rows of 16,384 tokens, one per micro-batch, trained on their last 4,096 or 8,192 tokens (prime-rl's 11.9k
    tok/s for Qwen3-0.6B at 16k on one H100 counts every token of its packed 16k sequences); and a GRPO group of
    8 rollouts sharing an 8,192-token prompt with 1,024 trained tokens each (16,384 computed tokens with shared
    prefixes), with and without sharing.

Part 2: `sculptor-rl model prepare` (GGUF → HF, timed), then the quickstart pipeline (configs/quickstart.yaml) on
the GPU with the HF engine for rollouts (rl) and evaluation (eval): `rl: {engine: hf}`, `eval: {engine: hf,
engine_kwargs: {batch_size: ...}}`, `use_cpu: false` (the trainers train on the GPU in bf16), fewer eval tasks
than the quickstart's 100 (the sizes are printed). Its run folder persists outside $OUT (GPU_CHECK_RUNS), so a
second call resumes a run a time limit cut. Stage times from each stage's done.json.

Everything goes to $OUT (default runs/gpu_check): gpu_check_partN.json (written after each section), .md (the
tables), and what part 2's run wrote that is small (report, stage done.json, eval results).
Sizes: GPU_CHECK_TINY=1 for a CPU smoke run; GPU_CHECK_* variables below override single sizes.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # train_throughput
sys.path.insert(0, str(ROOT / "tests"))  # shared_prefix_cases (no pytest import)

DEVICE = os.environ.get("GPU_CHECK_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
TINY = os.environ.get("GPU_CHECK_TINY", "0") == "1"
OUT = Path(os.environ.get("OUT") or ROOT / "runs" / "gpu_check")
TOKENIZER = os.environ.get("GPU_CHECK_TOKENIZER") or str(ROOT / ".gpu" / "part1" / "tokenizer")
START = time.monotonic()
LIMIT = float(os.environ.get("GPU_CHECK_LIMIT") or 300)  # gpu_check.sh kills this process at LIMIT seconds
RUNS = Path(os.environ.get("GPU_CHECK_RUNS") or (ROOT / "runs" / "gpu_check_runs" if TINY else "/tmp/gpu_check_runs"))


def env_int(name: str, gpu: int, tiny: int) -> int:
    return int(os.environ.get(f"GPU_CHECK_{name}") or (tiny if TINY else gpu))


# Qwen3-0.6B's shape (its config.json); random weights. The small one keeps its vocabulary and head size.
QWEN3_06B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                 rope_theta=1000000, rms_norm_eps=1e-6, tie_word_embeddings=True)
SMALL = dict(QWEN3_06B, hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=4, head_dim=64)
TINY_SHAPE = dict(QWEN3_06B, vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16)


def qwen3(shape: dict, seed: int = 0, device: str = DEVICE):
    """A randomly initialised Qwen3 of `shape`, fp32, on `device` (initialised there: fast on a GPU)."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(Qwen3Config(**shape), dtype=torch.float32)
    return model


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def free() -> None:
    gc.collect()
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def peak_gib() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else float("nan")


def reset_peak() -> None:
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()


def autocast(enabled: bool = True):
    """bf16 autocast as the trainers run it (`bf16: true`); on a CPU without native bf16 (tiny runs) off."""
    from sculptor_rl.models import bf16_is_fast

    return torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=enabled and (DEVICE == "cuda" or bf16_is_fast()))


def is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


# ---------------------------------------------------------------- recording


class Results:
    """The part's results, saved after every section (a run cut by a time limit keeps what it measured)."""

    def __init__(self, part: str):
        OUT.mkdir(parents=True, exist_ok=True)
        self.path = OUT / f"gpu_check_{part}.json"
        self.data = {"part": part, "env": env_info(), "sections": {}}
        self.save()

    def save(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=1, default=str))

    def run(self, name: str, fn, *args) -> dict:
        print(f"\n==== {name} ({time.strftime('%H:%M:%S')})", flush=True)
        self.data["sections"][name] = {"status": "started (cut by the time limit?)", "seconds": None}
        self.save()
        start = time.perf_counter()
        try:
            res = {"status": "ok", **fn(*args)}
        except Exception as e:  # noqa: BLE001 -- recorded; the next section still runs
            traceback.print_exc()
            res = {"status": "error", "error": f"{type(e).__name__}: {e}"[:600]}
        res["seconds"] = round(time.perf_counter() - start, 1)
        self.data["sections"][name] = res
        self.save()
        print(f"==== {name}: {res['status']} in {res['seconds']} s", flush=True)
        free()
        return res


def env_info() -> dict:
    import transformers

    info = {"time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "device": DEVICE, "tiny": TINY,
            "cpu_count": os.cpu_count()}
    for pkg in ("trl", "accelerate", "datasets", "peft"):
        try:
            info[pkg] = __import__(pkg).__version__
        except Exception as e:  # noqa: BLE001
            info[pkg] = f"missing ({type(e).__name__})"
    if DEVICE == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda,
                    attn_backends={"flash": torch.backends.cuda.flash_sdp_enabled(),
                                   "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled()})
    return info


# ---------------------------------------------------------------- part 1


def _diff(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """Max abs difference and that over the reference's max abs value."""
    a, b = a.float(), b.float()
    d = (a - b).abs().max().item() if a.numel() else 0.0
    return d, d / max(b.abs().max().item(), 1e-30) if b.numel() else 0.0


def _compare(model, rows, **kw) -> dict:
    from shared_prefix_cases import loss_and_grads

    loss, logp, ent, grads = loss_and_grads(model, rows, False)
    loss_s, logp_s, ent_s, grads_s = loss_and_grads(model, rows, True, **kw)
    worst, worst_abs = 0.0, 0.0
    for name, g in grads.items():
        worst = max(worst, ((grads_s[name] - g).norm() / g.norm().clamp(min=1e-30)).item())
        worst_abs = max(worst_abs, (grads_s[name] - g).abs().max().item())
    finite = all(map(math.isfinite, (loss.item(), loss_s.item(), worst)))
    return {"loss": loss.item(), "loss_abs": abs(loss_s - loss).item(),
            "loss_rel": (abs(loss_s - loss) / abs(loss).clamp(min=1e-30)).item(),
            "logp_abs": _diff(logp_s, logp)[0], "entropy_abs": _diff(ent_s, ent)[0],
            "grad_rel_norm": worst, "grad_abs": worst_abs, "finite": finite}


def qwen_rows(vocab: int, seed: int = 0) -> dict[str, list]:
    """Longer rows of the shapes Algorithm 1 makes, for the small Qwen3: a GRPO group (a 1,000-token system turn and
    task, 4 completions of 60-300 tokens) and a rollout's samples after a context change (tags inserted mid-task)."""
    from shared_prefix_cases import trained_tail

    g = torch.Generator().manual_seed(seed)

    def toks(n):
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    n = 0.25 if TINY else 1.0
    system, task = toks(int(400 * n)), toks(int(600 * n))
    group = [trained_tail(system + task + c, len(c)) for c in (toks(int(60 * n)), toks(int(300 * n)),
                                                                 toks(int(150 * n)), toks(int(220 * n)))]
    c0, t0, c1 = toks(int(80 * n)), toks(int(200 * n)), toks(int(120 * n))
    changed = task[: len(task) // 2] + toks(12) + task[len(task) // 2 :]
    rollout = [(system + task + c0 + t0, [0] * (len(system) + len(task)) + [1] * len(c0) + [0] * len(t0)),
               (system + changed + c0 + t0 + c1,
                [0] * (len(system) + len(changed) + len(c0) + len(t0)) + [1] * len(c1))]
    return {"grpo group (Qwen3)": group, "rollout samples (Qwen3)": rollout}


def shared_prefix_equal() -> dict:
    """(b): shared prefix vs plain on the device, fp32 and bf16 autocast."""
    from shared_prefix_cases import BATCHES, tiny_model

    from sculptor_rl.train.shared_prefix import MIN_SHARED

    tol = {"fp32": 1e-5, "bf16": 2e-2}  # the CPU tests' rtol: loss within rtol, each gradient within 10 rtol
    cells = []
    small = dict(SMALL, vocab_size=4096, num_hidden_layers=2) if not TINY else dict(TINY_SHAPE, vocab_size=4096)
    cases = [("tiny Llama", lambda: tiny_model().to(DEVICE), BATCHES, (1, MIN_SHARED)),
             ("Qwen3 (2 layers)", lambda: qwen3(small), qwen_rows(4096), (MIN_SHARED,))]
    for model_name, make, batches, min_shared in cases:
        model = make().train()
        for precision in ("fp32", "bf16"):
            for case, rows in batches.items():
                for m in min_shared:
                    with autocast(precision == "bf16"):
                        r = _compare(model, rows, min_shared=m)
                    r["ok"] = (r["finite"] and r["loss_rel"] <= tol[precision]
                               and r["grad_rel_norm"] <= 10 * tol[precision])
                    cells.append({"model": model_name, "precision": precision, "case": case, "min_shared": m, **r})
                    print(cells[-1], flush=True)
        del model
        free()
    worst = {p: {k: max(c[k] for c in cells if c["precision"] == p)
                 for k in ("loss_rel", "logp_abs", "grad_rel_norm", "grad_abs")} for p in ("fp32", "bf16")}
    return {"cells": cells, "worst": worst, "all_within_cpu_test_tolerance": all(c["ok"] for c in cells)}


_SAMPLES: list = []


def _samples(n: int):
    """The first `n` quickstart samples (train_throughput's: scripted teacher, seed 0), made once for (a) and (c)."""
    from train_throughput import quickstart_samples

    if len(_SAMPLES) < n:
        _SAMPLES[:] = quickstart_samples(max(n, env_int("SFT_SAMPLES", 64, 4)), TOKENIZER)
        print(f"{len(_SAMPLES)} quickstart samples, {sum(len(s.input_ids) for s in _SAMPLES)} tokens", flush=True)
    return _SAMPLES[:n]


def _grpo_trainer(model, tmp: Path, **kw):
    """Our GSPO trainer (no rollouts are made: its micro-batching and loss are driven directly)."""
    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer

    fmt = ChatFormat.from_pretrained(TOKENIZER)
    cfg = dict(output_dir=str(tmp), tasks="unused.jsonl", engine="hf", bf16=True, report_to="none",
               use_cpu=DEVICE == "cpu", gradient_checkpointing=False, save_strategy="no", learning_rate=1e-6,
               importance_sampling_level="sequence", loss_type="grpo", epsilon=3e-4, epsilon_high=4e-4, beta=0.0,
               lm_coef=0.1, temperature=1.0, logging_steps=1000)
    task = {"id": "t0", "task": "pi_llm", "messages": [{"role": "user", "content": "x"}], "answer": {"k": "v"}}
    trainer = SculptorGRPOTrainer(model, SculptorGRPOConfig(**{**cfg, **kw}), [task], fmt.tokenizer, fmt)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    trainer.create_optimizer()
    return trainer


def _round(trainer, samples, advantages) -> dict:
    """One GSPO round as the trainer trains it: micro-batches, forward + backward each, one optimizer step."""
    model = trainer.model
    sync()
    start = time.perf_counter()
    batches = trainer._micro_batches(samples, advantages)
    losses = []
    for b in batches:
        b = {k: v.to(model.device) if torch.is_tensor(v) else v for k, v in b.items()}
        with autocast():
            loss = trainer._compute_loss(model, b)
        loss.backward()
        losses.append(loss.item())
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    sync()
    return {"seconds": time.perf_counter() - start, "micro_batches": len(batches), "losses": losses,
            "grad_norm": norm}


def small_steps() -> dict:
    """(a): SFT steps and GSPO steps of a small random Qwen3 in bf16 with the project's trainers."""
    from transformers import TrainerCallback

    from sculptor_rl.samples import write_samples
    from sculptor_rl.train.sft import MaskedSFTTrainer, SculptorSFTConfig, load_sample_dataset
    from transformers import AutoTokenizer

    steps = env_int("SMALL_STEPS", 12, 3)
    shape = TINY_SHAPE if TINY else SMALL
    samples = _samples(steps)
    res = {"model": f"random Qwen3, {shape['num_hidden_layers']} layers, hidden {shape['hidden_size']}, vocab "
                    f"{shape['vocab_size']}", "precision": "fp32 weights, bf16 autocast",
           "samples": len(samples), "sample_tokens": sum(len(s.input_ids) for s in samples)}

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.times, self.t = [], 0.0

        def on_step_begin(self, args, state, control, **kw):
            sync()
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            sync()
            self.times.append(time.perf_counter() - self.t)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_samples(samples, tmp / "samples.jsonl")
        model = qwen3(shape)
        cfg = SculptorSFTConfig(output_dir=str(tmp / "sft"), samples=str(tmp / "samples.jsonl"), max_steps=steps,
                                per_device_train_batch_size=1, learning_rate=1e-4, bf16=True, use_cpu=DEVICE == "cpu",
                                gradient_checkpointing=False, shared_prefix=False, logging_steps=1, report_to=[],
                                save_strategy="no", dataloader_num_workers=0, seed=0)
        timer = StepTimes()
        trainer = MaskedSFTTrainer(model=model, args=cfg, train_dataset=load_sample_dataset(cfg.samples, None),
                                   processing_class=AutoTokenizer.from_pretrained(TOKENIZER), callbacks=[timer])
        reset_peak()
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        res["sft"] = {"steps": len(timer.times), "first_step_s": timer.times[0],
                      "mean_step_s_after_first": sum(timer.times[1:]) / max(1, len(timer.times) - 1),
                      "losses": losses, "finite": all(map(math.isfinite, losses)) and bool(losses),
                      "peak_gib": peak_gib()}
        print("sft", res["sft"], flush=True)
        del trainer
        free()

        trainer = _grpo_trainer(model, tmp / "rl", num_generations=2, per_device_train_batch_size=1,
                                gradient_accumulation_steps=4)
        rollouts = list(dict.fromkeys(s.rollout_id for s in samples))
        advantages = [1.0 if rollouts.index(s.rollout_id) % 2 == 0 else -1.0 for s in samples]
        reset_peak()
        rounds = [_round(trainer, samples, advantages) for _ in range(3)]
        losses = [x for r in rounds for x in r["losses"]]
        res["gspo"] = {"rounds": len(rounds), "micro_batches_per_round": rounds[0]["micro_batches"],
                       "first_round_s": rounds[0]["seconds"],
                       "mean_round_s_after_first": sum(r["seconds"] for r in rounds[1:]) / (len(rounds) - 1),
                       "losses": losses, "last_round_loss": sum(rounds[-1]["losses"]),
                       "grad_norms": [r["grad_norm"] for r in rounds],
                       "finite": all(map(math.isfinite, losses + [r["grad_norm"] for r in rounds])),
                       "peak_gib": peak_gib()}
        print("gspo", res["gspo"], flush=True)
    return res


def sft_throughput() -> dict:
    """(c): TRL's SFTTrainer vs ours, same samples, same random Qwen3-0.6B-shaped model, each in its own process."""
    from train_throughput import sft_variants

    n = env_int("SFT_SAMPLES", 64, 4)
    budgets = [int(b) for b in os.environ.get("GPU_CHECK_SFT_BUDGETS", "4096" if TINY else "16384").split()]
    shape = TINY_SHAPE if TINY else QWEN3_06B
    samples = _samples(n)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "qwen3-0.6b-random"
        qwen3(shape).save_pretrained(model_dir)  # fp32, as both trainers load it
        free()
        rows = sft_variants(samples, budgets, Path(tmp), str(model_dir), TOKENIZER, DEVICE)
    trl, trl_no_ckpt, ours = (r["tokens/s"] for r in rows[:3])
    best = max(r["tokens/s"] for r in rows[2:])
    return {"model": "random Qwen3-0.6B shape" if not TINY else "tiny random Qwen3",
            "samples": len(samples), "tokens": sum(len(s.input_ids) for s in samples),
            "peak_memory": "CUDA allocated in train() over before it" if DEVICE == "cuda" else "host RSS",
            "rows": rows,
            "ours_vs_trl": ours / trl, "ours_vs_trl_no_checkpointing": ours / trl_no_ckpt,
            "best_ours_vs_trl": best / trl, "goal": ">= 3.5x (the CPU-measured goal of issue 44)"}


def gspo_16k() -> dict:
    """(d): GSPO trainer tokens/s at 16k tokens, random Qwen3-0.6B shape."""
    from sculptor_rl.samples import Sample

    seq = env_int("SEQ", 16384, 512)
    trained = env_int("TRAINED", 4096, 128)
    prompt, completion, group = env_int("GROUP_PROMPT", 8192, 256), env_int("GROUP_COMPLETION", 1024, 64), 8
    rows_per_round = env_int("ROWS", 4, 2)
    half = seq // 2  # half-trained rows (all but a prompt trained would hold ~40 GB of fp32 vocabulary logits)
    timed = env_int("ROUNDS", 2, 1)
    shape = TINY_SHAPE if TINY else QWEN3_06B
    vocab = shape["vocab_size"]
    g = torch.Generator().manual_seed(0)

    def toks(n):
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    def long_rows(n_trained):
        return [Sample(f"r{k}", toks(seq), [0] * (seq - n_trained) + [1] * n_trained, [0], None)
                for k in range(rows_per_round)]

    shared = toks(prompt)
    group_rows = [Sample(f"g{k}", shared + toks(completion), [0] * prompt + [1] * completion, [0], None)
                  for k in range(group)]
    cells = [  # name, samples, trainer settings
        (f"{rows_per_round} rows of {seq}, last {trained} trained, 1 row per micro-batch", long_rows(trained),
         dict(num_generations=2, per_device_train_batch_size=1, gradient_accumulation_steps=rows_per_round)),
        (f"{rows_per_round} rows of {seq}, last {half} trained, 1 row per micro-batch", long_rows(half),
         dict(num_generations=2, per_device_train_batch_size=1, gradient_accumulation_steps=rows_per_round)),
        (f"group of {group}, {prompt}-token shared prompt + {completion} trained each, shared prefix, "
         f"1 micro-batch", group_rows,
         dict(num_generations=group, per_device_train_batch_size=group, gradient_accumulation_steps=1,
              shared_prefix=True)),
        (f"group of {group}, same rows, no sharing, 1 row per micro-batch", group_rows,
         dict(num_generations=group, per_device_train_batch_size=1, gradient_accumulation_steps=group,
              shared_prefix=False)),
    ]
    model = qwen3(shape).train()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, samples, settings in cells:
            rollouts = list(dict.fromkeys(s.rollout_id for s in samples))
            adv = [1.0 if rollouts.index(s.rollout_id) % 2 == 0 else -1.0 for s in samples]
            tokens = sum(len(s.input_ids) for s in samples)
            cell = {"cell": name, "row_tokens": tokens, "trained_tokens": sum(sum(s.loss_mask) for s in samples)}
            trainer = None
            try:
                trainer = _grpo_trainer(model, Path(tmp), **settings)
                reset_peak()
                _round(trainer, samples, adv)  # warm-up (kernels, the optimizer's moments)
                rounds = [_round(trainer, samples, adv) for _ in range(timed)]
                secs = sum(r["seconds"] for r in rounds) / len(rounds)
                losses = [x for r in rounds for x in r["losses"]]
                cell.update(status="ok", micro_batches=rounds[0]["micro_batches"], round_s=secs,
                            tokens_per_s=tokens / secs, trained_tokens_per_s=cell["trained_tokens"] / secs,
                            peak_gib=peak_gib(), finite=all(map(math.isfinite, losses)))
            except Exception as e:  # noqa: BLE001 -- an OOM is a result too
                traceback.print_exc()
                cell.update(status="OOM" if is_oom(e) else "error", error=f"{type(e).__name__}: {e}"[:300],
                            peak_gib=peak_gib())
                model.zero_grad(set_to_none=True)
            print(cell, flush=True)
            out.append(cell)
            del trainer
            free()
    return {"model": "random Qwen3-0.6B shape" if not TINY else "tiny random Qwen3",
            "precision": "fp32 weights + AdamW, bf16 autocast, no gradient checkpointing",
            "objective": "GSPO (sequence level, grpo loss, eps 3e-4/4e-4), lm_coef 0.1",
            "timing": f"mean of {timed} round(s) after 1 warm-up: micro-batches' forward + backward, AdamW step",
            "reference": "prime-rl: 11.9k tok/s, Qwen3-0.6B full RL at 16k, one H100", "cells": out}


# ---------------------------------------------------------------- part 2


def part2_config(path: Path) -> dict:
    """configs/quickstart.yaml with the HF engine for rl and eval, the trainers on the device, sizes for minutes."""
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    for key in ("budget_minutes", "small_recipe"):  # the CPU's time budget: this check sizes its own run
        cfg.pop(key, None)
    eval_tasks = env_int("EVAL_TASKS", 32, 2)
    cfg.update(name="quickstart_gpu" if not TINY else "quickstart_tiny", runs_dir=str(RUNS),
               eval_tasks=eval_tasks, train_tasks=env_int("TRAIN_TASKS", cfg["train_tasks"], 2),
               teacher_tasks=env_int("TEACHER_TASKS", cfg["teacher_tasks"], 2))
    on_gpu = {"use_cpu": False} if DEVICE == "cuda" else {}
    cfg["sft"] = {**cfg.get("sft", {}), **on_gpu}
    cfg["rl"] = {**cfg.get("rl", {}), "engine": "hf", "max_steps": env_int("RL_STEPS", 4, 1), **on_gpu}
    cfg["eval"] = {**cfg.get("eval", {}), "engine": "hf", "engine_kwargs": {"batch_size": eval_tasks}}
    if TINY:  # a CPU smoke run of the same stages: short prompts, short completions
        cfg["task_params"] = {"keys": 2, "updates": 8}
        cfg["rl"].update(max_new_tokens=24, max_tool_calls=2, num_generations=2, gradient_accumulation_steps=2)
        cfg["eval"].update(max_new_tokens=24, max_tool_calls=2)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return cfg


def quickstart() -> dict:
    py = sys.executable
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    prep = subprocess.run([py, "-m", "sculptor_rl.cli", "model", "prepare"], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    print(prep.stdout, prep.stderr[-3000:], flush=True)
    if prep.returncode:
        raise RuntimeError(f"model prepare failed ({prep.returncode}): {prep.stderr.strip()[-400:]}")
    prepare_s = time.perf_counter() - start
    cfg_path = OUT / "quickstart_gpu.yaml"
    cfg = part2_config(cfg_path)
    if os.environ.get("GPU_CHECK_FRESH") == "1":  # a new run instead of resuming the one a call before left
        shutil.rmtree(RUNS / cfg["name"], ignore_errors=True)
    # the pipeline stops (and resumes on the next call) 20 s before gpu_check.sh's limit, to leave time for the table
    limit = max(30.0, LIMIT - (time.monotonic() - START) - 20)
    print(f"pipeline config {cfg_path} (run folder {RUNS / cfg['name']}), limit {limit:.0f} s:\n{cfg_path.read_text()}",
          flush=True)
    start = time.perf_counter()
    try:  # the pipeline's own output streams into the log; a cut run resumes on the next call
        rc = subprocess.run([py, "-m", "sculptor_rl.cli", "pipeline", "--config", str(cfg_path)], env=env, cwd=ROOT,
                            timeout=limit).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    wall = time.perf_counter() - start
    root = RUNS / cfg["name"]
    stages = {}
    from sculptor_rl.pipeline import STAGES

    for stage in STAGES:
        done = root / stage / "done.json"
        stages[stage] = round(json.loads(done.read_text())["seconds"], 1) if done.exists() else None
    keep = OUT / "quickstart_run"
    for rel in ["report.md", *(f"{s}/done.json" for s in STAGES), "teachers/teachers.md", "eval/results.md",
                "eval/results.json", "sft/curves.png", "rl/curves.png", "eval/accuracy_vs_length.png",
                "eval/tool_usage.png"]:
        if (root / rel).exists():
            (keep / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, keep / rel)
    accuracy = {}
    results = root / "eval" / "results.json"
    if results.exists():
        for run in json.loads(results.read_text()).get("runs", []):
            accuracy[f"{run['model']} / {run['mode']}"] = run.get("average")
    sizes = {k: cfg[k] for k in ("task", "task_params", "train_tasks", "rl_tasks", "eval_tasks", "teacher_tasks")}
    sizes.update(sft=cfg["sft"], rl=cfg["rl"], eval=cfg["eval"])
    if rc != 0:
        print(f"pipeline exit: {rc}", flush=True)
    return {"status": "ok" if rc == 0 else "incomplete", "pipeline_exit": rc, "model_prepare_s": prepare_s,
            "pipeline_wall_s": wall, "stage_s": stages, "eval_accuracy": accuracy, "sizes": sizes,
            "run_folder": str(root)}


# ---------------------------------------------------------------- tables


def _f(x, digits=2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e-2 and x else f"{x:,.{digits}f}"
    return str(x)


def table(data: dict) -> str:
    env, sec = data["env"], data["sections"]
    where = env.get("gpu") or f"CPU ({env['cpu_count']} cores)"
    lines = [f"# GPU check {data['part']}: {where}, torch {env['torch']}, transformers {env['transformers']}, "
             f"trl {env.get('trl')}{', TINY sizes' if env['tiny'] else ''} ({env['time_utc']} UTC)", ""]
    for name, s in sec.items():
        if s["status"] == "error":
            lines += [f"## {name}: ERROR after {s['seconds']} s", "", f"    {s['error']}", ""]
    if (s := sec.get("shared_prefix")) and s["status"] == "ok":
        lines += ["## (b) shared prefix vs plain path (worst over cases)", "",
                  "| precision | loss rel | logp abs | grad rel norm | grad abs |", "|---|---|---|---|---|"]
        for p, w in s["worst"].items():
            lines.append(f"| {p} | {_f(w['loss_rel'])} | {_f(w['logp_abs'])} | {_f(w['grad_rel_norm'])} | "
                         f"{_f(w['grad_abs'])} |")
        lines += ["", f"within the CPU tests' tolerances (fp32 1e-5, bf16 2e-2): "
                      f"{s['all_within_cpu_test_tolerance']} ({len(s['cells'])} cells, {s['seconds']} s)", ""]
    if (s := sec.get("small_steps")) and s["status"] == "ok":
        sft, gspo = s["sft"], s["gspo"]
        lines += [f"## (a) {s['model']}, {s['precision']}", "",
                  "| step | first (s) | mean after first (s) | finite | last loss (GSPO: round sum) | peak GiB |",
                  "|---|---|---|---|---|---|",
                  f"| SFT (MaskedSFTTrainer, {sft['steps']} steps) | {_f(sft['first_step_s'], 3)} | "
                  f"{_f(sft['mean_step_s_after_first'], 3)} | {sft['finite']} | {_f(sft['losses'][-1], 3)} | "
                  f"{_f(sft['peak_gib'])} |",
                  f"| GSPO round ({gspo['micro_batches_per_round']} micro-batches + AdamW) | "
                  f"{_f(gspo['first_round_s'], 3)} | {_f(gspo['mean_round_s_after_first'], 3)} | {gspo['finite']} | "
                  f"{_f(gspo['last_round_loss'], 3)} | {_f(gspo['peak_gib'])} |", ""]
    if (s := sec.get("sft_throughput")) and s["status"] == "ok":
        lines += [f"## (c) SFT tokens/s, {s['model']}, {s['samples']} quickstart samples ({s['tokens']:,} tokens), "
                  f"peak = {s['peak_memory']}", "", "| variant | micro-batches | s | tokens/s | peak GiB |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['variant']} | {r['micro-batches']} | {_f(r['seconds'], 1)} | {_f(r['tokens/s'], 0)} | "
                  f"{_f(r['peak GiB'])} |" for r in s["rows"]]
        lines += ["", f"ours (no sharing) vs TRL SFTTrainer: {s['ours_vs_trl']:.2f}x "
                      f"({s['ours_vs_trl_no_checkpointing']:.2f}x vs TRL without checkpointing); best of ours vs "
                      f"TRL: {s['best_ours_vs_trl']:.2f}x (goal {s['goal']})", ""]
    if (s := sec.get("gspo_16k")) and s["status"] == "ok":
        lines += [f"## (d) GSPO trainer tokens/s, {s['model']}, {s['precision']}; {s['timing']}", "",
                  "| cell | micro-batches | round s | tokens/s | trained tok/s | peak GiB |",
                  "|---|---|---|---|---|---|"]
        for c in s["cells"]:
            if c["status"] == "ok":
                lines.append(f"| {c['cell']} | {c['micro_batches']} | {_f(c['round_s'], 2)} | "
                             f"{_f(c['tokens_per_s'], 0)} | {_f(c['trained_tokens_per_s'], 0)} | {_f(c['peak_gib'])} |")
            else:
                lines.append(f"| {c['cell']} | {c['status']} | - | - | - | {_f(c.get('peak_gib'))} |")
        lines += ["", f"reference: {s['reference']} (every token of its packed sequences)", ""]
    if (s := sec.get("quickstart")) and s["status"] in ("ok", "incomplete"):
        sizes = s["sizes"]
        lines += [f"## Quickstart pipeline, HF engine, embedded model: {s['status']} (exit {s['pipeline_exit']})", "",
                  f"sizes: {sizes['task']} {sizes['task_params']}, train {sizes['train_tasks']}, eval "
                  f"{sizes['eval_tasks']}, teachers {sizes['teacher_tasks']}/family, rl max_steps "
                  f"{sizes['rl'].get('max_steps')}", "", "| stage | seconds |", "|---|---|",
                  f"| model prepare (GGUF → HF) | {_f(s['model_prepare_s'], 1)} |"]
        lines += [f"| {k} | {_f(v, 1)} |" for k, v in s["stage_s"].items()]
        lines += [f"| pipeline wall (this call) | {_f(s['pipeline_wall_s'], 1)} |", ""]
        if s["eval_accuracy"]:
            lines += ["| model / mode | accuracy |", "|---|---|"]
            lines += [f"| {k} | {_f(v, 3)} |" for k, v in s["eval_accuracy"].items()] + [""]
    lines.append("sections: " + ", ".join(f"{k} {v['status']} ({v['seconds']} s)" for k, v in sec.items()))
    return "\n".join(lines)


def finish(res: Results) -> None:
    text = table(res.data)
    res.path.with_suffix(".md").write_text(text + "\n")
    print("\n" + text, flush=True)


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "table":
        print(table(json.loads(Path(sys.argv[2]).read_text())))
        return
    if what not in ("part1", "part2"):
        sys.exit(__doc__)
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if DEVICE == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 comparisons in fp32 (torch's default, made explicit)
    res = Results(what)
    print(json.dumps(res.data["env"], indent=1), flush=True)
    if what == "part1":
        only = os.environ.get("GPU_CHECK_ONLY", "shared_prefix small_steps gspo_16k sft_throughput").split()
        # the longest (c) last: a run the time limit cuts still has (d)
        for name, fn in [("shared_prefix", shared_prefix_equal), ("small_steps", small_steps),
                         ("gspo_16k", gspo_16k), ("sft_throughput", sft_throughput)]:
            if name in only:
                res.run(name, fn)
    else:
        res.run("quickstart", quickstart)
    finish(res)


if __name__ == "__main__":
    main()
