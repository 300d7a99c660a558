"""Tool-use metrics of WorkBench and NESTFUL: outcome accuracy per domain, tool F1, parameter F1 and full-sequence
match, each rate with its 95 % interval (`sculptor_rl.stats`).

- tool F1: the F1 of the predicted tool names against the gold ones, as multisets (order ignored);
- parameter F1: the same over (tool, argument, value) triples (values compared as JSON, `canonical`: a whole
  float is its int, as Python's == has it, and NESTFUL's reference `$var1.result$` is `$var_1.result$`);
- full-sequence match: the predicted calls are the gold calls exactly, in order (names and arguments);
- outcome accuracy (WorkBench): the final database state equals the gold one (`sandbox.outcome_correct`).
"""

from __future__ import annotations

import json
from collections import Counter

from ...stats import bootstrap_mean, wilson

__all__ = ["canonical", "full_match", "param_f1", "summarize", "tool_f1"]


def _f1(pred: Counter, gold: Counter) -> float:
    if not pred and not gold:
        return 1.0
    hit = sum((pred & gold).values())
    if not hit:
        return 0.0
    p, r = hit / sum(pred.values()), hit / sum(gold.values())
    return 2 * p * r / (p + r)


def canonical(value):
    """An argument value as compared: whole floats as ints (100.0 == 100), NESTFUL references without the
    underscore (`$var_1.result$` = `$var1.result$`, as NESTFUL's files write them), JSON text."""
    def norm(v):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [norm(x) for x in v]
        return v
    return json.dumps(norm(value), sort_keys=True).replace("$var_", "$var")


def tool_f1(pred: list[dict], gold: list[dict]) -> float:
    return _f1(Counter(c["name"] for c in pred), Counter(c["name"] for c in gold))


def _triples(calls: list[dict]) -> Counter:
    return Counter((c["name"], k, canonical(v)) for c in calls for k, v in c["arguments"].items())


def param_f1(pred: list[dict], gold: list[dict]) -> float:
    return _f1(_triples(pred), _triples(gold))


def _plain(calls: list[dict]) -> list[tuple]:
    return [(c["name"], canonical(c["arguments"])) for c in calls]


def full_match(pred: list[dict], gold: list[dict]) -> bool:
    return _plain(pred) == _plain(gold)


def _rate(values: list[bool]) -> dict:
    k, n = sum(values), len(values)
    return {"rate": k / n if n else None, "ci": list(wilson(k, n)), "n": n}


def _mean(values: list[float]) -> dict:
    ci = bootstrap_mean(values)
    return {"mean": sum(values) / len(values) if values else None, "ci": list(ci) if ci else None, "n": len(values)}


def summarize(episodes: list[dict]) -> dict:
    """`episodes`: {"domain", "outcome": bool, "calls": [...], "gold": [...]} each (the env's `info()`)."""
    domains = sorted({e["domain"] for e in episodes})
    return {"outcome": _rate([e["outcome"] for e in episodes]),
            "outcome_by_domain": {d: _rate([e["outcome"] for e in episodes if e["domain"] == d]) for d in domains},
            "tool_f1": _mean([tool_f1(e["calls"], e["gold"]) for e in episodes]),
            "param_f1": _mean([param_f1(e["calls"], e["gold"]) for e in episodes]),
            "full_sequence_match": _rate([full_match(e["calls"], e["gold"]) for e in episodes])}
