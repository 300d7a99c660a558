"""The generation interface every engine implements: a batch of requests in, one completion each out. An engine
that can take requests one at a time while others are in flight also offers `agenerate` (`AsyncEngine`): the agent
loop's per-rollout schedule awaits it."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Awaitable
from typing import Protocol

__all__ = ["Request", "Completion", "Engine", "AsyncEngine", "SamplingConfig"]


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = 0


@dataclass
class Request:
    prompt_ids: list[int]  # token engines generate from these
    messages: list[dict]  # chat engines (OpenAI-compatible) and text policies use the rendered messages
    max_new_tokens: int
    sampling: SamplingConfig | None = None  # overrides the engine's for this request (a served client's temperature)
    tools: list[dict] | None = None  # the tool schemas the model holds at this step (they may change between steps)
    rollout_id: str = ""  # which rollout asks ("<task id>/<copy>"): for policies that keep per-rollout state


@dataclass
class Completion:
    text: str
    token_ids: list[int] | None = None  # None when the engine returns text only: the loop tokenizes it
    # a structured assistant turn (a scripted teacher's, a chat endpoint's tool_calls): the loop renders it with the
    # policy's chat template, so its calls come out in the policy's own format (`text` is then unused)
    message: dict | None = None
    logprobs: list[float] | None = None  # per generated token, under the sampling distribution's model
    finish_reason: str = "stop"  # "stop" | "length"


class Engine(Protocol):
    max_model_len: int | None  # prompt + completion tokens the engine can hold (None: no limit known)

    def generate(self, requests: list[Request]) -> list[Completion]: ...


class AsyncEngine(Engine, Protocol):
    def agenerate(self, request: Request) -> Awaitable[Completion]: ...
