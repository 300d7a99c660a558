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


# Descriptions are kept short on purpose: the schemas are part of every prompt (and of every training sample).
_FRAGMENT_ID = {"type": "string", "description": "Fragment id (f + 5 characters)."}
TOOL_SCHEMAS: list[dict] = [
    _tool(
        "fragment_context",
        "Split the text from start_marker to end_marker (both included) into fragments, each shown as "
        '<fragment id="f.....">…</fragment>, that you can then fold, summarize or restore. Markers are exact, '
        "case-sensitive substrings of the original text. Returns the fragment ids with previews.",
        {
            "start_marker": {"type": "string", "minLength": 1, "description": "Exact text where the span starts."},
            "end_marker": {"type": "string", "minLength": 1, "description": "Exact text where the span ends."},
            "num_fragments": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
            "role": {"type": "string", "enum": _ROLE_ENUM, "default": "user"},
        },
    ),
    _tool(
        "fold_fragment",
        "Hide a fragment's text behind a one-line marker. The text is kept and stays searchable.",
        {"fragment_id": _FRAGMENT_ID},
    ),
    _tool(
        "summarize_fragment",
        "Show a fragment as a short summary that keeps what `focus` names. The text is kept and stays searchable.",
        {"fragment_id": _FRAGMENT_ID, "focus": {"type": "string", "minLength": 1}},
    ),
    _tool(
        "restore_fragment",
        "Show a folded or summarized fragment's original text again.",
        {"fragment_id": _FRAGMENT_ID},
    ),
    _tool(
        "search_context",
        "Find text like Ctrl+F (exact substring, any case) in the original text, folded fragments included. "
        "Returns each match's search id (s + 5 characters), message, fragment and surrounding text.",
        {
            "query": {"type": "string", "minLength": 1},
            "role": {"type": "string", "enum": _ROLE_ENUM, "default": "user"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            "context_size": {"type": "integer", "minimum": 50, "maximum": 1000, "default": 200,
                             "description": "Characters shown on each side of a match."},
        },
    ),
    _tool(
        "get_search_detail",
        "Show more text around one match of search_context.",
        {
            "search_id": {"type": "string"},
            "extended_context": {"type": "integer", "minimum": 100, "maximum": 2000, "default": 500},
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
