"""MemTool sessions: T consecutive user requests, each needing catalogue tools (a task family, `memtool`).

A record has the record format of `sculptor_rl.records` (the first user message; the environment gives the system
prompt), and:

    "answer": [[<value>, ...] per request],            # the tool outputs each request asks for, in order
    "meta": {"requests": [{"text": ..., "calls": [{"name": get_..., "arguments": {"year": ..[, "quarter": ..]}}]}],
             "bucket": "<requests>x<calls_per_request or its strata lo-hi>", "requests_per_session",
             "calls_per_request", "reuse", "related"}

Two shapes. Ours (the default, short sessions of a fixed number of calls per request): every request's first
call uses a tool no earlier request used (so it is not loaded yet); each further call does too, except that with
probability `reuse` it asks again, for another period, about a tool one of the previous two requests used (a
policy that keeps recent tools loaded saves a search there). The paper's (section 3.2/4.1: 100 requests
averaging 5 calls, stratified by calls per request, each related or unrelated to the previous): give
`calls_per_request` as strata, e.g. [1, ..., 9], and `related` (the probability that a request is related): a
related request asks again about one of the previous request's tools first; an unrelated one names none of
the previous request's companies; every other call uses a tool no earlier request used (`meta.requests[k].related`).
Requests name companies and metrics in words, never tool names or tickers: the agent has to search.

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


def _strata_plan(rng: random.Random, requests: int, strata: list[int]) -> list[int]:
    """Calls per request, stratified: each stratum gets requests/len(strata) requests (largest remainder; ties to
    the strata nearest the strata's mean, so 100 requests over 1..9 average exactly 5), in a random order."""
    share = requests / len(strata)
    counts = {c: int(share) for c in strata}
    centre = sum(strata) / len(strata)
    for c in sorted(strata, key=lambda c: (abs(c - centre), c))[:requests - sum(counts.values())]:
        counts[c] += 1
    plan = [c for c in strata for _ in range(counts[c])]
    rng.shuffle(plan)
    return plan


def _session(seed: int, index: int, requests: int, calls_per_request: int | list[int], reuse: float,
             related: float | None) -> dict:
    rng = random.Random(f"{NAME}:{seed}:{index}")
    cat = catalogue()
    used: set[str] = set()
    history: list[list[str]] = []  # tool names per request
    metas, answers = [], []
    plan = ([calls_per_request] * requests if isinstance(calls_per_request, int)
            else _strata_plan(rng, requests, calls_per_request))

    def new_tool(names: list[str], avoid: set[str] = frozenset()) -> str:
        while (name := rng.choice(cat.names)) in used or name in names or cat[name].company.ticker in avoid:
            pass
        return name

    for k, n_calls in enumerate(plan):
        names: list[str] = []
        is_related = None
        if related is None:
            recent = [n for past in history[-2:] for n in past]
            for j in range(n_calls):
                candidates = [n for n in recent if n not in names]
                names.append(rng.choice(candidates) if j and candidates and rng.random() < reuse else new_tool(names))
        else:
            is_related = bool(k) and rng.random() < related
            previous = history[-1] if history else []
            if is_related:  # asks again about one of the previous request's tools (for its own period)
                names.append(rng.choice(previous))
            avoid = set() if is_related else {cat[n].company.ticker for n in previous}
            while len(names) < n_calls:
                names.append(new_tool(names, avoid))
        used.update(names)
        history.append(names)
        calls = []
        for name in names:
            args = {"year": rng.choice(YEARS)}
            if rng.random() < 0.5:
                args["quarter"] = rng.choice(QUARTERS)
            calls.append({"name": name, "arguments": args})
        tools = [cat[n] for n in names]
        metas.append({"text": _request_text(tools, calls), "calls": calls,
                      **({} if is_related is None else {"related": is_related})})
        answers.append([t.value(**c["arguments"]) for t, c in zip(tools, calls)])
    first = request_message(0, requests, metas[0]["text"])
    shape = calls_per_request if isinstance(calls_per_request, int) else \
        f"{min(calls_per_request)}-{max(calls_per_request)}"
    return {
        "id": f"{NAME}-s{seed}-{index:05d}",
        "task": NAME,
        "messages": [{"role": "user", "content": first}],
        "answer": answers,
        "meta": {"bucket": f"{requests}x{shape}", "requests": metas, "requests_per_session": requests,
                 "calls_per_request": calls_per_request, "reuse": reuse, "related": related},
    }


def generate(num: int, seed: int = 0, requests: int = 4, calls_per_request: int | list[int] = 2, reuse: float = 0.25,
             related: float | None = None) -> list[dict]:
    """`num` sessions of `requests` requests. `calls_per_request`: an int (every request makes that many calls) or
    the strata of a stratified session, e.g. [1, ..., 9] (the paper: 100 requests averaging 5 calls).
    `related`: None (the calls after a request's first reuse a tool of the previous two requests with probability
    `reuse`), or the probability that a request is related to the previous one (the paper's sessions: it asks
    again about one of that request's tools; an unrelated request names none of its companies; `reuse` unused)."""
    _check("num", num, 0)
    _check("requests", requests, 1)
    if isinstance(calls_per_request, list):
        if not calls_per_request or len(set(calls_per_request)) != len(calls_per_request):
            raise ValueError(f"calls_per_request strata must be distinct integers, got {calls_per_request!r}")
        for c in calls_per_request:
            _check("a calls_per_request stratum", c, 1, 20)
    else:
        _check("calls_per_request", calls_per_request, 1, 20)
    _check("reuse", reuse, 0, 1, kind=(int, float))
    if related is not None:
        _check("related", related, 0, 1, kind=(int, float))
    return [_session(seed, i, requests, calls_per_request, reuse, related) for i in range(num)]


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
