"""MEM1's scripted teacher: its internal state is the notes (`envs.reading`) of the last state and the chunk just
read; it reads the chunks in order and answers from its state after the last one."""

from __future__ import annotations

import re

from ...toolcalls import assistant_message
from ..reading import answer_from_notes, update_notes

__all__ = ["teach"]

_STATE = re.compile(r"<state>\n?(.*?)\n?</state>", re.S)
CHUNK = re.compile(r"^Chunk (\d+) of (\d+):\n", re.S)


def teach(task: dict, messages: list[dict], tools=None) -> dict | str:
    last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    state = _STATE.search(last["content"] or "") if last else None
    notes = update_notes(task, [], state.group(1)) if state else []
    read = [m["content"] for m in messages if m["role"] == "tool" and CHUNK.match(m["content"])]
    done = 0
    for text in read:
        head = CHUNK.match(text)
        notes, done, count = update_notes(task, notes, text[head.end():]), int(head[1]), int(head[2])
    if read and done == count:
        return answer_from_notes(task, notes)
    body = "\n".join(notes) or "nothing relevant found yet"
    return assistant_message([("read_chunk", {"index": done + 1})],
                             content=f"<state>\n{body}\n(chunks read: {done})\n</state>")
