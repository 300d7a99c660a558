"""Any OpenAI-compatible chat endpoint (e.g. a large teacher served by vLLM) as a text-only engine.

Tool results go back as user turns wrapped in <tool_response>, and calls the server parsed into structured
`tool_calls` are turned back into Hermes text, so the conversation stays in the format the policy is trained
on whatever tool parser the server runs.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from ..toolcalls import format_tool_call
from .base import Completion, Request, SamplingConfig


def to_chat_messages(messages: list[dict]) -> list[dict]:
    out: list[dict] = []
    for m in messages:
        if m["role"] == "tool":
            text = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1]["content"] += "\n" + text  # several results of one completion share a turn
            else:
                out.append({"role": "user", "content": text})
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

    def _one(self, r: Request) -> Completion:
        s = r.sampling or self.sampling
        tools = r.tools if r.tools is not None else self.tools  # the env's tools at this step
        resp = self.client.chat.completions.create(
            model=self.model, messages=to_chat_messages(r.messages), tools=tools or None,
            temperature=s.temperature, top_p=s.top_p, max_tokens=r.max_new_tokens, seed=s.seed,
        )
        choice = resp.choices[0]
        msg = choice.message
        parts = [msg.content or ""]
        for call in msg.tool_calls or []:
            try:
                args = json.loads(call.function.arguments)
            except json.JSONDecodeError:
                args = call.function.arguments  # the workspace reports it as a bad call
            parts.append(format_tool_call(call.function.name, args))
        return Completion(text="\n".join(p for p in parts if p),
                          finish_reason="length" if choice.finish_reason == "length" else "stop")

    def generate(self, requests: list[Request]) -> list[Completion]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self._one, requests))
