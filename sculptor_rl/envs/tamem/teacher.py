"""The scripted TA-Mem teacher: a stateless policy that answers a generated question through the memory tools.

`teach(task, messages, tools)` reads what it asked so far from the conversation. Per question kind (from
`task["meta"]`: person, kind, about; never the answer) it makes one lookup with the tool the paper's Fig. 2
finds typical of the category (temporal: events; open-domain: facts or events; multi-hop: a person's profile),
then reads the answer off the tool results with the fact/event phrasing of `tamem.conversations`; if the first
lookup does not show it, it tries the person's profile, then answers "unknown". Open-domain answers map the
city found to its country (the world knowledge the question asks for).
"""

from __future__ import annotations

import re

from .conversations import COUNTRIES, EVENTS, FACTS, article
from ...toolcalls import assistant_message, calls_of

__all__ = ["teach"]


def _regex(template: str, want: str, **known: str) -> re.Pattern:
    """`template` with the known slots filled in, `want` captured (an article before it skipped), others any word."""
    out = []
    for i, part in enumerate(re.split(r"\{(\w+)\}", template)):
        if i % 2 == 0:
            out.append(re.escape(part))
        elif part in known:
            out.append(re.escape(known[part]))
        else:
            out.append(rf"(?:an? )?(?P<{part}>\w+)" if part == want else r"(?:an? )?\w+")
    return re.compile("".join(out))


def _plan(meta: dict) -> tuple[str, dict, re.Pattern, str, str]:
    """(tool, arguments, pattern, slot to read, how: first | last | all | country | time)."""
    p, kind, about, category = meta["person"], meta["kind"], meta.get("about", ""), meta["category"]
    if category == "temporal":
        event, known, query = {"pet": ("pet", {"pet": about}, f"{p} adopted {about}"),
                               "trip": ("trip", {"city": about}, f"{p} traveled to {about}"),
                               "race": ("race", {}, ""),
                               "job2": ("job", {"job": article(about)}, f"{p} started new job {about}")}[kind]
        time = re.compile(_regex(EVENTS[event], "", p=p, **known).pattern + r" \(time: (?P<time>[^)]+)\)")
        if kind == "race":
            return "get_person_events", {"name": p}, time, "time", "first"
        return "match_events", {"query": query}, time, "time", "first"
    if kind == "pet":
        return ("match_facts", {"query": f"{p} {about} named"}, _regex(FACTS["pet"], "pet", p=p, animal=about), "pet",
                "first")
    if kind == "relative":
        return ("match_facts", {"query": f"{p} {about}"}, _regex(FACTS["relative"], "name", p=p, relation=about),
                "name", "first")
    if kind in ("job", "jobs"):
        return ("get_person_facts", {"name": p}, _regex(FACTS["job"], "job", p=p), "job",
                "last" if kind == "job" else "all")
    if kind == "hobby":
        return "get_person_facts", {"name": p}, _regex(FACTS["hobby"], "hobby", p=p), "hobby", "all"
    if kind == "trip":
        return "match_events", {"query": f"{p} traveled to"}, _regex(EVENTS["trip"], "city", p=p), "city", "country"
    if kind == "home":
        return "match_facts", {"query": f"{p} grew up in"}, _regex(FACTS["home"], "city", p=p), "city", "country"
    raise ValueError(f"no teacher plan for a {category} question of kind {kind!r}")


def _read(pattern: re.Pattern, slot: str, how: str, results: str) -> str | None:
    found = list(dict.fromkeys(m[slot] for m in pattern.finditer(results)))
    if not found:
        return None
    if how == "all":
        return ", ".join(found)
    value = found[-1] if how == "last" else found[0]
    return COUNTRIES.get(value, value) if how == "country" else value


def teach(task: dict, messages: list[dict], tools: list[dict] | None = None) -> dict | str:
    meta = task["meta"]
    if "kind" not in meta:
        raise ValueError(f"task {task['id']!r}: the tamem teacher answers generated questions (meta.kind), not "
                         "imported ones")
    tool, args, pattern, slot, how = _plan(meta)
    made = [c for m in messages if m["role"] == "assistant" for c in calls_of(m)]
    results = "\n".join(m["content"] for m in messages if m["role"] == "tool")
    answer = _read(pattern, slot, how, results) if made else None
    if answer is not None:
        return answer
    if not made:
        return assistant_message([(tool, args)])
    profile = "get_person_events" if "time" in pattern.groupindex else "get_person_facts"
    if len(made) == 1 and made[0].name != profile:
        return assistant_message([(profile, {"name": meta["person"]})])
    return "unknown"
