"""The scripted MemTool teacher: a stateless policy for SFT data, in any mode.

`teach(task, messages, tools)` returns the next completion from what the model sees now: the rendered messages
and the tools it holds (the loaded catalogue tools and the management tools of the mode). It uses the
request's calls from `task["meta"]` (like the ACM teachers use what the question asks about) but never
`task["answer"]`: it replies with the values the tools printed.

Per request: it keeps the tools of this request and of the previous one (a tool unused for 2 turns goes), and
- autonomous: removes the others and searches what is missing (one completion), calls the request's tools and
  removes what the search loaded beyond them (the next), then answers;
- hybrid: answers the prune step with the tools to remove, then searches, calls and answers;
- workflow: answers the prune step, answers the search step with one keyword per missing tool ("<company>
  <metric>"), then calls and answers.
"""

from __future__ import annotations

import re

from ..memtool.catalogue import catalogue
from ..memtool.sessions import request_index
from ..toolcalls import HermesParser, format_tool_call
from .memtool import MANAGEMENT_TOOLS, PRUNE_STEP, SEARCH_STEP

__all__ = ["teach", "keyword"]

_PRUNE, _SEARCH = PRUNE_STEP.split(":")[0], SEARCH_STEP.split(":")[0]  # the fixed starts of the step prompts


def keyword(name: str) -> str:
    """The search keyword for a catalogue tool: its company's name and its metric."""
    tool = catalogue()[name]
    return f"{tool.company.name} {tool.metric.phrase}"


def _calls(calls: list[tuple[str, dict]]) -> str:
    return "\n".join(format_tool_call(name, args) for name, args in calls)


def teach(task: dict, messages: list[dict], tools: list[dict] | None = None) -> str:
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    k = request_index("\n".join(messages[i]["content"] for i in users))
    requests = task["meta"]["requests"]
    needed = requests[k]["calls"]
    keep = {c["name"] for c in needed} | {c["name"] for c in (requests[k - 1]["calls"] if k else [])}
    step = messages[users[-1]]["content"].split("\n\n")[-1]
    if step.startswith((_PRUNE, _SEARCH)):  # no tool is bound in a workflow step: its prompt lists the loaded ones
        held = [n for n in re.search(r"Loaded tools: (.*)\.$", step)[1].split(", ") if n != "none"]
    else:
        held = [t["function"]["name"] for t in tools or []]
    loaded = [n for n in held if n not in MANAGEMENT_TOOLS]
    stale = [n for n in loaded if n not in keep]
    missing = list(dict.fromkeys(c["name"] for c in needed if c["name"] not in held))
    if step.startswith(_PRUNE):
        return ", ".join(stale) or "none"
    if step.startswith(_SEARCH):
        return ", ".join(keyword(n) for n in missing) or "none"
    since = messages[users[-1] + 1:]
    made = [c.name for m in since if m["role"] == "assistant" for c in HermesParser().parse(m["content"]).calls]
    if not any(name not in MANAGEMENT_TOOLS for name in made):
        removal = [("remove_tools", {"tool_names": stale})] if stale and "remove_tools" in held else []
        if missing and "search_tools" in held and "search_tools" not in made:
            return _calls(removal + [("search_tools", {"keywords": [keyword(n) for n in missing]})])
        return _calls([(c["name"], c["arguments"]) for c in needed] + removal)
    return _answer(needed, "\n".join(m["content"] for m in since if m["role"] == "tool"))


def _answer(needed: list[dict], results: str) -> str:
    """Each asked value as the tool printed it (read from the result lines), or "unknown"."""
    parts = []
    for call in needed:
        label = catalogue()[call["name"]].label(**call["arguments"])
        found = re.search(rf"^{re.escape(label)}: (\S+)", results, re.M)
        parts.append(f"{label}: {found[1] if found else 'unknown'}")
    return "Answer: " + "; ".join(parts)
