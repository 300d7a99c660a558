"""Rollouts that never wait (issue 47), in one run on the same tasks and checkpoint.

    .venv/bin/python bench/async_rollouts.py [--model CKPT] [--tasks 8] [--needles 4] [--max-new-tokens 64]
                                             [--repeats 1]

(a) The agent loop's two schedules (`LoopConfig.schedule`) on one vLLM engine, over a batch mixing short and long
    rollouts: pi_llm tasks (the scripted teacher's 2 calls: 3 steps) and needlebench tasks (one search per hop,
    then fragment, fold and answer: `--needles` + 4 steps). Lock-step sends every live rollout's turn in one
    batch and waits for its longest completion; per-rollout sends a rollout's next request as soon as its own
    tools have run. Reported per schedule: rollouts/s, generated tokens/s, the engine's busy fraction (the share
    of the wall time with at least one request in the engine; the rest is the loop's own work: rendering,
    parsing, tools) and the engine time per completion.
(b) Synchronous vs overlapped GSPO rounds (`bench/async_rounds.py`, after (a)'s engine is closed): seconds per
    optimizer step, the trainer's and the engine's idle fractions, with the engine in its own process, and the
    ideal overlap computed from the measured stage times.

The policy: the embedded 135M model seldom calls a tool zero-shot, so the scripted teachers decide the calls,
and every turn costs the engine a real completion of the rollout's prompt (greedy, up to `--max-new-tokens`):
a call turn goes on with the teacher's calls (the engine's completion is generated, counted, then dropped),
the answer turn is the engine's own. So each schedule does the same engine work (greedy: the same completions,
up to batch-dependent rounding; the `same` column counts identical rollouts). Both runs start from an empty
prefix cache, after a warm-up request.

Last lines, for scripts: `per-rollout vs lock-step: N.NNx` (rollouts/s, over all runs of each schedule), then
`overlapped vs synchronous step time: N.NNx` (`--no-rounds`: (a) only).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import async_rounds  # half (b), beside this file


class Paced:
    """The scripted teachers' calls, each turn paid for with an engine completion (module docstring); measures
    the engine's generated tokens and the time it holds at least one request, on either schedule."""

    def __init__(self, engine, tasks):
        from sculptor_rl.envs.teacher import ScriptedTeacher

        self.engine, self.teacher = engine, ScriptedTeacher(tasks)
        self.max_model_len = engine.max_model_len
        self.tokens = self.completions = self.in_flight = 0
        self.busy = 0.0
        self.since = 0.0

    def _greedy(self, request):
        from sculptor_rl.engines import SamplingConfig

        return dataclasses.replace(request, sampling=SamplingConfig(temperature=0.0))

    def _turn(self, request, completion):
        self.tokens, self.completions = self.tokens + len(completion.token_ids), self.completions + 1
        (turn,) = self.teacher.generate([request])
        return turn if turn.message.get("tool_calls") else completion

    def generate(self, requests):
        start = time.perf_counter()
        outs = self.engine.generate([self._greedy(r) for r in requests])
        self.busy += time.perf_counter() - start
        return [self._turn(r, c) for r, c in zip(requests, outs)]

    async def agenerate(self, request):
        if self.in_flight == 0:
            self.since = time.perf_counter()
        self.in_flight += 1
        try:
            out = await self.engine.agenerate(self._greedy(request))
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.busy += time.perf_counter() - self.since
        return self._turn(request, out)


