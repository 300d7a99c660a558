"""Training throughput on Algorithm 1 samples: TRL's SFTTrainer, ours without and with shared prefixes.

    .venv/bin/python bench/train_throughput.py [--samples 8] [--budgets 3072 8192] [--groups 4 8 16]
    .venv/bin/python bench/train_throughput.py --samples 0 --contexts 32768 --layers 2 --groups 4 8   # long prompts

1. SFT on the quickstart's pi_llm samples (its `task_params` from configs/quickstart.yaml, seed 0, scripted
   teacher, Algorithm 1; the first `--samples` of them in file order, i.e. whole rollouts), the embedded model,
   bf16 autocast where the CPU runs bf16 natively, else fp32 (`bf16_is_fast`), one epoch, AdamW, each variant in
   its own process from the same initial weights:
   (a) TRL `SFTTrainer` as a user configures it for these samples: the dataset's `input_ids` and
       `assistant_masks` (TRL builds the labels from them), batch 1, TRL's own defaults otherwise (bf16 and
       gradient checkpointing on); (a') the same with gradient checkpointing off;
   (b) ours (`MaskedSFTTrainer`: LM head only on trained positions, samples trimmed after their last trained
       token), batch 1, `shared_prefix: false`, as configs/acm/sft_quickstart_cpu.yaml;
   (c) ours with `shared_prefix: true` and `max_tokens_per_batch` each of `--budgets` (samples in prefix
       order).
   Throughput counts the dataset's tokens (the same numerator for all: what TRL trains on) over the wall
   time of `trainer.train()`. Memory: peak RSS during `train()` minus RSS before it (psutil, sampled every
   5 ms by a thread; torch's CPU allocations are not seen by tracemalloc), in the variant's fresh process.
2. RL-shaped batches: one GRPO group, G rollouts of `--completion` trained tokens (a rollout's first sample:
   the group's prompt, then its first completion) after a shared prompt of C tokens, forward + backward of
   the masked-LM loss, on a randomly initialised model of the embedded model's shape (`--layers` of its 30;
   fewer only to reach 32k prompts in minutes). Plain: rows one at a time (micro-batches of one, memory of
   one row), the fastest of `--plain-rows` rows times G (every row has the same length); shared: the whole
   group at once, fastest of `--repeats`.

`--model` / `--tokenizer` / `--device cuda` run part 1 on another model (a checkpoint directory; the samples are
tokenized with `--tokenizer`, default the model's) on the GPU; bench/gpu_check.py does so with a random
Qwen3-0.6B-shaped model and the embedded model's tokenizer.

The last line, for scripts: `shared-prefix vs TRL SFTTrainer: N.NNx` ((c) at the first budget over (a), tokens/s).
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import threading
import time
from pathlib import Path

import psutil
import torch
import yaml

from sculptor_rl.models import bf16_is_fast

BF16 = bf16_is_fast()  # bf16 autocast where it is native; emulated bf16 is ~20x slower than fp32
PRECISION = "bf16" if BF16 else "fp32"


class PeakRSS:
    """Peak resident memory while inside the block, over the RSS at its start (a thread samples it)."""

    def __enter__(self):
        self.proc, self.base, self.peak, self.done = psutil.Process(), psutil.Process().memory_info().rss, 0, False
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.done:
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc):
        self.done = True
        self.thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def gib(self) -> float:
        return (self.peak - self.base) / 2**30


def quickstart_samples(n: int, model: str | None = None):
    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.models import resolve_model
    from sculptor_rl.rollout import RolloutConfig, rollout
    from sculptor_rl.samples import policy_samples
    from sculptor_rl.envs.tasks import generate

    quickstart = yaml.safe_load(Path(__file__).resolve().parents[1].joinpath("configs/quickstart.yaml").read_text())
    fmt = ChatFormat.from_pretrained(resolve_model(model))  # the tokenizer and chat template only
    tasks = generate(quickstart["task"], n, 0, **quickstart["task_params"])  # >= n samples: 2+ per rollout
    trajs = [t for t in rollout(tasks, RolloutConfig(engine="scripted"), fmt=fmt, progress=False) if t.reward >= 1]
    return policy_samples(trajs, fmt.provenance)[:n]


def sft_variants(samples, budgets: list[int], out: Path, model: str | None = None, tokenizer: str | None = None,
                 device: str = "cpu") -> list[dict]:
    """Each variant in a fresh process (spawned): the same initial weights from disk, and a peak memory that no
    earlier variant's freed-but-kept allocations hide. `model` (default: the embedded one) and `tokenizer`
    (default: the model's) are paths; on `device` "cuda" the variants train in bf16 on the GPU (TRL's and our
    defaults there) and the peak is CUDA's allocated memory instead of the resident memory."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from sculptor_rl.samples import write_samples

    write_samples(samples, out / "samples.jsonl")
    cpu = device == "cpu"
    common = dict(output_dir=str(out / "run"), num_train_epochs=1, learning_rate=1e-5, bf16=BF16 if cpu else True,
                  use_cpu=cpu,
                  max_length=None, per_device_train_batch_size=1, gradient_accumulation_steps=1, save_strategy="no",
                  report_to=[], logging_steps=1000, dataloader_num_workers=0, seed=0)
    ours = dict(common, gradient_checkpointing=False)  # as configs/acm/sft_quickstart_cpu.yaml
    variants = [("(a) TRL SFTTrainer", "trl", common),
                ("(a') TRL SFTTrainer, no checkpointing", "trl", dict(common, gradient_checkpointing=False)),
                ("(b) ours, no sharing", "ours", dict(ours, shared_prefix=False))]
    variants += [(f"(c) ours, shared prefix, {b} tokens", "ours",
                  dict(ours, shared_prefix=True, max_tokens_per_batch=b)) for b in budgets]
    rows = []
    for variant in variants:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            rows.append(pool.submit(sft_variant, *variant, out / "samples.jsonl", model, tokenizer).result())
        print(rows[-1], flush=True)
    return rows


