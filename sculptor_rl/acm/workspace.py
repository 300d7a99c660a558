"""The ACM workspace: one object owns the conversation and all tool state (fragments, search hits, id RNG).

Messages are never added, removed or reordered by a tool; tools only change how a message's ORIGINAL text is
shown. Every call is validated completely before anything is mutated, so a bad call leaves no trace.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..toolcalls import ToolResult
from .schemas import TOOL_SCHEMAS, ToolError, parse_arguments, show
from .summarize import extractive_summarizer

__all__ = ["Summarizer", "ToolResult", "Workspace"]

Summarizer = Callable[[str, str], str]  # (fragment text, focus) -> summary

_TOOL_NAMES = [s["function"]["name"] for s in TOOL_SCHEMAS]
_ID_ALPHABET = string.ascii_lowercase + string.digits
# Where a fragment may be cut, best first: after a line break, after a sentence end, after a space.
_BOUNDARIES = (re.compile(r"\n+"), re.compile(r"[.!?][\"')\]]*\s+"), re.compile(r"\s+"))
_MARKER_HINT = (
    " Markers are case-sensitive exact substrings of the original message text: copy them verbatim"
    " (fragment tags and summaries are not part of that text)."
)


@dataclass
class Fragment:
    id: str
    message: int
    start: int  # [start, end) in the message's original text
    end: int
    state: str = "shown"  # shown | folded | summarized
    focus: str = ""
    summary: str = ""


@dataclass(frozen=True)
class Hit:
    message: int
    start: int
    end: int


def _lower(text: str) -> str:
    # "İ".lower() is two characters; mapping it first keeps offsets in the lowered text equal to the original's.
    return text.replace("\u0130", "I").lower()


def _tokens(chars: int) -> int:
    return (chars + 3) // 4


def _cut_bounds(text: str, start: int, end: int, n: int) -> list[int]:
    """Bounds [start, c1, ..., end] cutting text[start:end] into at most n pieces of about equal size.

    Each cut goes to the boundary nearest its ideal offset within half a piece of it: a line boundary if there
    is one, else a sentence end, else a space; with none at all the cut is dropped (fewer pieces).
    """
    size = (end - start) / n
    bounds = [start]
    for k in range(1, n):
        ideal = start + k * size
        lo = max(bounds[-1] + 1, math.ceil(ideal - size / 2))
        hi = min(end - 1, math.floor(ideal + size / 2))
        for pattern in _BOUNDARIES:
            # Start a little early so a sentence end whose punctuation precedes `lo` is still seen.
            found = [m.end() for m in pattern.finditer(text, max(start, lo - 8), hi) if m.end() >= lo]
            if found:
                bounds.append(min(found, key=lambda p: abs(p - ideal)))
                break
    bounds.append(end)
    return bounds


def _preview(text: str, start: int, end: int, limit: int = 60) -> str:
    head = " ".join(text[start : min(end, start + 4 * limit)].split())
    return json.dumps(
        head if len(head) <= limit and end - start <= 4 * limit else head[:limit] + "…", ensure_ascii=False
    )


def _plural(n: int, word: str, words: str) -> str:
    return f"{n} {word if n == 1 else words}"


class Workspace:
    """The conversation plus the state of the six ACM tools. `execute`/`call` never raise."""

    tools = TOOL_SCHEMAS  # what the ACM environment (sculptor_rl.envs.AcmEnv) shows the model

    def __init__(self, messages: list[dict], seed: int = 0, summarizer: Summarizer | None = None) -> None:
        self._messages: list[dict] = []  # private deep copies; "content" is always the original text
        self._lowered: list[str] = []  # lowered originals, for case-insensitive search
        self._views: list[str] = []  # rendered content (with tags), refreshed whenever a message's fragments change
        self._fragments: dict[str, Fragment] = {}
        self._in_message: dict[int, list[Fragment]] = {}  # message index -> its fragments, by start
        self._hits: dict[str, Hit] = {}
        self._hit_ids: dict[Hit, str] = {}  # the same hit found again keeps its id
        self._rng = random.Random(seed)
        self._summarize = summarizer or extractive_summarizer
        for message in messages:
            self.append(message)

    # ---- the conversation -------------------------------------------------------------------------------------

    def append(self, message: dict) -> None:
        """Add a message (assistant, tool, or a user follow-up); extra keys such as tool_call_id are kept."""
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise TypeError("a message must be a dict with a string 'role'")
        if not isinstance(message.get("content"), str):
            raise TypeError("a message's 'content' must be a string")
        self._messages.append(copy.deepcopy(message))
        self._lowered.append(_lower(message["content"]))
        self._views.append(message["content"])

    def render(self, tags: bool = True) -> list[dict]:
        """What the model sees. tags=False drops the tags around shown fragments (folded/summarized ones stay)."""
        views = self._views if tags else [self._view(i, tags=False) for i in range(len(self._messages))]
        return [self._fresh(m, view) for m, view in zip(self._messages, views)]

    def original(self) -> list[dict]:
        """Every message with its original text."""
        return [self._fresh(m, m["content"]) for m in self._messages]

    @staticmethod
    def _fresh(message: dict, content: str) -> dict:
        # Only messages with extra (possibly nested) keys need a deep copy; plain ones are copied cheaply.
        fresh = {**message} if len(message) == 2 else copy.deepcopy(message)
        fresh["content"] = content
        return fresh

    def _view(self, i: int, tags: bool = True) -> str:
        text = self._messages[i]["content"]
        pieces, pos = [], 0
        for f in self._in_message.get(i, ()):
            pieces += (text[pos : f.start], self._fragment_view(f, text, tags))
            pos = f.end
        pieces.append(text[pos:])
        return "".join(pieces)

    @staticmethod
    def _fragment_view(f: Fragment, text: str, tags: bool) -> str:
        if f.state == "folded":
            return f'<fragment id="{f.id}" folded chars={f.end - f.start} />'
        if f.state == "summarized":
            focus = " ".join(f.focus.split()).replace('"', "'")[:80]
            return f'<fragment id="{f.id}" summary focus="{focus}">{f.summary}</fragment>'
        body = text[f.start : f.end]
        return f'<fragment id="{f.id}">{body}</fragment>' if tags else body

    # ---- tool calls ---------------------------------------------------------------------------------------------

    def call(self, name: Any, arguments: Any) -> str:
        """The text of `execute(name, arguments)`: what goes back to the model as the tool message."""
        return self.execute(name, arguments).text

    def execute(self, name: Any, arguments: Any) -> ToolResult:
        """Run one tool call. Bad calls give ok=False and an `Error: ...` text, and change nothing."""
        try:
            if not isinstance(name, str) or name not in _TOOL_NAMES:
                raise ToolError(f"unknown tool {show(name)}. The tools are: {', '.join(_TOOL_NAMES)}.")
            text, modified = getattr(self, "_" + name)(**parse_arguments(name, arguments))
        except ToolError as e:
            return ToolResult(f"Error: {e}", ok=False, modified=False)
        return ToolResult(text, ok=True, modified=modified)

    def _fragment_context(self, start_marker: str, end_marker: str, num_fragments: int, role: str) -> tuple[str, bool]:
        i, start, end = self._find_span(start_marker, end_marker, role)
        overlapping = [f.id for f in self._in_message.get(i, ()) if f.start < end and start < f.end]
        if overlapping:
            raise ToolError(
                f"that span (message {i}, chars {start}-{end}) overlaps existing fragment(s) {', '.join(overlapping)}; "
                "fragments cannot overlap. Choose markers outside them, or fold/summarize/restore those by id."
            )
        text = self._messages[i]["content"]
        bounds = _cut_bounds(text, start, end, num_fragments)
        new = [Fragment(self._new_id("f"), i, a, b) for a, b in itertools.pairwise(bounds)]
        self._fragments.update((f.id, f) for f in new)
        self._in_message[i] = sorted(self._in_message.get(i, []) + new, key=lambda f: f.start)
        self._views[i] = self._view(i)
        count = _plural(len(new), "fragment", "fragments")
        if len(new) < num_fragments:
            count += f" ({num_fragments} requested; the span has too few line, sentence or word boundaries for more)"
        lines = [f"Fragmented message {i} ({self._messages[i]['role']}), chars {start}-{end}, into {count}:"]
        for f in new:
            chars = f.end - f.start
            lines.append(f"- {f.id}: {chars} chars (~{_tokens(chars)} tokens) {_preview(text, f.start, f.end)}")
        return "\n".join(lines), True

    def _find_span(self, start_marker: str, end_marker: str, role: str) -> tuple[int, int, int]:
        """(message, start, end) of the first message of `role` where end_marker follows start_marker."""
        candidates = [i for i, m in enumerate(self._messages) if role == "all" or m["role"] == role]
        for i in candidates:
            text = self._messages[i]["content"]
            a = text.find(start_marker)
            b = text.find(end_marker, a + len(start_marker)) if a >= 0 else -1
            if b >= 0:
                return i, a, b + len(end_marker)
        where = "any message" if role == "all" else f"any {role} message"
        starts = [i for i in candidates if start_marker in self._messages[i]["content"]]
        if not starts:
            elsewhere = role != "all" and any(start_marker in m["content"] for m in self._messages)
            hint = ' It occurs in a message of another role: set role="all".' if elsewhere else _MARKER_HINT
            raise ToolError(f"start_marker {show(start_marker)} not found in {where}.{hint}")
        if not any(end_marker in self._messages[i]["content"] for i in candidates):
            raise ToolError(f"end_marker {show(end_marker)} not found in {where}.{_MARKER_HINT}")
        raise ToolError(
            f"end_marker {show(end_marker)} does not come after start_marker {show(start_marker)} in the same message "
            f"(start_marker is in message {', '.join(map(str, starts[:10]))}). Pick an end_marker that follows it."
        )

    def _fold_fragment(self, fragment_id: str) -> tuple[str, bool]:
        f = self._fragment(fragment_id)
        if f.state == "folded":
            return f"Fragment {f.id} is already folded; nothing changed.", False
        chars = f.end - f.start
        text = f"Folded fragment {f.id}: {chars} chars (~{_tokens(chars)} tokens) hidden; "
        text += "restore_fragment shows them again."
        return text, self._set(f, "folded")

    def _summarize_fragment(self, fragment_id: str, focus: str) -> tuple[str, bool]:
        f = self._fragment(fragment_id)
        if f.state == "summarized" and f.focus == focus:
            return f"Fragment {f.id} is already summarized with this focus; nothing changed.", False
        try:
            summary = self._summarize(self._messages[f.message]["content"][f.start : f.end], focus)
        except Exception as e:  # noqa: BLE001 - a pluggable (maybe remote) summarizer must not crash the agent loop
            raise ToolError(
                f"the summarizer failed ({type(e).__name__}: {str(e)[:200]}); retry or fold the fragment."
            ) from None
        if not isinstance(summary, str):
            raise ToolError("the summarizer returned no text; retry or fold the fragment.")
        text = (
            f"Summarized fragment {f.id}: {f.end - f.start} chars shown as a {len(summary)}-char summary "
            f"(focus {show(focus)}); restore_fragment shows the full text again."
        )
        return text, self._set(f, "summarized", focus, summary)

    def _restore_fragment(self, fragment_id: str) -> tuple[str, bool]:
        f = self._fragment(fragment_id)
        if f.state == "shown":
            return f"Fragment {f.id} is already shown in full; nothing changed.", False
        return f"Restored fragment {f.id}: its {f.end - f.start} chars are shown again.", self._set(f, "shown")

    def _search_context(self, query: str, role: str, max_results: int, context_size: int) -> tuple[str, bool]:
        needle = _lower(query)
        messages = [i for i, m in enumerate(self._messages) if role == "all" or m["role"] == role]
        hits: list[Hit] = []
        total = 0
        for i in messages:  # one pass: collect the first max_results matches, only count the rest
            lowered = self._lowered[i]
            pos = lowered.find(needle)
            while pos >= 0 and len(hits) < max_results:
                hits.append(Hit(i, pos, pos + len(needle)))
                total += 1
                pos = lowered.find(needle, pos + len(needle))  # matches do not overlap, as in Ctrl+F
            if pos >= 0:
                total += lowered.count(needle, pos)
        where = "all messages" if role == "all" else f"{role} messages"
        if not total:
            hint = "a shorter query" + ("" if role == "all" else ' or role="all"')
            return f"No matches for {show(query)} in {where} (exact substring, any case); try {hint}.", False
        shown = (
            "all shown"
            if len(hits) == total
            else f"showing the first {len(hits)}; raise max_results (up to 50) or refine the query"
        )
        lines = [f"{_plural(total, 'match', 'matches')} for {show(query)} in {where} ({shown}):"]
        for hit in hits:
            lines.append(f"- {self._hit_id(hit)}: {self._describe(hit)}: {self._window(hit, context_size)}")
        lines.append("get_search_detail(search_id) shows more text around a match.")
        return "\n".join(lines), False

    def _get_search_detail(self, search_id: str, extended_context: int) -> tuple[str, bool]:
        hit = self._hits.get(search_id)
        if hit is None:
            hint = " That is a fragment id." if search_id in self._fragments else ""
            raise ToolError(
                f"no search result with id {show(search_id)}.{hint} Search ids (s + 5 chars) come from search_context."
            )
        return f"{search_id}: {self._describe(hit)}:\n{self._window(hit, extended_context)}", False

    # ---- helpers --------------------------------------------------------------------------------------------

    def _fragment(self, fragment_id: str) -> Fragment:
        f = self._fragments.get(fragment_id)
        if f is not None:
            return f
        if fragment_id in self._hits:
            known = " That is a search id; this tool takes a fragment id (f + 5 characters)."
        elif self._fragments:
            ids = list(self._fragments)
            known = f" Fragment ids: {', '.join(ids[:20])}" + (f" and {len(ids) - 20} more." if len(ids) > 20 else ".")
        else:
            known = " There are no fragments yet: create them with fragment_context."
        raise ToolError(f"no fragment with id {show(fragment_id)}.{known}")

    def _set(self, f: Fragment, state: str, focus: str = "", summary: str = "") -> bool:
        """Change a fragment's display; True if the rendered view changed."""
        before = self._views[f.message]
        f.state, f.focus, f.summary = state, focus, summary
        self._views[f.message] = self._view(f.message)
        return self._views[f.message] != before

    def _new_id(self, prefix: str) -> str:
        while True:
            new = prefix + "".join(self._rng.choices(_ID_ALPHABET, k=5))
            if new not in self._fragments and new not in self._hits:
                return new

    def _hit_id(self, hit: Hit) -> str:
        if hit not in self._hit_ids:
            self._hit_ids[hit] = search_id = self._new_id("s")
            self._hits[search_id] = hit
        return self._hit_ids[hit]

    def _describe(self, hit: Hit) -> str:
        where = f"message {hit.message} ({self._messages[hit.message]['role']}) at char {hit.start}"
        for f in self._in_message.get(hit.message, ()):
            if f.start <= hit.start < f.end:
                return f"{where}, in fragment {f.id} ({f.state})"
        return where

    def _window(self, hit: Hit, size: int) -> str:
        """The match in «» with `size` chars of original text on each side, as a JSON string."""
        text = self._messages[hit.message]["content"]
        a, b = max(0, hit.start - size), min(len(text), hit.end + size)
        before, after = ("…" if a > 0 else ""), ("…" if b < len(text) else "")
        snippet = f"{before}{text[a : hit.start]}«{text[hit.start : hit.end]}»{text[hit.end : b]}{after}"
        return json.dumps(snippet, ensure_ascii=False)
