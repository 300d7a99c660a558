"""The MemAct environment: the record's long context read through `read_chunk`, and `prune_context(memory,
delete_ids)` to remove tool results from the context.

Mechanics as in YuxiangZhang0114/MemAct-Anonymized (9b65b84): the schema of `prune_context`
(`DCPO/config/mem_search_tool_config_single.yaml`: `memory` a summary of what is removed, `delete_ids` the ids of
the tool results to remove, both required, the list never empty) and what it removes
(`verl/experimental/agent_loop/mem_agent_loop.py`, `prune_actual_messages_prompt_ids`): every tool result whose text
holds a listed id goes; an assistant turn whose calls all went goes too, otherwise only the removed call blocks are
cut from it; the prune call itself stays, so its `memory` argument is what is kept of what was removed. An empty
`memory` or `delete_ids`, or ids that match no result, fail and change nothing. Each result carries a short id
(there an 8-character short uuid in the result's JSON; here a first line `tool_call_id: <8 characters>`, seeded),
the prune result too, so a later prune can remove it. Results and failures keep MemAct's JSON shape
(`success`, `message`, `tool_call_id`), a failure behind this project's `Error: ` prefix.
Training: a prune rewrites the context, so Algorithm 1 closes a sample there: DCPO's segment per prune.

Budget: a chunk is a third of `context_budget`.
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass

from ...toolcalls import ToolResult, json_object
from ..reading import READ_CHUNK, BudgetParams, ReadingEnv
from .teacher import teach

__all__ = ["MEMACT_SYSTEM_PROMPT", "MemActEnv", "MemActParams", "PRUNE_CONTEXT"]

MEMACT_SYSTEM_PROMPT = (
    "You answer a question about a text that you read one chunk at a time with read_chunk. Your context is limited: "
    "every tool result carries a tool_call_id, and prune_context(memory, delete_ids) removes the results you list "
    "from your context, keeping `memory`, your summary of what they held that still matters. When you can answer, "
    "give the final answer without a tool call.")

PRUNE_CONTEXT = {"type": "function", "function": {
    "name": "prune_context",
    "description": ("Remove tool results from the conversation, keeping what matters in `memory`. First write in "
                    "`memory` every fact of the removed results that you still need, then list their tool_call_ids "
                    "in `delete_ids`."),
    "parameters": {"type": "object", "properties": {
        "memory": {"type": "string", "description": "The facts and state to keep from the removed results."},
        "delete_ids": {"type": "array", "items": {"type": "string"},
                       "description": "The tool_call_ids of the results to remove (not empty)."}},
        "required": ["memory", "delete_ids"]}}}

_ALPHABET = string.ascii_letters + string.digits


@dataclass
class MemActParams(BudgetParams):
    """`context_budget` (tokens): a chunk is a third of it."""


class MemActEnv(ReadingEnv):
    name = "memact"
    Params = MemActParams
    system_prompt = MEMACT_SYSTEM_PROMPT
    tools = [READ_CHUNK, PRUNE_CONTEXT]
    teach = staticmethod(teach)

    def __init__(self, task: dict, params=None, **kwargs):
        super().__init__(task, params, **kwargs)
        self.rng = random.Random(f"memact:{self.seed}")
        self.pruned = 0

    def chunk_tokens(self) -> int:
        return self.params.context_budget // 3

    def _id(self) -> str:
        return "".join(self.rng.choice(_ALPHABET) for _ in range(8))

    def execute(self, name, arguments) -> ToolResult:
        uid = self._id()
        if name == "prune_context":
            return self.prune(arguments, uid)
        result = super().execute(name, arguments)
        return ToolResult(f"tool_call_id: {uid}\n{result.text}" if result.ok else result.text, result.ok,
                          result.modified)

    def prune(self, arguments, uid: str) -> ToolResult:
        def failed(why: str) -> ToolResult:
            body = {"success": False, "message": f"Context manager failed to execute. {why}", "tool_call_id": uid}
            return ToolResult(f"Error: {json.dumps(body)}", ok=False, modified=False)

        try:
            args = json_object(arguments)
        except ValueError as e:
            return failed(str(e))
        memory, ids = args.get("memory"), args.get("delete_ids")
        if not isinstance(memory, str) or not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return failed("prune_context takes memory (a string) and delete_ids (a list of strings).")
        if not memory.strip() or not [i for i in ids if i]:
            return failed("No delete_ids or no memory provided.")
        calls = {m.get("tool_call_id") for m in self.shown[self.head:]
                 if m["role"] == "tool" and any(i and i in m["content"] for i in ids)}
        calls.discard(None)
        if not calls:
            return failed("No tool results matched the delete_ids.")
        kept = []
        for m in self.shown:
            if m["role"] == "tool" and m.get("tool_call_id") in calls:
                continue
            if m["role"] == "assistant" and m.get("tool_calls"):
                left = [c for c in m["tool_calls"] if c.get("id") not in calls]
                if not left:
                    continue
                m = {**m, "tool_calls": left}
            kept.append(m)
        self.shown = kept
        self.pruned += len(calls)
        body = {"success": True, "message": f"Context manager ran successfully: deleted {len(calls)} tool call "
                                            f"records and their results.", "tool_call_id": uid}
        return ToolResult(json.dumps(body), ok=True, modified=True)

    def info(self) -> dict:
        return {**super().info(), "pruned": self.pruned}