def sft_variant(name: str, kind: str, args: dict, samples: Path, model_path: str | None = None,
                tokenizer: str | None = None) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from sculptor_rl.models import resolve_model
    from sculptor_rl.train.sft import MaskedSFTTrainer, SculptorSFTConfig, load_sample_dataset

    model_path = resolve_model(model_path)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    cls, config = (SFTTrainer, SFTConfig) if kind == "trl" else (MaskedSFTTrainer, SculptorSFTConfig)
    dataset = load_sample_dataset(str(samples), None)
    trainer = cls(model=model, args=config(**args), train_dataset=dataset,
                  processing_class=AutoTokenizer.from_pretrained(tokenizer or model_path))
    steps = len(trainer.get_train_dataloader())
    tokens = sum(map(len, dataset["input_ids"]))
    gc.collect()
    cuda = trainer.args.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    with PeakRSS() as mem:
        start = time.perf_counter()
        trainer.train()
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if cuda else mem.gib
    return {"variant": name, "micro-batches": steps, "seconds": seconds, "samples/s": len(dataset) / seconds,
            "tokens/s": tokens / seconds, "peak GiB": peak}


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def rl_cells(groups: list[int], contexts: list[int], completion: int, layers: int, plain_rows: int,
             repeats: int) -> list[dict]:
    from transformers import AutoConfig, AutoModelForCausalLM

    from sculptor_rl.models import resolve_model
    from sculptor_rl.train.shared_prefix import token_logprobs

    cfg = AutoConfig.from_pretrained(resolve_model(None))
    cfg.num_hidden_layers = layers
    cfg.max_position_embeddings = max(cfg.max_position_embeddings, max(contexts) + completion)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).train()

    def step(ids, shared):
        labels = ids.clone()
        labels[:, : ids.shape[1] - completion] = -100
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
            logp, mask = token_logprobs(model, ids, torch.ones_like(ids), labels, shared_prefix=shared)
        (-logp.sum() / mask.sum()).backward()
        model.zero_grad(set_to_none=True)

    step(torch.randint(0, cfg.vocab_size, (2, 64 + completion)), True)  # warm-up
    rows = []
    for ctx in contexts:
        prompt = torch.randint(0, cfg.vocab_size, (1, ctx))
        for g in groups:
            ids = torch.cat([prompt.expand(g, -1), torch.randint(0, cfg.vocab_size, (g, completion))], dim=1)
            gc.collect()
            with PeakRSS() as plain_mem:
                plain = min(timed(step, ids[r : r + 1], False) for r in range(min(plain_rows, g))) * g
            gc.collect()
            with PeakRSS() as shared_mem:
                shared = min(timed(step, ids, True) for _ in range(repeats))
            tokens = g * (ctx + completion)
            rows.append({"G": g, "context": ctx, "plain s": plain, "shared s": shared,
                         "plain tok/s": tokens / plain, "shared tok/s": tokens / shared, "speed-up": plain / shared,
                         "plain GiB": plain_mem.gib, "shared GiB": shared_mem.gib})
            print(rows[-1], flush=True)
    return rows


