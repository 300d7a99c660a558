"""The six ACM tools as OpenAI function schemas (Sculptor, Appendix H), and the argument checker built on them.

The schemas are the single source of truth: `parse_arguments` validates a call against them, so what the model
is told and what the workspace accepts cannot drift apart.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["CONTEXT_MODIFYING", "READ_ONLY", "TOOL_SCHEMAS", "ToolError", "parse_arguments", "show", "usage"]

_ROLE_ENUM = ["user", "assistant", "all"]


def _tool(name: str, description: str, properties: dict[str, dict]) -> dict:
    required = [key for key, spec in properties.items() if "default" not in spec]
    parameters = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


TOOL_SCHEMAS: list[dict] = [
    _tool(
        "fragment_context",
        "Split a span of the conversation into fragments that you can then fold, summarize or restore by id. "
        "The span runs from start_marker to the first end_marker after it (both included), in the first message "
        "of the chosen role that contains them. Markers are case-sensitive exact substrings of the original "
        "message text (copy them verbatim; tags and summaries do not count). The span is cut into about equal "
        "pieces at line breaks, else sentence ends, else spaces, and each piece is shown wrapped in "
        '<fragment id="f.....">...</fragment>. Spans may not overlap existing fragments. '
        "Returns the new fragment ids with their sizes and a preview of each.",
        {
            "start_marker": {
                "type": "string",
                "minLength": 1,
                "description": "Exact text where the span starts (included).",
            },
            "end_marker": {
                "type": "string",
                "minLength": 1,
                "description": "Exact text where the span ends (included), after start_marker in the same message.",
            },
            "num_fragments": {
                "type": "integer",
                "minimum": 1,
                "maximum": 20,
                "default": 5,
                "description": "Number of pieces to cut the span into (fewer if the span is too short).",
            },
            "role": {
                "type": "string",
                "enum": _ROLE_ENUM,
                "default": "user",
                "description": "Messages to look in: user, assistant, or all (any role).",
            },
        },
    ),
    _tool(
        "fold_fragment",
        'Hide a fragment\'s text: it is shown as one line <fragment id="f....." folded chars=N /> until restored. '
        "The text is kept and stays findable with search_context. Returns a confirmation.",
        {"fragment_id": {"type": "string", "description": "Fragment id (f + 5 characters) from fragment_context."}},
    ),
    _tool(
        "summarize_fragment",
        "Show a fragment as a short summary focused on `focus` instead of its full text: "
        '<fragment id="f....." summary focus="...">summary</fragment>. The text is kept, stays findable with '
        "search_context and comes back with restore_fragment. Returns a confirmation.",
        {
            "fragment_id": {"type": "string", "description": "Fragment id (f + 5 characters) from fragment_context."},
            "focus": {
                "type": "string",
                "minLength": 1,
                "description": "What the summary must keep (e.g. the facts you need).",
            },
        },
    ),
    _tool(
        "restore_fragment",
        "Show a folded or summarized fragment's original text again. It keeps its id and tag, so it can be folded "
        "again later. Returns a confirmation.",
        {"fragment_id": {"type": "string", "description": "Fragment id (f + 5 characters) from fragment_context."}},
    ),
    _tool(
        "search_context",
        "Find text in the conversation like Ctrl+F: exact substring, case-insensitive, over the original text "
        "(text inside folded or summarized fragments is found too). Returns the number of matches and, for each "
        "shown match (earliest first), a search id (s + 5 characters), its message index, the fragment it lies "
        "in (if any) and the surrounding text with the match in «».",
        {
            "query": {
                "type": "string",
                "minLength": 1,
                "description": "Text to find (exact substring, case-insensitive).",
            },
            "role": {
                "type": "string",
                "enum": _ROLE_ENUM,
                "default": "user",
                "description": "Messages to search: user, assistant, or all (any role, tool results included).",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 10,
                "description": "Maximum number of matches to show.",
            },
            "context_size": {
                "type": "integer",
                "minimum": 50,
                "maximum": 1000,
                "default": 200,
                "description": "Characters of surrounding text shown on each side of a match.",
            },
        },
    ),
    _tool(
        "get_search_detail",
        "Show a wider window of original text around one match found by search_context.",
        {
            "search_id": {"type": "string", "description": "Search id (s + 5 characters) from search_context."},
            "extended_context": {
                "type": "integer",
                "minimum": 100,
                "maximum": 2000,
                "default": 500,
                "description": "Characters of text shown on each side of the match.",
            },
        },
    ),
]

CONTEXT_MODIFYING = frozenset({"fragment_context", "fold_fragment", "summarize_fragment", "restore_fragment"})
READ_ONLY = frozenset({"search_context", "get_search_detail"})

_PARAMETERS = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}


class ToolError(Exception):
    """A bad call: its message goes back to the model as `Error: <message>`."""


def show(value: Any, limit: int = 60) -> str:
    """A short, safe echo of a model-supplied value for error messages (never the whole of a huge value)."""
    if isinstance(value, str):
        return json.dumps(value if len(value) <= limit else value[:limit] + "…", ensure_ascii=False)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if abs(value) < 10**15 else "a huge integer"  # str() of a huge int can itself raise
    return {dict: "an object", list: "an array"}.get(type(value), type(value).__name__)


def usage(name: str) -> str:
    """One-line signature of a tool, e.g. `fold_fragment(fragment_id: string)`."""
    parts = []
    for key, spec in _PARAMETERS[name]["properties"].items():
        if "enum" in spec:
            kind = "|".join(f'"{v}"' for v in spec["enum"])
        elif "minimum" in spec:
            kind = f"integer {spec['minimum']}..{spec['maximum']}"
        else:
            kind = spec["type"]
        default = f" = {json.dumps(spec['default'])}" if "default" in spec else ""
        parts.append(f"{key}: {kind}{default}")
    return f"{name}({', '.join(parts)})"


def parse_arguments(name: str, arguments: Any) -> dict[str, Any]:
    """Check `arguments` (a dict or a JSON string) against the tool's schema; return them with defaults filled.

    Strict on types: integers must be JSON integers (not "5", 5.0 or true). Raises ToolError on any problem.
    """
    hint = f" Usage: {usage(name)}."
    if isinstance(arguments, str):
        if not arguments.strip():
            arguments = {}  # models often send "" for "no arguments": report the missing ones instead
        else:
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError) as e:
                reason = f"{e.msg} at position {e.pos}" if isinstance(e, json.JSONDecodeError) else "unparseable"
                raise ToolError(f"arguments are not valid JSON ({reason}); pass one JSON object.{hint}") from None
    if not isinstance(arguments, dict):
        raise ToolError(f"arguments must be a JSON object, not {type(arguments).__name__}.{hint}")
    schema = _PARAMETERS[name]
    properties = schema["properties"]
    unknown = [key for key in arguments if key not in properties]
    if unknown:
        raise ToolError(f"unknown argument {show(unknown[0])} for {name}.{hint}")
    missing = [key for key in schema["required"] if key not in arguments]
    if missing:
        raise ToolError(f'missing required argument "{missing[0]}".{hint}')
    parsed = {}
    for key, spec in properties.items():
        value = arguments.get(key, spec.get("default"))
        if spec["type"] == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                raise ToolError(f'"{key}" must be a JSON integer such as {spec["default"]}, not {show(value)}.{hint}')
            if not spec["minimum"] <= value <= spec["maximum"]:
                raise ToolError(
                    f'"{key}" must be between {spec["minimum"]} and {spec["maximum"]}, got {show(value)}.{hint}'
                )
        else:
            if not isinstance(value, str):
                raise ToolError(f'"{key}" must be a string, not {show(value)}.{hint}')
            if len(value) < spec.get("minLength", 0):
                raise ToolError(f'"{key}" must not be empty.{hint}')
            if "enum" in spec and value not in spec["enum"]:
                raise ToolError(f'"{key}" must be one of {", ".join(spec["enum"])}, got {show(value)}.{hint}')
        parsed[key] = value
    return parsed
