"""The pipeline probe's SFT estimate against measured SFT steps, on this CPU (sculptor_rl/probe.py).

    python bench/probe_check.py [--model DIR] [--config configs/quickstart.yaml] [--small] [--steps 6]

Runs the probe on the config's recipe (its small recipe with --small), then SFT on the recipe's own samples (the
scripted teacher on its training tasks) for `--steps` optimizer steps of one sample, and prints the probe's
training step, the estimated and the measured seconds per SFT sample and their ratio (`ratio measured/estimated:
N.NN`). The probe stands for the stage on another CPU as far as this ratio stays near 1 there: run it on each
kind, e.g. emulating an AVX2-only CPU on a bf16 one with

    SCULPTOR_RL_BF16=0 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \\
        python bench/probe_check.py

Timing does not depend on the weights' values: `--random-weights` draws them at random from the model's config
(a machine without the model's weights needs only its config and tokenizer).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from transformers import TrainerCallback

from sculptor_rl.config import load_config
from sculptor_rl.models import resolve_model
from sculptor_rl.pipeline import PipelineConfig
from sculptor_rl.probe import REFERENCE
from sculptor_rl.train.sft import SculptorSFTConfig, build_trainer


class StepTimes(TrainerCallback):
    def __init__(self):
        self.ends: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        if not self.ends:
            self.ends.append(time.perf_counter())

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


def random_weights(model: str, out: Path) -> str:
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    for f in Path(model).iterdir():
        if f.suffix in (".json", ".jinja") and f.name != "model.safetensors.index.json":
            shutil.copy(f, out / f.name)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model)).save_pretrained(out)
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M-Instruct")
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--small", action="store_true", help="the config's small recipe")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--random-weights", action="store_true")
    ap.add_argument("--out", help="a JSON file for the numbers")
    args = ap.parse_args()

    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.rollout import RolloutConfig, rollout
    from sculptor_rl.samples import policy_samples, write_samples

    work = Path(tempfile.mkdtemp(prefix="probe_check_"))
    model = resolve_model(args.model)
    if args.random_weights:
        model = random_weights(model, work / "model")
    cfg = PipelineConfig.from_yaml(args.config)
    cfg.model = model
    if args.small:
        cfg = cfg.recipes()[1]
    stages, times = cfg.estimate()
    print(f"probe ({times.seconds:.0f} s, {times.precision}): training step of {times.train_tokens} tokens "
          f"{times.train_s:.2f} s, forward of {times.prompt_tokens} tokens {times.forward_s:.2f} s", flush=True)

    n = args.steps
    fmt = ChatFormat.from_pretrained(model)
    trajs = rollout(cfg.mixed(n, cfg.seed), RolloutConfig(engine="scripted", model=model), fmt=fmt, progress=False)
    samples = policy_samples(trajs, fmt.provenance)[:n]
    write_samples(samples, work / "samples.jsonl")
    tokens = [len(s.input_ids) for s in samples]
    overrides = {**cfg.sft, "model": model, "samples": str(work / "samples.jsonl"), "output_dir": str(work / "sft"),
                 "max_steps": n, "report_to": []}
    trainer = build_trainer(load_config(SculptorSFTConfig, cfg.sft_config, overrides))
    clock = StepTimes()
    trainer.add_callback(clock)
    trainer.train()
    steps = [b - a for a, b in zip(clock.ends, clock.ends[1:])]
    # the trainer shuffles the samples: seconds per token over all of them, at the samples' mean length
    mean_tokens = statistics.mean(tokens)
    measured = sum(steps) / sum(tokens) * mean_tokens
    per_probe_step = times.train_s * mean_tokens / times.train_tokens
    estimated = REFERENCE["sft_step"] * per_probe_step
    result = {"precision": times.precision, "probe_train_s": times.train_s, "probe_train_tokens": times.train_tokens,
              "probe_forward_s": times.forward_s, "probe_prompt_tokens": times.prompt_tokens,
              "sample_tokens": tokens, "steps_s": steps, "measured_s_per_sample": measured,
              "estimated_s_per_sample": estimated, "ratio": measured / estimated,
              "measured_over_probe": measured / per_probe_step,
              "estimate_min": {k: v / 60 for k, v in stages.items()}}
    print(f"SFT seconds per sample ({mean_tokens:.0f} tokens): measured {measured:.2f} (steps "
          f"{', '.join(f'{s:.2f}' for s in steps)}), estimated {estimated:.2f}; measured / probe step "
          f"{result['measured_over_probe']:.2f} (REFERENCE sft_step {REFERENCE['sft_step']})")
    print("estimated minutes: " + ", ".join(f"{k} {v:.1f}" for k, v in result["estimate_min"].items())
          + f"; total {sum(result['estimate_min'].values()):.1f}")
    print(f"ratio measured/estimated: {result['ratio']:.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
