"""The retrieval agent's ten tools over a `MemoryDB` (paper §III.B, Fig. 2), and the per-question cache (§III.C).

String query (eq. 4): `search_keyword`, `search_person`, `search_tag`; top-k retrieval (eq. 5, k = 5):
`match_events`, `match_facts`; a person's profile (eq. 6): `get_person_events`, `get_person_facts`; the
available keys: `get_keywords`, `get_person_names`, `get_tags`. A key query that finds nothing says so and
points to the matching "available keys" tool (the paper's hint to retry with a listed key).

`Retriever` is one question's session: it keeps the pages and person profiles it has returned, and a later
result shows a page or profile already returned as a one-line reference instead of its content. Every bad call
(unknown tool, arguments that are not a JSON object, a missing, unknown or non-string argument, an empty value)
returns `Error: ...` and changes nothing; nothing raises.
"""

from __future__ import annotations

import json

from ...toolcalls import ToolResult
from .memory import MemoryDB, Page

__all__ = ["TOOL_NAMES", "TOOL_SCHEMAS", "TOP_K", "Retriever"]

TOP_K = 5  # the paper's k


def _tool(name: str, description: str, arg: str | None = None, arg_description: str = "") -> dict:
    properties = {arg: {"type": "string", "minLength": 1, "description": arg_description}} if arg else {}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": [arg] if arg else [], "additionalProperties": False}}}


# Kept short: the schemas are part of every prompt.
TOOL_SCHEMAS = [
    _tool("search_keyword", "Memory pages whose keywords include this keyword (exact, any case).", "keyword",
          "A keyword from get_keywords."),
    _tool("search_person", "Memory pages that mention this person.", "name", "A name from get_person_names."),
    _tool("search_tag", "Memory pages with this topic tag.", "tag", "A tag from get_tags."),
    _tool("match_events", f"The {TOP_K} events (with their dates) most similar to the query, and their pages.",
          "query", "What happened, e.g. 'Alice adopted a dog'."),
    _tool("match_facts", f"The {TOP_K} facts most similar to the query, and their pages.", "query",
          "What you want to know, e.g. 'Alice job'."),
    _tool("get_person_events", "All events of a person, with their dates, in conversation order.", "name",
          "A name from get_person_names."),
    _tool("get_person_facts", "All facts about a person, in conversation order (later ones are more recent).",
          "name", "A name from get_person_names."),
    _tool("get_keywords", "All keywords in the memory."),
    _tool("get_person_names", "All person names in the memory."),
    _tool("get_tags", "All topic tags in the memory."),
]
TOOL_NAMES = tuple(t["function"]["name"] for t in TOOL_SCHEMAS)
_ARG = {t["function"]["name"]: next(iter(t["function"]["parameters"]["properties"]), None) for t in TOOL_SCHEMAS}
_KEY_QUERY = {"search_keyword": ("keyword", "get_keywords"), "search_person": ("person", "get_person_names"),
              "search_tag": ("tag", "get_tags")}
_LISTS = {"get_keywords": "keyword", "get_person_names": "person", "get_tags": "tag"}


class _BadCall(Exception):
    pass


def _echo(value) -> str:
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, (str, int, float, bool, type(None))) else \
        {dict: "an object", list: "an array"}.get(type(value), type(value).__name__)
    return text if len(text) <= 60 else text[:60] + "…"


def _argument(name: str, arguments) -> str | None:
    """The tool's one string argument (None for the list tools), checked."""
    arg = _ARG[name]
    usage = f" Usage: {name}({f'{arg}: string' if arg else ''})."
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            raise _BadCall(f"arguments are not valid JSON; pass one JSON object.{usage}") from None
    if not isinstance(arguments, dict):
        raise _BadCall(f"arguments must be a JSON object, not {_echo(arguments)}.{usage}")
    unknown = [k for k in arguments if k != arg]
    if unknown:
        raise _BadCall(f"unknown argument {_echo(unknown[0])} for {name}.{usage}")
    if arg is None:
        return None
    if arg not in arguments:
        raise _BadCall(f'missing required argument "{arg}".{usage}')
    value = arguments[arg]
    if not isinstance(value, str) or not value.strip():
        raise _BadCall(f'"{arg}" must be a non-empty string, not {_echo(value)}.{usage}')
    return value.strip()


class Retriever:
    """One question's tool session over `db`, with its cache of returned pages and profiles."""

    def __init__(self, db: MemoryDB):
        self.db = db
        self.shown_pages: set[str] = set()
        self.shown_profiles: set[tuple[str, str]] = set()  # (tool, normalized name)
        self.cache_hits = 0  # pages or profiles dropped from a result because they were shown before

    def execute(self, name: str, arguments) -> ToolResult:
        if name not in TOOL_NAMES:
            return ToolResult(f"Error: unknown tool {_echo(name)}; the tools are {', '.join(TOOL_NAMES)}.", False,
                              False)
        try:
            value = _argument(name, arguments)
        except _BadCall as e:
            return ToolResult(f"Error: {e}", False, False)
        return ToolResult(self._run(name, value), True, False)

    def _pages(self, found: list[Page]) -> list[str]:
        out = []
        for page in {p.id: p for p in found}.values():
            if page.id in self.shown_pages:
                self.cache_hits += 1
                out.append(f"Page {page.id}: already shown above.")
            else:
                self.shown_pages.add(page.id)
                out.append(page.render())
        return out

    def _run(self, name: str, value: str | None) -> str:
        if name in _LISTS:
            keys = self.db.available(_LISTS[name])
            return f"{len(keys)} {_LISTS[name]} keys: " + ", ".join(keys) if keys else "The memory is empty."
        if name in _KEY_QUERY:
            kind, listing = _KEY_QUERY[name]
            found = self.db.match(value, kind)
            if not found:
                return f"No page has the {kind} {_echo(value)}. Call {listing} and retry with one of its keys."
            return f"{len(found)} pages with the {kind} {_echo(value)}:\n\n" + "\n\n".join(self._pages(found))
        kind = "event" if "event" in name else "fact"
        if name.startswith("match_"):
            hits = self.db.top_k(value, kind, TOP_K)
            if not hits:
                return f"No {kind} matches {_echo(value)}. Try other words, or get_keywords."
            lines = [f"{i + 1}. [{page.id}] {_record(r, kind)}" for i, (r, page) in enumerate(hits)]
            return (f"Top {len(hits)} {kind}s for {_echo(value)}:\n" + "\n".join(lines) + "\n\n"
                    + "\n\n".join(self._pages([page for _, page in hits])))
        key = (name, " ".join(value.lower().split()))
        if key in self.shown_profiles:
            self.cache_hits += 1
            return f"The {kind}s of {_echo(value)}: already shown above."
        records = self.db.profile(value, kind)
        if not records:
            return f"No {kind}s of {_echo(value)}. Call get_person_names and retry with one of the names."
        self.shown_profiles.add(key)
        return (f"{len(records)} {kind}s of {_echo(value)}:\n"
                + "\n".join(f"- [{page.id}, session {page.session + 1}, {page.timestamp}] {_record(r, kind)}"
                            for r, page in records))


def _record(r: dict, kind: str) -> str:
    return f"{r['event']} (time: {r['time']})" if kind == "event" else r["fact"]
