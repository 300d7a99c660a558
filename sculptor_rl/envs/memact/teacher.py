"""MemAct's scripted teacher: reads the chunks in order; after each one it prunes that chunk's result and the previous
prune's, writing in `memory` the notes (`envs.reading`) of the previous memory and the chunk, and reads the next chunk
in the same turn; after the last chunk it answers from the notes."""

from __future__ import annotations

import json
import re

from ...toolcalls import assistant_message
from ..reading import answer_from_notes, update_notes

__all__ = ["teach"]

_RESULT = re.compile(r"^tool_call_id: (\S+)\nChunk (\d+) of (\d+):\n")


def teach(task: dict, messages: list[dict], tools=None) -> dict | str:
    memory, read, prunes = "", None, []
    for m in messages:
        for call in m.get("tool_calls") or [] if m["role"] == "assistant" else []:
            if call["function"]["name"] == "prune_context":
                args = call["function"]["arguments"]
                memory = (json.loads(args) if isinstance(args, str) else args)["memory"]
        if m["role"] == "tool":
            if (found := _RESULT.match(m["content"])) is not None:
                read = (found, m["content"][found.end():])
            elif m["content"].startswith("{"):
                prunes.append(json.loads(m["content"])["tool_call_id"])
    if read is None:
        return assistant_message([("read_chunk", {"index": 1})])
    (found, text), notes = read, update_notes(task, [], memory)
    notes = update_notes(task, notes, text)
    index, count = int(found[2]), int(found[3])
    if index == count:
        return answer_from_notes(task, notes)
    memory = "\n".join([*notes, f"(chunks read: {index} of {count})"])
    return assistant_message([("prune_context", {"memory": memory, "delete_ids": [found[1], *prunes[-1:]]}),
                              ("read_chunk", {"index": index + 1})])
