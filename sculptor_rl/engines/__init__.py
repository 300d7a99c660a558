"""Generation backends behind one interface (`Engine.generate(requests) -> completions`)."""

from __future__ import annotations

from .base import Completion, Engine, Request, SamplingConfig

__all__ = ["Completion", "Engine", "Request", "SamplingConfig", "ENGINES", "make_engine"]

ENGINES = ("vllm", "ray", "hf", "openai", "trl-server")


def make_engine(kind: str, model: str, fmt, sampling: SamplingConfig = SamplingConfig(), tools=None,
                max_model_len: int | None = None, **kwargs) -> Engine:
    """Build an engine by name. `fmt` is the policy's `ChatFormat` (its tokenizer and stop ids); `model` an HF id or
    path (hf: also a loaded model, RL's policy; openai: the served model's name)."""
    if kind == "vllm":
        from .vllm_engine import VLLMEngine

        return VLLMEngine(model, fmt.stop_ids, sampling, max_model_len=max_model_len, **kwargs)
    if kind == "ray":  # vLLM engines in Ray actors: num_workers, num_gpus_per_worker, ray_address + vLLM's kwargs
        from .ray_engine import RayEngine

        return RayEngine(model, fmt.stop_ids, sampling, max_model_len=max_model_len, **kwargs)
    if kind == "hf":
        from .hf_engine import HFEngine

        return HFEngine(model, fmt.tokenizer, fmt.stop_ids, sampling, **kwargs)
    if kind == "openai":
        from .openai_engine import OpenAIEngine

        return OpenAIEngine(model, tools=tools, sampling=sampling, max_model_len=max_model_len, **kwargs)
    if kind == "trl-server":  # a `trl vllm-serve` server through TRL's client (`client=`: a VLLMClient)
        from .trl_server import TRLServerEngine

        return TRLServerEngine(kwargs.pop("client"), fmt.tokenizer, fmt.stop_ids, sampling, max_model_len=max_model_len)
    raise ValueError(f"unknown engine {kind!r}; choose one of {', '.join(ENGINES)}")
