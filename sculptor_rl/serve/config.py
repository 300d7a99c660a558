"""`sculptor-rl serve` settings: a dataclass filled from YAML (`--config configs/<environment>/serve_*.yaml`) and the CLI."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..agent.loop import LoopConfig
from ..envs.llm import LLMSettings


@dataclass
class ServeConfig(LLMSettings):
    model: str | None = field(default=None, metadata={"help": "checkpoint dir or HF id (default: the embedded model)"})
    engine: str = field(default="vllm", metadata={"help": "generation backend", "choices": ["vllm", "hf"]})
    host: str = field(default="127.0.0.1", metadata={"help": "bind address (0.0.0.0 exposes the server)"})
    port: int = field(default=8000, metadata={"help": "0 picks a free port"})
    api_key: str | None = field(
        default=None, metadata={"help": "required as `Authorization: Bearer KEY` on every route when set; "
                                        "default: env SCULPTOR_RL_API_KEY, else no key"})
    served_model_name: str | None = field(default=None, metadata={"help": "the `model` clients send (default: --model)"})
    environment: str = field(default="acm", metadata={"help": "the environment each request runs in "
                                                              "(sculptor_rl.envs): acm | memtool | a registered one"})
    environment_params: dict | str | None = field(default=None, metadata={
        "help": "the environment's parameters (JSON on the command line), e.g. memtool's mode"})
    # sampling when the request does not say (OpenAI's defaults)
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    # engine
    max_model_len: int | None = field(default=None, metadata={"help": "engine context length (default: the model's)"})
    gpu_memory_utilization: float | None = field(default=None, metadata={"help": "vllm on GPU (default 0.85)"})
    kv_cache_memory_bytes: int | None = field(default=None, metadata={
        "help": "vllm: the KV cache in bytes (default on CPU: sized from need and the free memory)"})
    # limits per request
    max_context_tokens: int | None = field(default=None, metadata={"help": "prompt + generated tokens of the agent "
                                                                            "loop (default: max_model_len)"})
    max_new_tokens: int = field(default=LoopConfig.max_new_tokens, metadata={"help": "per completion; also the most `max_tokens` may ask"})
    max_tool_calls: int = field(default=LoopConfig.max_tool_calls, metadata={"help": "tool calls per request; beyond, the loop stops"})
    max_request_bytes: int = 4 * 2**20
    max_messages: int = 1024
    max_concurrent_requests: int = field(default=64, metadata={"help": "in flight at once; more get HTTP 429"})
    request_timeout: float = field(default=600.0, metadata={"help": "seconds; a longer request gets HTTP 504"})
    keepalive_interval: float = field(default=5.0, metadata={"help": "seconds between SSE comments while a "
                                                                    "streamed request's loop runs"})
    log_level: str = "info"
    # the model's chat format (as in rl and eval: agent.chat.ChatFormat)
    chat_template: str | None = field(default=None, metadata={"help": "a template file or a named variant "
                                                                      "(agent.chat.TEMPLATE_VARIANTS, e.g. qwen3_append_only); default: the model's"})
    chat_template_kwargs: dict | str | None = field(default=None, metadata={
        "help": "passed to the chat template (JSON on the command line), e.g. {\"enable_thinking\": false}"})
    parser: str = field(default="auto", metadata={"help": "the tool-call format; auto: the chat template's"})

    def __post_init__(self):
        if isinstance(self.environment_params, str):
            try:
                self.environment_params = json.loads(self.environment_params)
            except ValueError as e:
                raise ValueError(f"environment_params is not valid JSON: {e}") from None
        self.environment_params = self.environment_params or {}
        if not isinstance(self.environment_params, dict):
            raise ValueError(f"environment_params must be a mapping, got {self.environment_params!r}")
