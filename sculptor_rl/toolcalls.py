"""Tool calls and their results, the bottom layer every other module may import.

Text formats: Hermes `<tool_call>{json}</tool_call>` (Qwen2.5/Qwen3, our default template). A parser turns a
completion's text into the calls it makes, in order; what cannot be parsed is reported as a format error
instead of raising, so a rollout never crashes on a bad completion. `ToolResult` is what an environment's
tool returns to the agent loop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

__all__ = ["ToolCall", "ToolResult", "ParsedCompletion", "HermesParser", "PARSERS", "format_tool_call"]


@dataclass
class ToolCall:
    name: str | None
    arguments: dict | str | None  # a str when the arguments were not a JSON object (the tool reports it)
    error: str | None = None  # set, with no name, for a block that could not be parsed


@dataclass(frozen=True)
class ToolResult:
    text: str  # what the model reads; starts with "Error:" exactly when ok is False
    ok: bool
    modified: bool  # a context-modifying tool succeeded and the rendered view changed


@dataclass
class ParsedCompletion:
    content: str  # text outside the tool-call blocks, stripped
    calls: list[ToolCall] = field(default_factory=list)  # in the order they appear, malformed ones included


def format_tool_call(name: str, arguments: dict) -> str:
    """The exact text a model emits for one call (the scripted teachers use it too)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def json_object(arguments) -> dict:
    """A call's arguments as a dict, from a dict or a JSON object string ("" is no arguments); a ValueError says
    what is wrong, for each environment to send back in its own error type."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            raise ValueError("arguments are not valid JSON; pass one JSON object.") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"arguments must be a JSON object, not {type(arguments).__name__}.")
    return arguments


class HermesParser:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number of blocks per completion."""

    block = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)

    def parse(self, text: str) -> ParsedCompletion:
        calls = [self._call(m.group(1).strip(), m.group(0).endswith("</tool_call>")) for m in self.block.finditer(text)]
        return ParsedCompletion(content=self.block.sub("", text).strip(), calls=calls)

    @staticmethod
    def _call(body: str, terminated: bool) -> ToolCall:
        if not terminated:
            return ToolCall(None, None, "unterminated <tool_call> block (missing </tool_call>)")
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            return ToolCall(None, None, f"tool call is not valid JSON ({e.msg} at position {e.pos})")
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return ToolCall(None, None, 'tool call must be a JSON object with a string "name"')
        args = obj.get("arguments", obj.get("parameters", {}))
        return ToolCall(obj["name"], args if isinstance(args, (dict, str)) else json.dumps(args))


PARSERS = {"hermes": HermesParser}
