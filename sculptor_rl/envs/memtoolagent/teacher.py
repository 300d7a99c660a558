"""The scripted MemToolAgent teacher: a stateless policy for SFT data on `workbench` and `nestful` tasks.

It makes the task's gold calls one completion at a time (the k-th completion makes call k; workbench's gold calls
were computed from the same database the episode starts from, so the ids they name exist; nestful's name earlier
results as "$var_k.result$", which the env labels in the same order), then replies: "Done.", or nestful's last
result as the tool printed it. It reads the tool results from the messages it sees, never the databases.
Unlike the ACM teachers it does use `task["answer"]`: here the answer is the gold call sequence itself (as MemTool's
teacher uses its requests' calls), and the score is the state those calls leave, not text copied from it.
"""

from __future__ import annotations

from ...toolcalls import assistant_message
from .nestful import NAME as NESTFUL

__all__ = ["teach"]


def teach(task: dict, messages: list[dict], tools: list[dict] | None = None) -> dict | str:
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
    gold = task["answer"]
    if len(results) < len(gold):
        return assistant_message([(gold[len(results)]["name"], gold[len(results)]["arguments"])])
    if task["task"] == NESTFUL and results:
        return f"The answer is {results[-1].split('=')[-1].strip()}."
    return "Done."
