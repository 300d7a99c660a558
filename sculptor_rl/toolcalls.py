"""Tool calls and their results, the bottom layer every other module may import.

A model writes its calls in its family's own text format; a parser per format turns a completion's text into the
calls it makes, in order, and what cannot be parsed is reported per block as a format error (the −1 reward)
instead of raising, so a rollout never crashes on a bad completion. The formats (`PARSERS`):

- `hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen2.5, Qwen3, Hermes 3, SmolLM3, and
  the embedded model's own template);
- `llama3_json`: a bare `{"name": ..., "parameters": {...}}` (Llama 3.1-3.3), after `<|python_tag|>` or alone;
- `mistral`: `[TOOL_CALLS]` then a JSON list of calls (v0.3, Nemo) or `name[ARGS]{...}` pieces (Small 3.2);
- `qwen3_coder`: `<tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>` (Qwen3-Coder,
  Qwen3.5): values are text, typed by the tool's schema;
- `glm45`: `<tool_call>NAME<arg_key>KEY</arg_key><arg_value>value</arg_value></tool_call>` (GLM-4.5/4.6);
- `deepseek_v3`: `<｜tool▁call▁begin｜>[function<｜tool▁sep｜>]NAME[\\n```json\\n]{...}[```]<｜tool▁call▁end｜>`;
- `harmony`: gpt-oss's `<|channel|>commentary to=functions.NAME ...<|message|>{...}`, reasoning in `analysis`.

vLLM ships parsers for these formats too; ours differ in reporting each malformed block as its own error (vLLM's
return the whole text as content), which the reward needs. `tests/test_toolcalls.py` checks both agree on real
completions. `parser_for_template` picks the format from a chat template's text (`parser: auto`).

A completion's reasoning (`<think>…</think>`, harmony's analysis channel) is split from its content, so the
answer scored is the content and the assistant message keeps the reasoning where templates look for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

__all__ = ["ToolCall", "ToolResult", "ParsedCompletion", "PARSERS", "make_parser", "parser_for_template",
           "format_tool_call", "assistant_message", "calls_of", "json_object"]


@dataclass
class ToolCall:
    name: str | None
    arguments: dict | str | None  # a str when the arguments were not a JSON object (the tool reports it)
    error: str | None = None  # set, with no name, for a block that could not be parsed
    id: str | None = None  # the call's id where the format writes one (Mistral v0.3)


@dataclass(frozen=True)
class ToolResult:
    text: str  # what the model reads; starts with "Error:" exactly when ok is False
    ok: bool
    modified: bool  # a context-modifying tool succeeded and the rendered view changed


@dataclass
class ParsedCompletion:
    content: str  # text outside the tool-call blocks and the reasoning, stripped
    calls: list[ToolCall] = field(default_factory=list)  # in the order they appear, malformed ones included
    reasoning: str | None = None  # the completion's reasoning (thinking), where it has one


def format_tool_call(name: str, arguments: dict) -> str:
    """One call as Hermes text: the embedded model's format, and what tests' text-only policies write."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def assistant_message(calls: list[tuple[str, dict]] = (), content: str = "") -> dict:
    """A structured assistant turn (the OpenAI chat shape) making `calls` in order: what the scripted teachers
    return, rendered by each model's own chat template in its own format. Ids are filled in by the loop."""
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    return message


