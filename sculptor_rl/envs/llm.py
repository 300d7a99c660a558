"""The one way an environment asks an LLM: ACM's `summarize_fragment`, MemTool's judge and history summary, TA-Mem's
note extractor, MemToolAgent's reflector and ToolMem's inducer all call `LLM.ask`.

A run wires it (`make_llm`) to the policy's own engine (`policy`: the prompt rendered with the policy's chat
template, sent as token ids), to any OpenAI-compatible endpoint (`endpoint`: the messages sent as they are), or to
nothing (`extractive`: the environments' offline stand-ins, each labelled as such in its output, e.g. ACM's
`[extractive]` summaries). The requests of one `ask` go to the engine in one batch; an environment that asks from
inside a tool call (a summary) asks alone, between the loop's generation steps.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..engines.base import Engine, Request, SamplingConfig

__all__ = ["LLM", "LLM_KINDS", "LLMSettings", "endpoint_llm", "make_llm", "policy_llm"]

LLM_KINDS = ("extractive", "policy", "endpoint")


@dataclass
class LLMSettings:
    """What a run's environments ask for an LLM, under the same names in rollout, eval, rl and serve."""

    summarizer: str = field(default="extractive", metadata={
        "help": "what the environments ask for an LLM (ACM's summarize_fragment): extractive (the offline stand-in, "
                "labelled), policy (the policy's own engine) or endpoint (summarizer_url + summarizer_model, any "
                "OpenAI-compatible server)", "choices": list(LLM_KINDS)})
    summarizer_url: str | None = field(default=None, metadata={"help": "summarizer endpoint: its base URL"})
    summarizer_model: str | None = field(default=None, metadata={"help": "summarizer endpoint: the served model"})

    def llm(self, engine=None, fmt=None, max_new_tokens: int = 256) -> "LLM | None":
        """The LLM these settings name (None: the environments' offline stand-ins)."""
        return make_llm(self.summarizer, engine, fmt, self.summarizer_url, self.summarizer_model, max_new_tokens)


@dataclass
class LLM:
    """An engine and how a conversation becomes its prompt ids (None: a chat endpoint, which takes messages)."""

    engine: Engine
    render: Callable[[list[dict]], list[int]] | None
    label: str  # what answered, for logs and reports: "policy", "endpoint <url> <model>"
    max_new_tokens: int = 256
    sampling: SamplingConfig | None = None  # None: greedy

    def ask(self, conversations: list[list[dict]], max_new_tokens: int | None = None,
            sampling: SamplingConfig | None = None, tag: str = "llm") -> list[str]:
        """The reply text to each conversation (one batch)."""
        requests = [Request(prompt_ids=self.render(m) if self.render else [], messages=m,
                            max_new_tokens=max_new_tokens or self.max_new_tokens,
                            sampling=sampling or self.sampling or SamplingConfig(temperature=0.0),
                            rollout_id=f"{tag}/{i}") for i, m in enumerate(conversations)]
        return [c.text for c in self.engine.generate(requests)]


def policy_llm(engine: Engine, fmt, max_new_tokens: int = 256) -> LLM:
    """The policy's own engine; `fmt` (`agent.chat.ChatFormat`) renders the prompt in the policy's chat template."""
    return LLM(engine, lambda messages: fmt.head_ids(messages, None), "policy", max_new_tokens)


def endpoint_llm(url: str, model: str, api_key: str | None = None, max_new_tokens: int = 256) -> LLM:
    """An OpenAI-compatible endpoint (`api_key`: default $OPENAI_API_KEY, else "EMPTY")."""
    from ..engines.openai_engine import OpenAIEngine

    engine = OpenAIEngine(model, url, api_key=api_key or os.environ.get("OPENAI_API_KEY", "EMPTY"),
                          sampling=SamplingConfig(temperature=0.0, seed=0), concurrency=1)
    return LLM(engine, None, f"endpoint {url} {model}", max_new_tokens)


def make_llm(kind: str, engine: Engine | None = None, fmt=None, url: str | None = None, model: str | None = None,
             max_new_tokens: int = 256) -> LLM | None:
    """The LLM a run's environments ask: `kind` one of LLM_KINDS (None for `extractive`: the offline stand-ins)."""
    if kind not in LLM_KINDS:
        raise ValueError(f"summarizer must be one of {', '.join(LLM_KINDS)}, got {kind!r}")
    if kind == "extractive":
        return None
    if kind == "endpoint":
        if not (url and model):
            raise ValueError("summarizer endpoint needs summarizer_url and summarizer_model")
        return endpoint_llm(url, model, max_new_tokens=max_new_tokens)
    if engine is None or fmt is None:
        raise ValueError("summarizer policy needs the policy's engine (this command runs none)")
    return policy_llm(engine, fmt, max_new_tokens)
