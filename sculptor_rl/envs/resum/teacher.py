"""ReSum's scripted teacher: reads the chunks in order, writing before each read its notes (`envs.reading`) of
everything read so far: the last note (or the summary after a reset) plus the chunks read since; after the last chunk
it answers from the notes. After a reset it resumes after the last chunk its summary covers."""

from __future__ import annotations

import re

from ...toolcalls import assistant_message
from ..reading import answer_from_notes, update_notes

__all__ = ["CHUNK", "NOTE", "teach"]

NOTE = "Notes after chunk {done}:\n{notes}"  # the teacher's notes, and the offline summary's
_NOTE = re.compile(r"^Notes after chunk (\d+):\n?(.*)$", re.S)
CHUNK = re.compile(r"^Chunk (\d+) of (\d+):\n")
_COUNT = re.compile(r"split into (\d+) chunks?")


def _last_note(messages: list[dict]) -> tuple[int, str]:
    """The chunks the last note covers and its text: the last assistant turn's, else the summary's."""
    for m in reversed(messages):
        text = m["content"] or ""
        if m["role"] == "user" and "<summary>" in text:
            text = text.split("<summary>", 1)[1].rsplit("</summary>", 1)[0].split("] ", 1)[-1]
        found = _NOTE.match(text.strip())
        if m["role"] in ("assistant", "user") and found:
            return int(found[1]), found[2]
    return 0, ""


def teach(task: dict, messages: list[dict], tools=None) -> dict | str:
    count = int(next(found[1] for m in messages if m["role"] == "user" and (found := _COUNT.search(m["content"]))))
    done, note = _last_note(messages)
    notes = update_notes(task, [], note)
    for m in messages:
        found = CHUNK.match(m["content"] or "") if m["role"] == "tool" else None
        if found and int(found[1]) == done + 1:
            notes, done = update_notes(task, notes, m["content"][found.end():]), done + 1
    if done == count:
        return answer_from_notes(task, notes)
    body = "\n".join(notes) or "nothing relevant found yet"
    return assistant_message([("read_chunk", {"index": done + 1})], content=NOTE.format(done=done, notes=body))
