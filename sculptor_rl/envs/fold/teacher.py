"""Context-Folding's scripted teacher: MAIN hands the chunks to branches a few at a time (two, or more where there
are over ten chunks); each branch reads its chunks and returns the notes (`envs.reading`) it found in them; MAIN
answers from the returned messages together."""

from __future__ import annotations

import json
import re

from ...toolcalls import assistant_message
from ..reading import answer_from_notes, update_notes

__all__ = ["teach"]

_COUNT = re.compile(r"split into (\d+) chunks?")
_RANGE = re.compile(r"Read chunks (\d+) to (\d+)")
_CHUNK = re.compile(r"^Chunk (\d+) of (\d+):\n(.*)\n\* You are in branch mode", re.S)
_RETURNED = "Branch has finished its task, the returned message is:\n\n"
PER_BRANCH = 2  # chunks per branch: a branch holds MAIN's context and two chunks of a quarter of the budget each


def teach(task: dict, messages: list[dict], tools=None) -> dict | str:
    count = int(next(found[1] for m in messages if m["role"] == "user" and (found := _COUNT.search(m["content"]))))
    per = max(PER_BRANCH, -(-count // 5))  # at most 5 branches: 2 calls each and the reads within 20 calls
    branch_at, first, covered, returned = None, 1, 0, []
    for i, m in enumerate(messages):
        for call in (m.get("tool_calls") or []) if m["role"] == "assistant" else []:
            if call["function"]["name"] == "branch":
                args = call["function"]["arguments"]
                args = json.loads(args) if isinstance(args, str) else args
                asked = _RANGE.search(args["prompt"])
                first, covered, branch_at = int(asked[1]), int(asked[2]), i
        if m["role"] == "tool" and m["content"].startswith(_RETURNED):
            returned.append(m["content"][len(_RETURNED):])
            branch_at = None
    if branch_at is not None:  # in a branch: read its chunks, then return what they hold
        read = [found for m in messages[branch_at:] if m["role"] == "tool" and (found := _CHUNK.match(m["content"]))]
        last = int(read[-1][1]) if read else first - 1
        if last < covered:
            return assistant_message([("read_chunk", {"index": last + 1})])
        notes = []
        for found in read:
            notes = update_notes(task, notes, found[3])
        return assistant_message([("return", {"message": "\n".join(notes) or "Nothing relevant in these chunks."})])
    if covered < count:
        a, b = covered + 1, min(count, covered + per)
        return assistant_message([("branch", {
            "description": f"Read chunks {a}-{b}",
            "prompt": f"Read chunks {a} to {b} and return every fact in them that helps answer the question."})])
    notes = []
    for message in returned:
        notes = update_notes(task, notes, message)
    return answer_from_notes(task, notes)
