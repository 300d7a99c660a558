"""Summarizers for `summarize_fragment`: any `(text, focus) -> str` callable; this is the offline default."""

from __future__ import annotations

import re

__all__ = ["extractive_summarizer"]

_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_WORDS = re.compile(r"\w+")


def extractive_summarizer(text: str, focus: str, max_chars: int = 400) -> str:
    """Deterministic stand-in for an LLM summary, labelled `[extractive]` so it is never taken for one.

    Keeps, in order, the lines/sentences that share a word with `focus` (words of 3+ characters or with a digit,
    case-insensitive); if none do, the first and last sentence. Cut to `max_chars`.
    """
    sentences = [s.strip() for s in _SENTENCES.split(text) if s.strip()]
    focus_words = {w for w in _WORDS.findall(focus.lower()) if len(w) >= 3 or any(c.isdigit() for c in w)}
    kept = [s for s in sentences if focus_words.intersection(_WORDS.findall(s.lower()))]
    if not kept:
        kept = sentences[:1] + sentences[1:][-1:]
    summary = " ".join(kept)
    if len(summary) > max_chars:
        summary = summary[: max_chars - 1].rstrip() + "…"
    return "[extractive] " + summary
