"""MemToolAgent's unified memory entry m = (q, a, f, r) (§3) and how retrieved entries are shown to the model.

An entry is a plain JSON object:

    {"query": q, "calls": a = [{"name": ..., "arguments": {...}, ("label": "$var_1")}, ...],
     "feedback": f (1: the outcome was right, 0: wrong), "reflection": r (a critique, only when f = 0, else None),
     ...extra keys (id, domain, ...) kept as they are}

Shown (`render_entries`) as the paper's Figures 3 and 7: the query, the calls as `name(arg=value, ...)` lines,
the feedback as Correct/Incorrect and, for a wrong execution, the reflection.
"""

from __future__ import annotations

import json

__all__ = ["check_entry", "make_entry", "render_call", "render_entries"]


def check_entry(entry: dict) -> None:
    """ValueError/TypeError naming what is wrong with a MemToolAgent entry."""
    if not isinstance(entry.get("query"), str) or not entry["query"].strip():
        raise ValueError('"query" must be a non-empty string')
    calls = entry.get("calls")
    if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                              and isinstance(c.get("arguments"), dict) for c in calls):
        raise ValueError('"calls" must be a list of {"name": string, "arguments": object}')
    if entry.get("feedback") not in (0, 1) or isinstance(entry.get("feedback"), bool):
        raise ValueError(f'"feedback" must be 0 or 1, got {entry.get("feedback")!r}')
    reflection = entry.get("reflection")
    if reflection is not None and (entry["feedback"] == 1 or not isinstance(reflection, str)):
        raise ValueError('"reflection" is a string on a failed entry (feedback 0) only, else null')


def make_entry(query: str, calls: list[dict], feedback: int, reflection: str | None = None, **extra) -> dict:
    entry = {"query": query, "calls": [dict(c) for c in calls], "feedback": int(feedback),
             "reflection": reflection, **extra}
    check_entry(entry)
    return entry


def render_call(call: dict) -> str:
    """`name(arg="value", n=3)`, with `$var_k = ` before a labelled (NESTFUL-style) call."""
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call["arguments"].items())
    label = f"{call['label']} = " if call.get("label") else ""
    return f"{label}{call['name']}({args})"


def render_entries(entries) -> str:
    """The retrieved entries as in-context examples, separated by blank lines."""
    blocks = []
    for e in entries:
        calls = "\n".join(f"  {render_call(c)}" for c in e["calls"]) or "  (no tool calls)"
        lines = [f"Query: {e['query']}", f"Answer (tool calls):\n{calls}",
                 f"User feedback: {'Correct' if e['feedback'] else 'Incorrect'}"]
        if e.get("reflection"):
            lines.append(f"Reflection: {e['reflection']}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
