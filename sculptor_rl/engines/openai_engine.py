"""Any OpenAI-compatible chat endpoint (e.g. a large teacher served by vLLM) as a text-only engine.

The conversation goes out in the chat API's shape (assistant `tool_calls` with JSON-text arguments, tool turns with
their `tool_call_id`), and the reply comes back as a structured turn (`Completion.message`), which the loop renders
with the policy's chat template: the calls are trained in the policy's own format, whatever format the teacher
model writes or the server parses.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor

from ..toolcalls import assistant_message
from .base import Completion, Request, SamplingConfig


def to_chat_messages(messages: list[dict]) -> list[dict]:
    """The loop's structured messages in the chat API's shape. The error answering a malformed call block has no
    call to answer, so it goes as a user turn."""
    out: list[dict] = []
    for m in messages:
        if m["role"] == "tool" and m.get("tool_call_id"):
            out.append({"role": "tool", "content": m["content"], "tool_call_id": m["tool_call_id"]})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": m["content"]})
        elif m.get("tool_calls"):
            out.append({"role": "assistant", "content": m["content"] or None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {
                    "name": c["function"]["name"], "arguments": c["function"]["arguments"]
                    if isinstance(c["function"]["arguments"], str) else json.dumps(c["function"]["arguments"])}}
                for c in m["tool_calls"]]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


class OpenAIEngine:
    def __init__(self, model: str, base_url: str, api_key: str = "EMPTY", tools: list[dict] | None = None,
                 sampling: SamplingConfig = SamplingConfig(), max_model_len: int | None = None,
                 concurrency: int = 16, timeout: float = 600):
        from openai import OpenAI

        self.client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout)
        self.model, self.tools, self.sampling = model, tools, sampling
        self.max_model_len, self.concurrency = max_model_len, concurrency
        self._pool: ThreadPoolExecutor | None = None  # agenerate's threads, made on first use

    def _one(self, r: Request) -> Completion:
        s = r.sampling or self.sampling
        tools = r.tools if r.tools is not None else self.tools  # the env's tools at this step
        resp = self.client.chat.completions.create(
            model=self.model, messages=to_chat_messages(r.messages), tools=tools or None,
            temperature=s.temperature, top_p=s.top_p, max_tokens=r.max_new_tokens, seed=s.seed,
        )
        choice = resp.choices[0]
        msg = choice.message
        calls = []
        for call in msg.tool_calls or []:  # the endpoint's ids are dropped: the loop numbers calls its own way
            try:
                args = json.loads(call.function.arguments)
            except json.JSONDecodeError:
                args = call.function.arguments  # the environment reports it as a bad call
            calls.append((call.function.name, args))
        return Completion(text=msg.content or "", message=assistant_message(calls, msg.content or ""),
                          finish_reason="length" if choice.finish_reason == "length" else "stop")

    def generate(self, requests: list[Request]) -> list[Completion]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self._one, requests))

    def agenerate(self, request: Request) -> Awaitable[Completion]:
        """One request for the per-rollout loop: the same call as `generate`'s, in one of `concurrency` threads
        (the sync client is thread-safe, and one code path builds the request). Cancelled, the HTTP call still
        runs to its end in its thread; its answer is dropped."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="openai-engine")
        return asyncio.get_running_loop().run_in_executor(self._pool, self._one, request)
