"""HF transformers `generate` engine: the fallback where vLLM is not installed. Token ids and logprobs out."""

from __future__ import annotations

import itertools

import torch

from .base import Completion, Request, SamplingConfig


class HFEngine:
    def __init__(self, model, tokenizer, stop_ids: list[int], sampling: SamplingConfig = SamplingConfig(),
                 batch_size: int = 8, dtype: str = "auto", device: str | None = None):
        """`model`: an HF id or path, or a loaded model (RL's `hf` engine generates with the policy being trained)."""
        from transformers import AutoModelForCausalLM

        if isinstance(model, str):
            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            model = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(device)
        self.model = model.eval()
        self.device = self.model.device
        self.max_model_len = getattr(self.model.config, "max_position_embeddings", None)
        self.tokenizer, self.stop_ids = tokenizer, list(stop_ids)
        self.sampling, self.batch_size = sampling, batch_size
        self.pad_id = self.stop_ids[0]
        self._gen = torch.Generator(device="cpu").manual_seed(sampling.seed or 0)

    @torch.no_grad()
    def generate(self, requests: list[Request]) -> list[Completion]:
        out: list[Completion] = []
        # one `generate` call samples one way: split the batch into runs of requests with the same settings
        for s, run in itertools.groupby(requests, key=lambda r: r.sampling or self.sampling):
            run = list(run)
            for i in range(0, len(run), self.batch_size):
                out += self._batch(run[i : i + self.batch_size], s)
        return out

    def _batch(self, requests: list[Request], s: SamplingConfig) -> list[Completion]:
        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, r in enumerate(requests):  # left padding: generation continues from the same column
            ids[row, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            mask[row, width - len(r.prompt_ids) :] = 1
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=self._gen)))
        greedy = s.temperature == 0
        gen = self.model.generate(
            input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
            max_new_tokens=max(r.max_new_tokens for r in requests), do_sample=not greedy,
            temperature=None if greedy else s.temperature, top_p=None if greedy else s.top_p,
            top_k=None if greedy or s.top_k < 0 else s.top_k, eos_token_id=self.stop_ids, pad_token_id=self.pad_id,
            output_scores=True, return_dict_in_generate=True,
        )
        new = gen.sequences[:, width:].cpu()
        # logprobs of the sampled tokens under the distribution they were drawn from: `scores` are the logits after
        # generate's processors (temperature, top-k, top-p), as vLLM's `processed_logprobs` (`vllm_engine`) and
        # as the trainer computes them (logits / T; the same where top_p = 1 and top_k is off)
        scores = torch.stack(gen.scores, dim=1).float().cpu()
        logp = torch.log_softmax(scores, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        completions = []
        for row, r in enumerate(requests):
            seq = new[row].tolist()
            n = next((k + 1 for k, t in enumerate(seq) if t in self.stop_ids), len(seq))
            n = min(n, r.max_new_tokens)
            finished = n <= len(seq) and seq[n - 1] in self.stop_ids
            text = self.tokenizer.decode(seq[:n], skip_special_tokens=True)
            completions.append(Completion(text=text, token_ids=seq[:n], logprobs=logp[row, :n].tolist(),
                                          finish_reason="stop" if finished else "length"))
        return completions
