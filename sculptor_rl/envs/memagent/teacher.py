"""MemAgent's scripted teacher: each memory turn writes the notes (`envs.reading`) of the memory and the section
together; the final turn answers from the memory alone."""

from __future__ import annotations

import re

from ..reading import answer_from_notes, update_notes

__all__ = ["teach"]

_SECTION = re.compile(r"<memory>\n(.*?)\n</memory>\n\n<section \d+/\d+>\n(.*)\n</section>\n\nUpdated memory:$", re.S)
_FINAL = re.compile(r"<memory>\n(.*?)\n</memory>\n\nYour answer:$", re.S)


def teach(task: dict, messages: list[dict], tools=None) -> str:
    prompt = messages[-1]["content"]
    section = _SECTION.search(prompt)
    if section:
        memory, chunk = section.groups()
        notes = update_notes(task, update_notes(task, [], memory), chunk)
        return "\n".join(notes) or "Nothing relevant yet."
    final = _FINAL.search(prompt)
    if final is None:
        raise ValueError(f"task {task.get('id')!r}: the MemAgent teacher reads its own environment's prompts")
    return answer_from_notes(task, update_notes(task, [], final.group(1)))