def table(rows: list[dict]) -> str:
    keys = list(rows[0])
    fmt = {float: "{:.2f}", int: "{}", str: "{}"}
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt[type(r[k])].format(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=8, help="quickstart samples trained (in file order)")
    ap.add_argument("--model", help="SFT: a checkpoint directory (default: the embedded model)")
    ap.add_argument("--tokenizer", help="SFT: the directory whose tokenizer makes the samples (default: the model's)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="SFT: where the trainers run")
    ap.add_argument("--budgets", type=int, nargs="+", default=[3072, 8192], help="(c)'s max_tokens_per_batch")
    ap.add_argument("--groups", type=int, nargs="*", default=[4, 8, 16])
    ap.add_argument("--contexts", type=int, nargs="*", default=[2048, 8192],
                    help="RL prompt lengths (32768: ~5 min per plain row on 2 cores)")
    ap.add_argument("--completion", type=int, default=256, help="trained tokens per rollout")
    ap.add_argument("--layers", type=int, default=30, help="layers of the random RL model (the embedded one: 30)")
    ap.add_argument("--plain-rows", type=int, default=2, help="plain rows timed per RL cell (fastest x G)")
    ap.add_argument("--repeats", type=int, default=2, help="shared steps timed per RL cell (fastest)")
    args = ap.parse_args()
    torch.manual_seed(0)

    rl = rl_cells(args.groups, args.contexts, args.completion, args.layers, args.plain_rows,
                  args.repeats) if args.groups else []
    if rl:
        print(f"\nRL-shaped: one group, {args.completion} trained tokens per rollout, random model of the embedded "
              f"shape with {args.layers} layers, {PRECISION}; plain = fastest of {args.plain_rows} row(s) x G:\n{table(rl)}")
    if not args.samples:
        return
    samples = quickstart_samples(args.samples, args.tokenizer or args.model)
    print(f"{len(samples)} samples, {sum(len(s.input_ids) for s in samples)} tokens", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        sft = sft_variants(samples, args.budgets, Path(tmp), args.model, args.tokenizer, args.device)
    precision = PRECISION if args.device == "cpu" else "bf16 on CUDA"
    print(f"\nSFT, quickstart pi_llm samples ({len(samples)}), {args.model or 'embedded model'}, {precision}, "
          f"torch threads {torch.get_num_threads()}:\n{table(sft)}")
    trl, trl_no_ckpt, ours, shared = (row["tokens/s"] for row in sft[:4])
    print(f"\nours (no sharing) vs TRL SFTTrainer: {ours / trl:.2f}x ({ours / trl_no_ckpt:.2f}x without checkpointing)")
    print(f"shared-prefix vs TRL SFTTrainer without checkpointing: {shared / trl_no_ckpt:.2f}x")
    print(f"shared-prefix vs TRL SFTTrainer: {shared / trl:.2f}x")


if __name__ == "__main__":
    main()
