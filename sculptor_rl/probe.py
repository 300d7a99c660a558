"""How long a pipeline's stages will take on this machine, from a short probe (~10-40 s on 2 CPU cores).

The probe times the model here, in the precision the trainers and engines will use (`bf16_is_fast`): one
training step (forward, backward, AdamW) at the recipe's mean SFT sample length, and one inference forward at its
mean held-out prompt length. The recipe's shape (samples per teacher rollout and their lengths, prompt lengths)
comes from the scripted teacher on a few of its own tasks. Each stage's estimate is the probe's time times a
count from the recipe times a ratio measured once on a reference run (`REFERENCE`): what a stage costs in units of
the probe, which holds on another CPU as far as the probe's operations stand for the stage's. The pipeline prints
the estimate before any stage and, with `budget_minutes`, picks its smaller recipe where the full one would not
fit (docs/cpu.md has the estimates next to measured stages on both kinds of CPU).
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

__all__ = ["REFERENCE", "Probe", "RecipeShape", "estimate", "probe"]

# What each stage costs in units of the probe, measured on a 2-core AMD EPYC with AVX512-BF16 (bf16), 2026-11-27
# (docs/cpu.md, "The quickstart's time on this machine"):
# - sft_step: seconds per SFT sample / the probe's training step at the samples' mean length: 1.00 there
#   (`bench/probe_check.py`), 0.97 and 1.03 on an AMX Xeon natively and as an AVX2-only CPU;
# - rl_start, rl_step: the GSPO stage's set-up beside its engine (model, trainer, checkpoints) and seconds per step
#   of 4 rollouts (generation, training, weight reload), in the probe's training steps: fitted to the paper
#   protocol's stage (4 steps, 461 s) and the quickstart's small recipe (2 steps, 259 s);
# - engine_start: seconds to start a vLLM engine / the probe's forward (71 s measured, 72 estimated);
# - eval: seconds per held-out task / the probe's forward at the tasks' mean prompt length beyond the prefix they all
#   share (the prefix cache computes that once), per kind of run: a model that does not call the tools (the base
#   model, the no-tool modes) reads the context once (0.88 and 0.90 in the quickstart's and the protocol's base runs,
#   100 and 300 tasks per mode); a trained one with the tools costs what its behaviour costs: 5.6 for a small recipe's
#   student on tasks of 32 updates (3.4 calls and 200 generated tokens per task, 582 s for 100 tasks), 4.4 (bf16) and
#   5.0 (fp32, AVX2 emulated) for the shipped small recipe's (16 updates, at most 3 calls), 1.6 for the full recipe's
#   better one on an AMX box. The estimate takes the slowest, so it errs long for a well-trained model.
TRAINED_TOKENS = 64  # a sample's completion: what the LM head runs on in a training step
REFERENCE = {"sft_step": 1.0, "rl_start": 8.5, "rl_step": 5.8, "engine_start": 20.0, "eval_once": 0.9,
             "eval_tools": 5.6}


@dataclass
class Probe:
    """The probe's timings here (seconds, median of `repeats`)."""

    precision: str  # "bf16" or "fp32"
    train_tokens: int
    train_s: float  # one training step of one sample of `train_tokens`
    prompt_tokens: int
    forward_s: float  # one inference forward of `prompt_tokens`
    seconds: float  # the probe's own wall time, model loading included


@dataclass
class RecipeShape:
    """What the recipe's stages will do, from the scripted teacher on a few of its tasks (the pipeline's
    `recipe_shape`)."""

    samples_per_rollout: float
    sample_tokens: int  # mean tokens of an SFT sample
    prompt_tokens: int  # mean tokens of a held-out task's first prompt
    # ... less the prefix all of them share (the system turn and tools), which the engine's prefix cache computes once
    prompt_new_tokens: int


def probe(model: str | None, train_tokens: int, prompt_tokens: int, repeats: int = 2) -> Probe:
    """Time one training step and one inference forward of `model` here (one untimed warm-up of each)."""
    import torch
    from transformers import AutoModelForCausalLM

    from .models import bf16_is_fast, resolve_model

    start = time.perf_counter()
    bf16 = bf16_is_fast()
    net = AutoModelForCausalLM.from_pretrained(resolve_model(model), dtype=torch.float32)
    vocab = net.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, train_tokens), generator=gen)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-12)

    def train_step(x):
        # as the SFT and RL losses do: the LM head on the trained (completion) tokens only
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = net(input_ids=x, logits_to_keep=TRAINED_TOKENS).logits[0].float()
        loss = torch.nn.functional.cross_entropy(logits, x[0, -logits.shape[0]:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    train_s = _timed(train_step, ids, repeats)
    del optimizer
    net = net.to(torch.bfloat16 if bf16 else torch.float32).eval()
    prompt = torch.randint(0, vocab, (1, prompt_tokens), generator=gen)

    def forward(x):
        with torch.inference_mode():
            net(input_ids=x)

    forward_s = _timed(forward, prompt, repeats)
    return Probe("bf16" if bf16 else "fp32", train_tokens, train_s, prompt_tokens, forward_s,
                 time.perf_counter() - start)


def _timed(fn, x, repeats: int) -> float:
    fn(x[:, :32])  # a short warm-up: the first call's one-off costs (lazy initialisation, optimizer state)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def estimate(p: Probe, shape: RecipeShape, train_tasks: int, epochs: float, rl_steps: int,
             eval_runs: dict[str, int], ref: dict = REFERENCE) -> dict[str, float]:
    """Seconds per stage: `eval_runs` counts held-out task runs by kind ("once": a model reading the context once;
    "tools": a trained model with the tools). Data, teachers and collect are a few seconds of scripted rollouts."""
    # the probe ran at one length: other lengths scale linearly (attention's quadratic part is small at these)
    train_s = p.train_s * shape.sample_tokens / p.train_tokens
    forward_s = p.forward_s * shape.prompt_new_tokens / p.prompt_tokens
    engine_start = ref["engine_start"] * p.forward_s
    return {
        "data, teachers, collect": 20.0,
        "sft": train_tasks * shape.samples_per_rollout * epochs * ref["sft_step"] * train_s,
        "rl": (engine_start + (ref["rl_start"] + rl_steps * ref["rl_step"]) * train_s) if rl_steps else 0.0,
        "eval": engine_start + sum(n * ref[f"eval_{kind}"] * forward_s for kind, n in eval_runs.items()),
    }
