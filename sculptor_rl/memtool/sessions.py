"""MemTool sessions: T consecutive user requests, each needing catalogue tools (a task family, `memtool`).

A record has the family layout of `sculptor_rl.tasks` (the first user message; the environment gives the system
prompt), and:

    "answer": [[<value>, ...] per request],            # the tool outputs each request asks for, in order
    "meta": {"requests": [{"text": ..., "calls": [{"name": get_..., "arguments": {"year": ..[, "quarter": ..]}}]}],
             "bucket": "<requests>x<calls_per_request>", "requests_per_session", "calls_per_request", "reuse"}

Every request's first call uses a tool no earlier request used (so it is not loaded yet); each further call
does too, except that with probability `reuse` it asks again, for another period, about a tool one of the
previous two requests used (a policy that keeps recent tools loaded saves a search there). Requests name
companies and metrics in words, never tool names or tickers: the agent has to search.

A request is completed when the reply to it contains every asked value exactly (two decimals, as the tool
printed it); a session scores the fraction of its requests completed.
"""

from __future__ import annotations

import random
import re

from .catalogue import QUARTERS, YEARS, Tool, catalogue

NAME = "memtool"

__all__ = ["NAME", "generate", "score", "render_answer", "request_message", "request_index"]


def _check(name: str, value, low: float, high: float | None = None, kind=int) -> None:
    if not isinstance(value, kind) or isinstance(value, bool) or value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {'an integer' if kind is int else 'a number'} {bound}, got {value!r}")


def request_message(index: int, total: int, text: str) -> str:
    """The user message that opens request `index` (0-based) of a session."""
    return f"Request {index + 1} of {total}: {text}"


_REQUEST = re.compile(r"^Request (\d+) of (\d+): ", re.M)


def request_index(text: str) -> int | None:
    """The 0-based index of the last request opened in `text`, None if none is."""
    found = _REQUEST.findall(text)
    return int(found[-1][0]) - 1 if found else None


def _period(args: dict) -> str:
    return f"Q{args['quarter']} {args['year']}" if args.get("quarter") else f"fiscal year {args['year']}"


def _request_text(tools: list[Tool], calls: list[dict]) -> str:
    parts = [f"the {t.metric.phrase} of {t.company.name} in {_period(c['arguments'])}" for t, c in zip(tools, calls)]
    what = parts[0] if len(parts) == 1 else "; ".join(parts[:-1]) + "; and " + parts[-1]
    return f"Find {what}. Reply with the numbers."


def _session(seed: int, index: int, requests: int, calls_per_request: int, reuse: float) -> dict:
    rng = random.Random(f"{NAME}:{seed}:{index}")
    cat = catalogue()
    used: set[str] = set()
    history: list[list[str]] = []  # tool names per request
    metas, answers = [], []
    for _ in range(requests):
        names: list[str] = []
        recent = [n for past in history[-2:] for n in past]
        for j in range(calls_per_request):
            candidates = [n for n in recent if n not in names]
            if j and candidates and rng.random() < reuse:
                names.append(rng.choice(candidates))
            else:
                while (name := rng.choice(cat.names)) in used or name in names:
                    pass
                names.append(name)
        used.update(names)
        history.append(names)
        calls = []
        for name in names:
            args = {"year": rng.choice(YEARS)}
            if rng.random() < 0.5:
                args["quarter"] = rng.choice(QUARTERS)
            calls.append({"name": name, "arguments": args})
        tools = [cat[n] for n in names]
        metas.append({"text": _request_text(tools, calls), "calls": calls})
        answers.append([t.value(**c["arguments"]) for t, c in zip(tools, calls)])
    first = request_message(0, requests, metas[0]["text"])
    return {
        "id": f"{NAME}-s{seed}-{index:05d}",
        "task": NAME,
        "messages": [{"role": "user", "content": first}],
        "answer": answers,
        "meta": {"bucket": f"{requests}x{calls_per_request}", "requests": metas, "requests_per_session": requests,
                 "calls_per_request": calls_per_request, "reuse": reuse},
    }


def generate(num: int, seed: int = 0, requests: int = 4, calls_per_request: int = 2, reuse: float = 0.25) -> list[dict]:
    """`num` sessions of `requests` requests with `calls_per_request` tool calls each (MemTool: 100 and ~5)."""
    _check("num", num, 0)
    _check("requests", requests, 1)
    _check("calls_per_request", calls_per_request, 1, 20)
    _check("reuse", reuse, 0, 1, kind=(int, float))
    return [_session(seed, i, requests, calls_per_request, reuse) for i in range(num)]


def completed(values: list[str], reply: str) -> bool:
    """Does the reply contain every value exactly (not as part of a longer number)?"""
    return all(re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", reply) for v in values)


def score(record: dict, replies: str | list[str]) -> float:
    """The fraction of the session's requests whose reply (in order; missing ones count as wrong) is complete.
    A single string is the reply to the first request."""
    replies = [replies] if isinstance(replies, str) else replies
    return sum(completed(values, reply) for values, reply in zip(record["answer"], replies)) / len(record["answer"])


def render_answer(answer: list[list[str]]) -> list[str]:
    """The ideal replies, one per request."""
    return ["Answer: " + ", ".join(values) for values in answer]
