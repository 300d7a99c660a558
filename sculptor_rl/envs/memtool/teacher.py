"""The scripted MemTool teacher: a stateless policy for SFT data, in any mode.

`teach(task, messages, tools)` returns the next completion from what the model sees now: the rendered messages
and the tools it holds (the loaded catalogue tools and the management tools of the mode). It uses the
request's calls from `task["meta"]` (like the ACM teachers use what the question asks about) but never
`task["answer"]`: it replies with the values the tools printed.

A history step (history=summarize) gets the earlier summary's last lines and one line per request shown.
Per request: it keeps the tools of this request and of the previous one (a tool unused for 2 turns goes), and
- autonomous: removes the others and searches what is missing (one completion), calls the request's tools and
  removes what the search loaded beyond them (the next), then answers;
- hybrid: answers the prune step with the tools to remove, then searches, calls and answers;
- workflow: answers the prune step, answers the search step with one keyword per missing tool ("<company>
  <metric>"), then calls and answers.
"""

from __future__ import annotations

import re

from .catalogue import catalogue
from .sessions import request_index
from ...toolcalls import assistant_message, calls_of
from .env import MANAGEMENT_TOOLS, PRUNE_STEP, REMOVE, SEARCH, SEARCH_STEP, SUMMARY_STEP

__all__ = ["teach", "keyword"]

# the fixed starts of the step prompts (the re-prune step starts like the prune step)
_PRUNE, _SEARCH, _SUMMARY = (step.split(":")[0] for step in (PRUNE_STEP, SEARCH_STEP, SUMMARY_STEP))


def keyword(name: str) -> str:
    """The search keyword for a catalogue tool: its company's name and its metric."""
    tool = catalogue()[name]
    return f"{tool.company.name} {tool.metric.phrase}"


def _calls(calls: list[tuple[str, dict]]) -> dict:
    return assistant_message(calls)


def teach(task: dict, messages: list[dict], tools: list[dict] | None = None) -> dict | str:
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if messages[users[-1]]["content"].startswith(_SUMMARY):
        return _summary(messages)
    k = request_index("\n".join(messages[i]["content"] for i in users))
    requests = task["meta"]["requests"]
    needed = requests[k]["calls"]
    keep = {c["name"] for c in needed} | {c["name"] for c in (requests[k - 1]["calls"] if k else [])}
    step = messages[-1]["content"].split("\n\n")[-1]  # a step's prompt ends the last message (hybrid re-prune: a tool's)
    if step.startswith((_PRUNE, _SEARCH)):  # no tool is bound in a workflow step: its prompt lists the loaded ones
        held = [n for n in re.search(r"Loaded tools: (.*)\.$", step)[1].split(", ") if n != "none"]
    else:
        held = [t["function"]["name"] for t in tools or []]
    loaded = [n for n in held if n not in MANAGEMENT_TOOLS]
    stale = [n for n in loaded if n not in keep]
    missing = list(dict.fromkeys(c["name"] for c in needed if c["name"] not in held))
    if step.startswith(_PRUNE):
        if not stale and "over the limit" in step:  # the re-prune step must remove something
            stale = [n for n in loaded if n not in {c["name"] for c in needed}]
        return ", ".join(stale) or "none"
    if step.startswith(_SEARCH):
        return ", ".join(keyword(n) for n in missing) or "none"
    since = messages[users[-1] + 1:]
    made = [c.name for m in since if m["role"] == "assistant" for c in calls_of(m)]
    if not any(name not in MANAGEMENT_TOOLS for name in made):
        removal = [(REMOVE, {"tool_names": stale})] if stale and REMOVE in held else []
        if missing and SEARCH in held and SEARCH not in made:
            return _calls(removal + [(SEARCH, {"keywords": [keyword(n) for n in missing]})])
        return _calls([(c["name"], c["arguments"]) for c in needed] + removal)
    return _answer(needed, "\n".join(m["content"] for m in since if m["role"] == "tool"))


def _summary(messages: list[dict]) -> str:
    """The history step: the earlier summary's last lines and one line per request shown (asked, replied)."""
    earlier = messages[0]["content"].split("Summary of earlier requests:\n")[1:]
    lines = earlier[0].split("\n\n")[0].splitlines() if earlier else []
    for i, m in enumerate(messages):
        if m["role"] == "user" and request_index(m["content"]) is not None:
            reply = next((r["content"] for r in messages[i + 1:] if r["role"] == "assistant"
                          and r["content"].startswith("Answer:")), "no answer")
            lines.append(f"{m['content'].split(chr(10))[0]} -> {reply}")
    return "\n".join(lines[-6:])


def _answer(needed: list[dict], results: str) -> str:
    """Each asked value as the tool printed it (read from the result lines), or "unknown"."""
    parts = []
    for call in needed:
        label = catalogue()[call["name"]].label(**call["arguments"])
        found = re.search(rf"^{re.escape(label)}: (\S+)", results, re.M)
        parts.append(f"{label}: {found[1] if found else 'unknown'}")
    return "Answer: " + "; ".join(parts)
