"""vLLM server engine for GPU clusters: `trl vllm-serve` (vLLM's OpenAI server with TRL's weight-transfer
endpoints) on its own GPUs, reached through TRL's `VLLMClient`. Token ids in, token ids + logprobs out.

Weights reach the server over NCCL from the trainer (`VLLMGeneration.sync_weights`, in `sculptor_rl.train.rl`);
this class only generates, so every training rank can hold one.
"""

from __future__ import annotations

from collections import defaultdict

from .base import Completion, Request, SamplingConfig


class TRLServerEngine:
    def __init__(self, client, tokenizer, stop_ids: list[int], sampling: SamplingConfig = SamplingConfig(),
                 max_model_len: int | None = None):
        self.client, self.tokenizer = client, tokenizer  # a trl.generation.vllm_client.VLLMClient
        self.stop_ids, self.sampling, self.max_model_len = list(stop_ids), sampling, max_model_len

    def generate(self, requests: list[Request]) -> list[Completion]:
        s = self.sampling
        by_budget: dict[int, list[int]] = defaultdict(list)  # the client takes one max_tokens per call
        for i, r in enumerate(requests):
            by_budget[r.max_new_tokens].append(i)
        out: list[Completion | None] = [None] * len(requests)
        for budget, rows in by_budget.items():
            res = self.client.generate(
                [requests[i].prompt_ids for i in rows], max_tokens=budget, temperature=s.temperature, top_p=s.top_p,
                top_k=max(s.top_k, 0), logprobs=0, generation_kwargs={"stop_token_ids": self.stop_ids},
            )
            for i, ids, lps, lp_ids in zip(rows, res["completion_ids"], res["logprobs"], res["logprob_token_ids"]):
                # each position lists (logprob, token) pairs by rank: take the sampled token's
                sampled = [dict(zip(t, lp)).get(tok) for tok, lp, t in zip(ids, lps, lp_ids)]
                stopped = bool(ids) and ids[-1] in self.stop_ids
                out[i] = Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True), token_ids=list(ids),
                                    logprobs=[float("nan") if lp is None else lp for lp in sampled],
                                    finish_reason="stop" if stopped or len(ids) < budget else "length")
        return out
