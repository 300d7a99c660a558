"""ToolMem's scripted teacher: the answer the memory shown to the model points to."""

from __future__ import annotations

import re

from ...memory import bm25_scores
from . import family
from .env import VIEW_HEAD
from .experiences import read_answer
from .memory import CATEGORIES, PHRASES, TASK_LENGTH, in_band

__all__ = ["teach"]

_EXAMPLE = re.compile(r"Task Prompt: (.*?)\nRubric: .*?\nModel's Score: ([1-5])\b", re.S)  # family._examples


def _expected(section: str, query: str) -> float:
    """The score the section's memory lines and examples point to: the mean value of those most relevant to the
    task by BM25 (all of them when none is relevant): a line 3 + its category's value (+2 .. -2), an example its
    score. A line about a band of context length the task is not in does not count (BM25 cannot compare numbers;
    it stays in the BM25 corpus, so that the words all bands share weigh little). 3 when nothing counts."""
    tokens = TASK_LENGTH.search(query)
    lines = [line[2:] for line in section.splitlines() if line.startswith("- ")]
    items = [(line, 3 + next((CATEGORIES[c] for p, c in PHRASES.items() if line.lower().startswith(p)), 0))
             for line in lines] + [(m.group(1), int(m.group(2))) for m in _EXAMPLE.finditer(section)]
    scored = [(value, r) for (text, value), r in zip(items, bm25_scores(query, [text for text, _ in items]))
              if not tokens or in_band(text, int(tokens.group(1))) is not False]
    if not scored:
        return 3.0
    top = max(r for _, r in scored)
    best = [value for value, r in scored if r == top]
    return sum(best) / len(best)


def teach(task: dict, messages: list[dict], tools=None) -> str:
    """The score (predict) or the tool (select, choose) the memory lines or examples in the user message point to
    (`_expected`); after a choice, the answer the chosen tool's reader finds in the view shown. Deterministic;
    reads only what the model is shown (never the answer)."""
    if messages[-1]["role"] == "user" and messages[-1]["content"].startswith(VIEW_HEAD):
        return read_answer(task["meta"]["source"], messages[-1]["content"])
    user = next(m["content"] for m in messages if m["role"] == "user")
    kind, exps = task["meta"]["kind"], task["meta"]["experiences"]
    query = exps[0]["prompt"]
    if kind == "predict":
        return str(min(5, max(1, round(_expected(user, query)))))
    heads = [user.index(family.tool_header(kind, i, e["tool"])) for i, e in enumerate(exps)]
    ends = [*heads[1:], user.index(family.TASK_HEAD)]
    expected = [_expected(user[a:b], query) for a, b in zip(heads, ends)]
    best = expected.index(max(expected))
    return "AB"[best] if kind == "select" else exps[best]["tool"]
