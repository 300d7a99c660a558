"""Generated tokens/s of the multi-turn agent loop next to plain `vllm.LLM.generate`, as a ratio (goal ≥ 0.8).

    .venv/bin/python bench/rollout_throughput.py [--model CKPT] [--tasks 16] [--generations 2]

1. The loop runs pi_llm tasks on a vLLM engine; every batch it sends is recorded (prompt ids, and how many
   tokens came back for each request).
2. The same batches go to `llm.generate` directly, each request forced to generate exactly as many tokens
   (min_tokens = max_tokens = recorded length), so both sides generate the same tokens from the same prompts.
3. Also all recorded requests in one single `generate` call: the engine's best case.
The prefix cache is reset before each side. Ratio = raw time / loop time (1.0 = no loop overhead).
"""

from __future__ import annotations

import argparse
import time


class Recording:
    """Wraps an engine; keeps each batch's prompts and the number of tokens generated for each."""

    def __init__(self, engine):
        self.engine, self.batches = engine, []
        self.max_model_len = engine.max_model_len

    def generate(self, requests):
        out = self.engine.generate(requests)
        self.batches.append([(r.prompt_ids, len(c.token_ids)) for r, c in zip(requests, out)])
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--generations", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--kv-cache-memory-bytes", type=int, default=None,
                    help="KV cache per engine (default: sized from need and free memory on CPU)")
    args = ap.parse_args()

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.agent.loop import LoopConfig, run_rollouts
    from sculptor_rl.engines import SamplingConfig
    from sculptor_rl.engines.vllm_engine import VLLMEngine
    from sculptor_rl.models import resolve_model
    from sculptor_rl.envs import make_env_factory
    from sculptor_rl.envs.tasks import generate

    model = resolve_model(args.model)
    fmt = ChatFormat.from_pretrained(model)
    engine = VLLMEngine(model, fmt.stop_ids, SamplingConfig(temperature=1.0, seed=0), max_model_len=8192,
                        kv_cache_memory_bytes=args.kv_cache_memory_bytes)
    tasks = generate("pi_llm", args.tasks, seed=123, keys=3, updates=32)
    make_env = make_env_factory("acm")
    first = make_env(tasks[0], 0)
    warm = [TokensPrompt(prompt_token_ids=fmt.head_ids(first.render(), first.tools))]
    engine.llm.generate(warm, SamplingParams(max_tokens=8), use_tqdm=False)  # first-call costs off the clock

    rec = Recording(engine)
    engine.llm.reset_prefix_cache()
    t = time.perf_counter()
    trajs = run_rollouts(tasks, rec, fmt, make_env, LoopConfig(max_new_tokens=args.max_new_tokens),
                         num_generations=args.generations, progress=False)
    loop_s = time.perf_counter() - t
    tokens = sum(n for batch in rec.batches for _, n in batch)
    steps = sum(len(tr.steps) for tr in trajs)

    def raw(batches) -> float:
        engine.llm.reset_prefix_cache()
        t = time.perf_counter()
        for batch in batches:
            prompts = [TokensPrompt(prompt_token_ids=ids) for ids, _ in batch]
            params = [SamplingParams(temperature=1.0, min_tokens=n, max_tokens=n, ignore_eos=True) for _, n in batch]
            engine.llm.generate(prompts, params, use_tqdm=False)
        return time.perf_counter() - t

    raw_steps_s = raw(rec.batches)
    raw_one_s = raw([[item for batch in rec.batches for item in batch]])

    print(f"{len(trajs)} rollouts, {steps} steps in {len(rec.batches)} batches, {tokens} generated tokens")
    print(f"{'path':<42}{'seconds':>9}{'tok/s':>9}{'ratio':>8}")
    for name, s in [("agent loop (run_rollouts)", loop_s),
                    ("llm.generate, same batches", raw_steps_s),
                    ("llm.generate, one batch", raw_one_s)]:
        print(f"{name:<42}{s:>9.1f}{tokens / s:>9.1f}{tokens / s / (tokens / raw_steps_s):>8.2f}")
    print(f"loop / raw (same batches) = {raw_steps_s / loop_s:.2f}   loop / raw (one batch) = {raw_one_s / loop_s:.2f}")


if __name__ == "__main__":
    main()