def calls_of(message: dict) -> list[ToolCall]:
    """The calls a structured assistant message makes (its `tool_calls`), in order."""
    return [ToolCall(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]


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


_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>", re.DOTALL)


def _split_reasoning(text: str) -> tuple[str | None, str]:
    """`<think>reasoning</think>rest` → (reasoning, rest); a text without `</think>` has no reasoning."""
    m = _THINK.match(text)
    return (m.group(1).strip("\n"), text[m.end():]) if m else (None, text)


def _json_call(obj, arg_keys=("arguments", "parameters")) -> ToolCall:
    """A call from a decoded JSON object `{"name": ..., "arguments": {...}}`."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall(None, None, 'tool call must be a JSON object with a string "name"')
    args = next((obj[k] for k in arg_keys if k in obj), {})
    return ToolCall(obj["name"], args if isinstance(args, (dict, str)) else json.dumps(args),
                    id=obj["id"] if isinstance(obj.get("id"), str) else None)


def _decoded(body: str):
    """`body` as JSON, or the ToolCall error saying why not."""
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCall(None, None, f"tool call is not valid JSON ({e.msg} at position {e.pos})")
    except RecursionError:
        return ToolCall(None, None, "tool call is not valid JSON (nested too deeply)")


def _typed(value: str, name: str, key: str, tools: list[dict] | None):
    """A text parameter value typed by the tool's schema (XML formats carry every value as text): strings stay
    text, other types are read as JSON where they parse."""
    spec = next((t["function"]["parameters"].get("properties", {}).get(key, {}) for t in tools or ()
                 if t["function"]["name"] == name), {})
    if spec.get("type", "string") == "string":
        return value
    try:
        return json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return value  # the tool reports the wrong type


class Parser:
    """A tool-call format: `parse(text, tools)` → content, calls (malformed blocks as errors) and reasoning."""

    name = ""
    example = ""  # what `Error:` feedback shows the model as the right way to write a call

    def parse(self, text: str, tools: list[dict] | None = None) -> ParsedCompletion:
        reasoning, rest = _split_reasoning(text)
        content, calls = self._calls(rest, tools)
        return ParsedCompletion(content.strip(), calls, reasoning)

    def _calls(self, text: str, tools) -> tuple[str, list[ToolCall]]:
        raise NotImplementedError


class _BlockParser(Parser):
    """Formats whose calls sit in `open … close` blocks; a block missing its close is an error."""

    open = close = ""

    def _calls(self, text, tools):
        block = re.compile(re.escape(self.open) + r"(.*?)(?:" + re.escape(self.close) + r"|\Z)", re.DOTALL)
        calls = [self._block(m.group(1).strip(), tools) if m.group(0).endswith(self.close)
                 else ToolCall(None, None, f"unterminated {self.open} block (missing {self.close})")
                 for m in block.finditer(text)]
        return block.sub("", text), calls

    def _block(self, body: str, tools) -> ToolCall:
        raise NotImplementedError


class HermesParser(_BlockParser):
    name, open, close = "hermes", "<tool_call>", "</tool_call>"
    example = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'

    def _block(self, body, tools):
        obj = _decoded(body)
        return obj if isinstance(obj, ToolCall) else _json_call(obj)


class Qwen3CoderParser(_BlockParser):
    name, open, close = "qwen3_coder", "<tool_call>", "</tool_call>"
    example = "<tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>"
    _function = re.compile(r"^<function=([^>\s]+)>(.*?)</function>$", re.DOTALL)
    _parameter = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.DOTALL)

    def _block(self, body, tools):
        m = self._function.match(body)
        if not m:
            return ToolCall(None, None, "tool call must be <function=NAME>…</function> inside <tool_call>")
        name = m.group(1)
        return ToolCall(name, {k: _typed(v, name, k, tools) for k, v in self._parameter.findall(m.group(2))})


class Glm45Parser(_BlockParser):
    name, open, close = "glm45", "<tool_call>", "</tool_call>"
    example = "<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>value</arg_value>\n</tool_call>"
    _pair = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)

    def _block(self, body, tools):
        name = body.split("<arg_key>", 1)[0].strip()
        if not name or any(c.isspace() for c in name):
            return ToolCall(None, None, "tool call must start with the tool's name")
        return ToolCall(name, {k.strip(): _typed(v, name, k.strip(), tools) for k, v in self._pair.findall(body)})


class DeepSeekV3Parser(_BlockParser):
    name, open, close = "deepseek_v3", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
    example = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    _fenced = re.compile(r"^```(?:json)?\n(.*?)\n```$", re.DOTALL)

    def _calls(self, text, tools):
        content, calls = super()._calls(text, tools)
        return content.replace("<｜tool▁calls▁begin｜>", "").replace("<｜tool▁calls▁end｜>", ""), calls

    def _block(self, body, tools):
        head, sep, args = body.partition("<｜tool▁sep｜>")
        if not sep:
            return ToolCall(None, None, "tool call lacks <｜tool▁sep｜> between the name and the arguments")
        if head.strip() == "function":  # V3: function<sep>NAME\n```json\n{...}\n```
            name, _, args = args.partition("\n")
            fenced = self._fenced.match(args.strip())
            args = fenced.group(1) if fenced else args
        else:  # V3.1: NAME<sep>{...}
            name = head
        obj = _decoded(args.strip())
        if isinstance(obj, ToolCall):
            return obj
        return ToolCall(name.strip(), obj if isinstance(obj, dict) else json.dumps(obj))


class Llama3JsonParser(Parser):
    """Llama 3.x: the whole completion is one JSON call (several joined by `;`), after `<|python_tag|>` or alone;
    a completion that does not start with `{` is an answer."""

    name = "llama3_json"
    example = '{"name": ..., "parameters": {...}}'

    def _calls(self, text, tools):
        body = text.strip()
        tagged = body.startswith("<|python_tag|>")
        body = body.removeprefix("<|python_tag|>").strip()
        if not (tagged or body.startswith("{")):
            return text, []
        calls = []
        for part in _json_values(body):
            obj = _decoded(part)
            calls.append(obj if isinstance(obj, ToolCall) else _json_call(obj))
        return "", calls


def _json_values(text: str) -> list[str]:
    """`text` cut into JSON values separated by `;` or whitespace (a cut inside a string is avoided by decoding)."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while i < len(text):
        try:
            _, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            out.append(text[i:])  # the rest is one malformed value
            break
        out.append(text[i:end])
        i = end
        while i < len(text) and (text[i].isspace() or text[i] == ";"):
            i += 1
    return out


class MistralParser(Parser):
    """`[TOOL_CALLS]` then a JSON list `[{"name", "arguments"}]` (v0.3, Nemo), or `NAME[ARGS]{...}` per call
    (Small 3.2, tokenizer v11+)."""

    name = "mistral"
    example = '[TOOL_CALLS][{"name": ..., "arguments": {...}}]'

    def _calls(self, text, tools):
        content, _, rest = text.partition("[TOOL_CALLS]")
        if not _:
            return text, []
        calls = []
        for piece in rest.split("[TOOL_CALLS]"):
            piece = piece.strip()
            if "[ARGS]" in piece:  # NAME[ARGS]{...}, in history NAME[CALL_ID]ID[ARGS]{...}
                head, _, args = piece.partition("[ARGS]")
                name, _, call_id = head.partition("[CALL_ID]")
                obj = _decoded(args.strip())
                calls.append(obj if isinstance(obj, ToolCall) else
                             ToolCall(name.strip(), obj if isinstance(obj, dict) else json.dumps(obj),
                                      id=call_id.strip() or None))
                continue
            obj = _decoded(piece)
            if isinstance(obj, ToolCall):
                calls.append(obj)
            else:
                calls += [_json_call(c) for c in (obj if isinstance(obj, list) else [obj])]
        return content, calls


class HarmonyParser(Parser):
    """gpt-oss (harmony): messages `HEADER<|message|>BODY` ending in `<|end|>`, `<|call|>` or `<|return|>`, the
    header naming the channel (`<|channel|>analysis|commentary|final`) and, for a call, its recipient
    (`to=functions.NAME`, before or after the channel); `analysis` is reasoning, a message to a function a call,
    the rest the answer."""

    name = "harmony"
    example = "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>"
    _message = re.compile(r"((?:(?!<\|message\|>).)*)<\|message\|>(.*?)(?:<\|end\|>|<\|call\|>|<\|return\|>|\Z)",
                          re.DOTALL)
    _channel = re.compile(r"<\|channel\|>(\w+)")
    _recipient = re.compile(r"to=functions\.([^\s<]+)")

    def parse(self, text, tools=None):
        reasoning, content, calls = [], [], []
        for header, body in self._message.findall(text):
            channel = self._channel.search(header)
            channel = channel.group(1) if channel else ""
            to = self._recipient.search(header)
            if to:
                obj = _decoded(body.strip())
                calls.append(obj if isinstance(obj, ToolCall) else
                             ToolCall(to.group(1), obj if isinstance(obj, dict) else json.dumps(obj)))
            elif channel == "analysis":
                reasoning.append(body.strip())
            else:
                content.append(body.strip())
        if not (reasoning or content or calls):  # no channel markup at all: plain text
            return ParsedCompletion(text.strip())
        return ParsedCompletion("\n".join(content).strip(), calls, "\n".join(reasoning) or None)


PARSERS: dict[str, type[Parser]] = {p.name: p for p in (HermesParser, Llama3JsonParser, MistralParser,
                                                         Qwen3CoderParser, Glm45Parser, DeepSeekV3Parser,
                                                         HarmonyParser)}

# What in a chat template's text says which format it renders calls in, most specific first.
_TEMPLATE_MARKS = [("<|channel|>", "harmony"), ("<function=", "qwen3_coder"), ("<arg_key>", "glm45"),
                   ("tool▁call▁begin", "deepseek_v3"), ("[TOOL_CALLS]", "mistral"), ("<tool_call>", "hermes"),
                   ("<|python_tag|>", "llama3_json"), ('"parameters": ', "llama3_json")]


def parser_for_template(template: str | None) -> str:
    """The tool-call format a chat template renders (`parser: auto`); a ValueError where none is recognised."""
    for mark, name in _TEMPLATE_MARKS:
        if mark in (template or ""):
            return name
    raise ValueError("cannot tell this chat template's tool-call format; set `parser` to one of "
                     + ", ".join(PARSERS))


def make_parser(name: str) -> Parser:
    if name not in PARSERS:
        raise ValueError(f"unknown tool-call parser {name!r}; choose auto or one of {', '.join(PARSERS)}")
    return PARSERS[name]()
