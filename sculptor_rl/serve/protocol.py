"""The OpenAI chat-completions wire format: request validation, chat messages, responses, stream chunks, errors.

Requests are validated strictly (a string where a number belongs is an error, not coerced). Fields that would
change the response and are not implemented (`stop`, `logprobs`, `response_format`, ...) are refused with a
400; others (`user`, `metadata`, ...) are ignored. `seed` seeds the workspace's fragment and search ids (vLLM
on CPU cannot take per-request sampling seeds). Extension: the request field `sculptor`
(`{"return_trace": true, "max_tool_calls": N}`) and the response field `sculptor_trace`.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["APIError", "ChatRequest", "parse_request", "chat_messages", "completion", "chunk", "sse", "usage",
           "tool_calls", "stream_pieces"]


class APIError(Exception):
    """An error the client gets as `{"error": {message, type, param, code}}` with an HTTP status."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class FunctionCall(_Strict):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCallIn(_Strict):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class FunctionSpec(_Strict):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict | None = None


class ToolSpec(_Strict):
    type: Literal["function"]
    function: FunctionSpec


class StreamOptions(_Strict):
    include_usage: bool = False


class SculptorOptions(_Strict):
    return_trace: bool = False  # add `sculptor_trace` (every step's completion, tool calls and results)
    max_tool_calls: int | None = Field(default=None, ge=0)  # lower than the server's cap for this request


class ChatRequest(_Strict):
    model_config = ConfigDict(extra="allow", strict=True)  # extra fields are checked against _UNSUPPORTED

    model: str
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: Literal[1] = 1
    seed: int | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["auto", "none"] | None = None
    sculptor: SculptorOptions = Field(default_factory=SculptorOptions)


# OpenAI request fields that change what comes back, which this server does not implement: refused, not ignored
_UNSUPPORTED = ("stop", "logprobs", "top_logprobs", "response_format", "logit_bias", "functions", "function_call",
                "audio", "modalities", "prediction")


def parse_request(body: bytes) -> ChatRequest:
    try:
        req = ChatRequest.model_validate_json(body)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        first = errors[0]
        if first["type"] == "json_invalid":
            raise APIError(400, f"the request body is not valid JSON: {first['msg']}") from None
        # a value matching no member of a union (e.g. content: str | list of parts) fails once per member, each
        # error's location ending in the member's name: report the field itself, with every member's reason
        group = [err for err in errors if err["loc"][:1] == first["loc"][:1]]
        param = ".".join(str(p) for p in _common_prefix([err["loc"] for err in group])) or None
        reasons = " / ".join(dict.fromkeys(err["msg"] for err in group))
        raise APIError(400, f"{param or 'body'}: {reasons}", param=param) from None
    for name in _UNSUPPORTED:
        value = (req.model_extra or {}).get(name)
        if value not in (None, False, [], {"type": "text"}):
            raise APIError(400, f"{name} is not supported by this server", param=name)
    return req


def _common_prefix(locs: list[tuple]) -> list:
    out = []
    for parts in zip(*locs):
        if any(p != parts[0] for p in parts):
            break
        out.append(parts[0])
    return out


def _text(m: Message, i: int) -> str:
    if m.content is None:
        if m.role == "assistant":
            return ""
        raise APIError(400, f"messages.{i}.content is required for a {m.role} message", param=f"messages.{i}.content")
    return m.content if isinstance(m.content, str) else "\n".join(p.text for p in m.content)


def chat_messages(req: ChatRequest) -> list[dict]:
    """The request's messages as the chat template takes them (text content, `developer` as `system`; calls with
    their ids and their arguments decoded, as most templates render a dict; tool turns with their call's id)."""
    out = []
    for i, m in enumerate(req.messages):
        msg = {"role": "system" if m.role == "developer" else m.role, "content": _text(m, i)}
        if m.tool_calls:
            if m.role != "assistant":
                raise APIError(400, f"messages.{i}: only assistant messages carry tool_calls", param=f"messages.{i}")
            msg["tool_calls"] = [{**({"id": c.id} if c.id else {}), "type": "function",
                                  "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)}}
                                 for c in m.tool_calls]
        if m.tool_call_id:
            msg["tool_call_id"] = m.tool_call_id
        out.append(msg)
    return out


def _arguments(text: str):
    """A call's JSON arguments as a dict; text that is not a JSON object stays text (the template shows it)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return value if isinstance(value, dict) else text


def new_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def tool_calls(calls) -> list[dict]:
    """Parsed calls (`ToolCall`s with dict arguments) as OpenAI `tool_calls`."""
    return [{"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}} for c in calls]


def completion(id: str, model: str, content: str | None, calls: list[dict] | None, finish_reason: str,
               use: dict, trace: dict | None) -> dict:
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    out = {"id": id, "object": "chat.completion", "created": int(time.time()), "model": model,
           "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
           "usage": use}
    if trace is not None:
        out["sculptor_trace"] = trace
    return out


def chunk(id: str, model: str, delta: dict | None, finish_reason: str | None = None, **extra) -> dict:
    """One `chat.completion.chunk`; `delta=None` makes the usage-only chunk (no choices)."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                         "logprobs": None}]
    return {"id": id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": choices, **extra}


def sse(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


def stream_pieces(text: str) -> list[str]:
    """The answer in word-sized deltas (each word with the whitespace after it); they join back to `text`."""
    return [p for p in re.findall(r"\S*\s*", text) if p]