def rollouts_of_both_schedules(args, engine, fmt) -> dict:
    """(a): the same tasks on the lock-step and the per-rollout schedule; {schedule: rollouts/s over its runs}."""
    from sculptor_rl.agent.loop import LoopConfig, run_rollouts
    from sculptor_rl.envs import make_env_factory
    from sculptor_rl.envs.tasks import generate

    tasks = (generate("pi_llm", args.tasks, seed=123, keys=3, updates=32)
             + generate("needlebench", args.tasks, seed=123, needles=args.needles, context_tokens=args.context_tokens))
    make_env = make_env_factory("acm")
    cfg = LoopConfig(max_new_tokens=args.max_new_tokens, max_tool_calls=30)
    rows, trajs = [], {}
    # repeats alternate the order (A B, B A, ...): on a shared machine the load drifts between runs
    order = [name for k in range(args.repeats) for name in ("lockstep", "per-rollout")[:: 1 if k % 2 == 0 else -1]]
    for schedule in order:
        engine.llm.reset_prefix_cache()
        policy = Paced(engine, tasks)
        start = time.perf_counter()
        trajs[schedule] = run_rollouts(tasks, policy, fmt, make_env, dataclasses.replace(cfg, schedule=schedule),
                                       progress=False)
        seconds = time.perf_counter() - start
        rows.append((schedule, {"seconds": seconds, "rollouts_s": len(tasks) / seconds,
                                "tok_s": policy.tokens / seconds, "busy": policy.busy / seconds,
                                "completions": policy.completions, "tokens": policy.tokens,
                                "s_per_completion": policy.busy / policy.completions}))
    same = sum([s.completion_ids for s in a.steps] == [s.completion_ids for s in b.steps]
               for a, b in zip(trajs["lockstep"], trajs["per-rollout"]))
    steps = {family: sorted(len(t.steps) for t in trajs["lockstep"] if t.task_id.startswith(family))
             for family in ("pi_llm", "needlebench")}
    print(f"(a) {len(tasks)} rollouts: {args.tasks} pi_llm (steps {steps['pi_llm'][0]}-{steps['pi_llm'][-1]}) + "
          f"{args.tasks} needlebench, {args.needles} needles (steps {steps['needlebench'][0]}-"
          f"{steps['needlebench'][-1]}); greedy, max_new_tokens {args.max_new_tokens}")
    print(f"{'schedule':<13}{'seconds':>9}{'roll/s':>9}{'tok/s':>8}{'busy':>7}{'compl.':>8}{'tokens':>8}"
          f"{'engine s/compl.':>17}{'same':>7}")
    for schedule, r in rows:
        print(f"{schedule:<13}{r['seconds']:>9.1f}{r['rollouts_s']:>9.3f}{r['tok_s']:>8.1f}{r['busy']:>7.2f}"
              f"{r['completions']:>8}{r['tokens']:>8}{r['s_per_completion']:>17.2f}{f'{same}/{len(tasks)}':>7}")
    return {schedule: len(tasks) * sum(1 for s, _ in rows if s == schedule)
            / sum(r["seconds"] for s, r in rows if s == schedule) for schedule in trajs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="checkpoint (default: the embedded SmolLM2-135M)")
    ap.add_argument("--tasks", type=int, default=8, help="tasks of each family")
    ap.add_argument("--needles", type=int, default=4, help="needlebench hops: its rollouts' length")
    ap.add_argument("--context-tokens", type=int, default=2000, help="needlebench context")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1, help="runs of each schedule, in alternating order")
    ap.add_argument("--eager", action="store_true", help="vLLM enforce_eager: no compilation at start")
    ap.add_argument("--kv-cache-memory-bytes", type=int, default=None,
                    help="KV cache (default: sized from need and free memory on CPU)")
    ap.add_argument("--no-rounds", action="store_true", help="(a) only")
    async_rounds.add_arguments(ap)
    args = ap.parse_args()

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.engines import SamplingConfig
    from sculptor_rl.engines.vllm_engine import VLLMEngine
    from sculptor_rl.models import resolve_model

    model = resolve_model(args.model)
    fmt = ChatFormat.from_pretrained(model)
    engine = VLLMEngine(model, fmt.stop_ids, SamplingConfig(temperature=0.0, seed=0), max_model_len=8192,
                        enforce_eager=args.eager, kv_cache_memory_bytes=args.kv_cache_memory_bytes)
    try:
        warm = [TokensPrompt(prompt_token_ids=fmt.head_ids([{"role": "user", "content": "Hello."}], None))]
        engine.llm.generate(warm, SamplingParams(max_tokens=8), use_tqdm=False)  # first-call costs off the clock
        a = rollouts_of_both_schedules(args, engine, fmt)
    finally:
        engine.close()  # (b) starts an engine of its own, in another process
    b = None if args.no_rounds else async_rounds.run_and_report(args)
    print(f"per-rollout vs lock-step: {a['per-rollout'] / a['lockstep']:.2f}x")
    if b is not None:
        print(f"overlapped vs synchronous step time: {b:.2f}x")


if __name__ == "__main__":
    main()
