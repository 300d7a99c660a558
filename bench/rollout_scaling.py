"""Rollout throughput of the agent loop on Ray rollout workers (1 and 2) next to the in-process vLLM engine.

    .venv/bin/python bench/rollout_scaling.py [--model CKPT] [--tasks 8] [--generations 2]

The same tasks go through `run_rollouts` on each engine in turn (started, warmed up with one request, timed,
shut down; start-up is shown but not counted). Sampling is greedy, so every engine does about the same work
(the last column counts the rollouts identical to the in-process engine's). Ratios are against the in-process
engine: on a 2-core CPU the workers share the cores, so the point is Ray's overhead (requests and completions
crossing processes, engines competing for cores), not a speed-up; on a cluster each worker has its own GPUs.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--generations", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--kv-cache-memory-bytes", type=int, default=None,
                    help="KV cache per engine (default: sized from need and free memory on CPU)")
    args = ap.parse_args()

    import ray

    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.agent.loop import LoopConfig, run_rollouts
    from sculptor_rl.engines import SamplingConfig, make_engine
    from sculptor_rl.engines.base import Request
    from sculptor_rl.models import resolve_model
    from sculptor_rl.envs import make_env_factory
    from sculptor_rl.envs.tasks import generate

    model = resolve_model(args.model)
    fmt = ChatFormat.from_pretrained(model)
    tasks = generate("pi_llm", args.tasks, seed=123, keys=3, updates=32)
    make_env = make_env_factory("acm")
    first = make_env(tasks[0], 0)
    warm = Request(fmt.head_ids(first.render(), first.tools), [], 8)
    setups = [("in-process vLLM", "vllm", {}), ("Ray, 1 worker", "ray", {"num_workers": 1}),
              ("Ray, 2 workers", "ray", {"num_workers": 2})]
    rows, reference = [], None
    for name, kind, kwargs in setups:
        if kind == "ray" and not ray.is_initialized():
            ray.init(num_cpus=2, include_dashboard=False)  # a local cluster: not counted in the start-up
        t = time.perf_counter()
        engine = make_engine(kind, model, fmt, SamplingConfig(temperature=0.0), max_model_len=8192,
                             kv_cache_memory_bytes=args.kv_cache_memory_bytes, **kwargs)
        engine.generate([warm] * 2)  # first-call costs off the clock (each Ray worker gets one)
        start_s = time.perf_counter() - t
        t = time.perf_counter()
        trajs = run_rollouts(tasks, engine, fmt, make_env, LoopConfig(max_new_tokens=args.max_new_tokens),
                             num_generations=args.generations, progress=False)
        seconds = time.perf_counter() - t
        engine.close()
        texts = [[s.text for s in tr.steps] for tr in trajs]
        reference = reference or texts
        rows.append((name, start_s, len(trajs), sum(len(tr.steps) for tr in trajs),
                     sum(tr.generated_tokens for tr in trajs), seconds, sum(a == b for a, b in zip(texts, reference))))
        print(f"{name}: done in {seconds:.1f} s", flush=True)
    ray.shutdown()

    base_tok, base_roll = rows[0][4] / rows[0][5], rows[0][2] / rows[0][5]
    print(f"{args.tasks} pi_llm tasks x {args.generations} generations, greedy, max_new_tokens {args.max_new_tokens}")
    print(f"{'engine':<18}{'start s':>8}{'steps':>7}{'tokens':>8}{'seconds':>9}{'tok/s':>8}{'roll/s':>8}"
          f"{'tok/s ratio':>13}{'roll/s ratio':>14}{'same':>6}")
    for name, start_s, n, steps, tokens, s, same in rows:
        print(f"{name:<18}{start_s:>8.0f}{steps:>7}{tokens:>8}{s:>9.1f}{tokens / s:>8.1f}{n / s:>8.3f}"
              f"{tokens / s / base_tok:>13.2f}{n / s / base_roll:>14.2f}{f'{same}/{n}':>6}")


if __name__ == "__main__":
    main()
