"""Peak memory and time of a GSPO round's training on real rollouts: whole rollouts per micro-batch vs samples.

    .venv/bin/python bench/rl_memory.py --model runs/long/sft/final --rollouts runs/long/rl/rollouts \
        [--budgets 6144 4096]

The long CPU recipe's GSPO stage (configs/acm/rl_long_cpu.yaml) was once OOM-killed on a 24 GiB box. This replays
rounds it saved (`save_rollouts`: `step-*.rank0.jsonl`), cut into Algorithm 1 samples with their group
advantages as the trainer cuts them, and trains them with the trainer's own `_micro_batches` and `_compute_loss`
(bf16 autocast where native, forward + backward of every micro-batch, one AdamW step per round):
(a) whole rollouts per micro-batch, what the trainer does where the objective sums over a rollout (it is run with
    `importance_sampling_level: rollout`, which changes the loss but not the cost), at the first of `--budgets`
    (`max_tokens_per_batch`);
(b) one sample per unit in prefix order, what it does for the config's sequence / per-sample objective, at each;
(c) as (b), the heap trimmed after each micro-batch's backward (`sculptor_rl.train.heap.trim`, as the trainer
    does), at each.
Each variant runs in a fresh process from the same weights, so no earlier variant's freed-but-kept allocations
hide its peak. Peak: resident memory during training over the resident memory before it (psutil, sampled every
5 ms). Ratios are against (a).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_throughput import BF16, PRECISION, PeakRSS, table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def saved_round(path: Path, num_generations: int):
    """The trainer's samples and per-sample advantages of one saved round (`_generate_round`'s cut)."""
    from sculptor_rl.train.micro_batches import group_advantages, round_samples
    from sculptor_rl.trajectory import read_trajectories

    trajs = list(read_trajectories(path))
    rewards = torch.tensor([t.reward for t in trajs])
    return round_samples(trajs, group_advantages(rewards, num_generations, "group").tolist())


def variant(name: str, overrides: dict, model: str, rounds: list[str], trim: bool) -> dict:
    from transformers import AutoModelForCausalLM

    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.config import load_config
    from sculptor_rl.train import heap
    from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer
    from sculptor_rl.train.shared_prefix import computed_tokens

    cfg = load_config(SculptorGRPOConfig, ROOT / "configs/acm/rl_long_cpu.yaml",
                      dict(overrides, model=model, engine="hf", output_dir="/tmp/rl_memory_bench", report_to=[],
                           bf16=BF16, save_strategy="no"))
    fmt = ChatFormat.from_pretrained(model)
    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    task = {"id": "t0", "task": "pi_llm", "messages": [{"role": "user", "content": "x"}], "answer": {"k": "v"}}
    trainer = SculptorGRPOTrainer(net, cfg, [task], fmt.tokenizer, fmt)
    trainer.current_gradient_accumulation_steps = cfg.gradient_accumulation_steps
    optimizer = torch.optim.AdamW(net.parameters(), lr=cfg.learning_rate)
    computed = largest = micro = 0
    gc.collect()
    with PeakRSS() as mem:
        start = time.perf_counter()
        for path in rounds:
            batches = trainer._micro_batches(*saved_round(Path(path), cfg.num_generations))
            for b in batches:
                rows = [ids[: int(m.sum())].tolist() for ids, m in zip(b["input_ids"], b["attention_mask"])]
                if (b["labels"] != -100).any():
                    size = computed_tokens(rows, cfg.shared_prefix)
                    computed, largest, micro = computed + size, max(largest, size), micro + 1
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
                    loss = trainer._compute_loss(net, b)
                loss.backward()
                del loss
                if trim:
                    heap.trim()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - start
    return {"variant": name, "micro-batches": micro, "computed tokens": computed, "largest": largest,
            "seconds": seconds, "peak GiB": mem.gib}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the policy the rounds were sampled from (the SFT checkpoint)")
    ap.add_argument("--rollouts", required=True, help="a GSPO run's rollouts directory (save_rollouts)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds replayed: those with the most trained samples")
    ap.add_argument("--budgets", type=int, nargs="+", default=[6144, 4096])
    args = ap.parse_args()
    files = sorted(Path(args.rollouts).glob("step-*.rank0.jsonl"))
    if not files:
        sys.exit(f"error: no step-*.rank0.jsonl in {args.rollouts} (a GSPO run with save_rollouts: true)")
    from sculptor_rl.config import read_yaml

    groups = read_yaml(ROOT / "configs/acm/rl_long_cpu.yaml")["num_generations"]
    counts = {f: sum(a != 0 for a in saved_round(f, groups)[1]) for f in files}
    rounds = [str(f) for f in sorted(files, key=lambda f: -counts[f])[: args.rounds]]
    print(f"rounds: {', '.join(f'{Path(f).name} ({counts[Path(f)]} samples with a signal)' for f in rounds)}",
          flush=True)
    first = args.budgets[0]
    variants = [(f"(a) whole rollouts, {first} tokens", {"importance_sampling_level": "rollout",
                                                        "max_tokens_per_batch": first}, False)]
    variants += [(f"(b) samples, {b} tokens", {"max_tokens_per_batch": b}, False) for b in args.budgets]
    variants += [(f"(c) samples, {b} tokens, heap trimmed", {"max_tokens_per_batch": b}, True) for b in args.budgets]
    rows = []
    for name, overrides, trim in variants:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            rows.append(pool.submit(variant, name, overrides, args.model, rounds, trim).result())
        print(rows[-1], flush=True)
    ref = rows[0]
    for r in rows:
        r["time ratio"], r["peak ratio"] = r["seconds"] / ref["seconds"], r["peak GiB"] / ref["peak GiB"]
    print(f"\nGSPO rounds replayed, {PRECISION}, torch threads {torch.get_num_threads()}; ratios against "
          f"{ref['variant']}:\n{table(rows)}")


if __name__ == "__main__":
    main()
