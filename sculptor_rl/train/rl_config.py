"""The RL command's config (`SculptorGRPOConfig`), its checks and its plan: everything `sculptor-rl rl validate`
needs, without loading weights or starting an engine (the model's tokenizer and config are read: `preflight`).
The trainer is `sculptor_rl.train.rl`."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from trl import GRPOConfig

from ..acm import TOOL_SCHEMAS
from ..agent.loop import LoopConfig
from ..envs.llm import LLMSettings
from ..envs import RewardConfig, env_class, params_of
from ..envs.tasks import load_tasks
from ..models import train_bf16, train_on_cpu
from .lora import LoraSettings
from .parent_settings import RL_REFUSED, refused_settings
from .preflight import preflight
from .report_to import HELP as REPORT_TO_HELP
from .report_to import resolve as resolve_report_to
from .loss import BEHAVIOUR_CORRECTIONS, IMPORTANCE_SAMPLING_LEVELS, LOSS_TYPES, LOSS_WEIGHTINGS
from .shared_prefix import BatchSettings

__all__ = ["ENGINES", "MEMORY_UPDATES", "VLLM_MODES", "SculptorGRPOConfig", "check_config", "plan", "validate"]

ENGINES = ("vllm", "ray", "hf")
VLLM_MODES = ("colocate", "server")
MEMORY_UPDATES = ("none", "rules", "policy")  # not "off": YAML reads that as false
_TRL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}


@dataclass
class SculptorGRPOConfig(GRPOConfig, LoopConfig, RewardConfig, LLMSettings, LoraSettings, BatchSettings):
    """GRPOConfig with the agent loop's (`LoopConfig`) and the reward's (`RewardConfig`) settings under the names
    eval and serve use, and LoRA as TRL's `ModelConfig` names it; defaults follow the Sculptor paper's GSPO
    (ε 3e-4/4e-4, β 0, lr 1e-6, AdamW). Two loop settings have a TRL field of their own, kept equal to ours:
    `max_completion_length` is `max_new_tokens`, `vllm_max_model_length` is `max_model_len` (set ours; TRL's
    follow). `vllm_mode`, `vllm_gpu_memory_utilization` and the `vllm_server_*` fields keep TRL's meaning."""

    model: str | None = field(default=None, metadata={"help": "HF id or path; default: the embedded SmolLM2-135M"})
    tasks: str = field(default="", metadata={"help": "tasks: .jsonl, .parquet or a datasets name (`data generate`)"})
    tasks_limit: int | None = field(default=None, metadata={"help": "use the first N tasks"})
    heldout_tasks: str | None = field(default=None, metadata={"help": "held-out tasks evaluated during training "
                                                                      "(.jsonl or .parquet; None: none)"})
    heldout_steps: int = field(default=0, metadata={"help": "evaluate them every N optimizer steps and after the "
                                                            "last (0: eval_steps where eval_strategy is 'steps')"})
    heldout_modes: list[str] | None = field(default=None, metadata={"help": "the environment's eval modes to run "
                                                                            "them in (None: the environment itself)"})
    environment: str = field(default="acm", metadata={"help": "the loop's environment (sculptor_rl.envs): acm | "
                                                              "memtool | a registered one"})
    environment_params: dict | str | None = field(default=None, metadata={"help": "the environment's parameters "
                                                                                  "(JSON on the command line)"})
    max_model_len: int | None = field(default=None, metadata={"help": "the engine's window (None: the model's)"})
    engine: str = field(default="vllm", metadata={"help": "vllm (vllm_mode colocate|server), ray (vLLM in Ray "
                                                          "actors) or hf (the policy's own generate: no vLLM, no sync)"})
    vllm_kv_cache_memory_bytes: int | None = field(default=None, metadata={
        "help": "vLLM's KV cache in bytes per engine (default: on CPU sized from need and the free memory, "
                "see sculptor_rl.engines.vllm_engine; on GPU from vllm_gpu_memory_utilization)"})
    ray_num_workers: int = field(default=2, metadata={"help": "engine ray: rollout actors per training process"})
    ray_address: str | None = field(default=None, metadata={"help": "engine ray: the cluster to join (None: "
                                                                     "$RAY_ADDRESS, else a local cluster)"})
    lm_coef: float = field(default=0.1, metadata={"help": "auxiliary LM loss weight (paper: LM regularization "
                                                          "0.1): NLL on positive-advantage samples' trained tokens"})
    skip_empty_updates: bool = field(default=True, metadata={
        "help": "an optimizer step with no learning signal (every group's rollouts tied and beta 0: a zero gradient) "
                "leaves the weights alone; AdamW would still move each weight by its momentum, the last steps' "
                "direction, with no new evidence for it"})
    save_rollouts: bool = field(default=False, metadata={"help": "write each round's trajectories to "
                                                                 "output_dir/rollouts/"})
    memory_updates: str = field(default="none", metadata={
        "help": "memtoolagent: grow the memory store environment_params.memory (read when it exists) during "
                "training: after each generation round every task group adds one entry (its failures critiqued by "
                "`rules`, the offline critique, or by the `policy`'s own engine) and the store is saved; each "
                "round's rollouts read a frozen snapshot, output_dir/memory/step-N.jsonl. none: the memory is fixed"})
    # GSPO defaults (TRL's fields)
    # the paper's objective by default (eq. 1-2 over a trajectory): one ratio over all of a rollout's samples, and
    # each rollout one term however often it changed its context (per-sample terms weight it by that count)
    importance_sampling_level: str = field(default="rollout", metadata={
        "help": "rollout (GSPO over all of a rollout's samples: the Sculptor paper's eq. 2, the default), sequence "
                "(GSPO per sample, TRL's) or token (GRPO)"})
    loss_type: str = "grpo"
    loss_weighting: str = field(default="per-rollout", metadata={
        "help": "per-rollout (each rollout counts once, however many samples it was cut into: the paper's eq. 1, "
                "the default; loss_type grpo) or per-sample (each sample counts once, TRL's unit)"})
    segments_per_group: int = field(default=0, metadata={
        "help": "0: every Algorithm 1 sample of the round is trained (each completion once). N: DCPO's segment "
                "sampling (MemAct), exactly N samples per task group, one from each of N rollouts where there are "
                "as many, else one from each and the rest round-robin (sculptor_rl.train.micro_batches."
                "dcpo_segments)"})
    epsilon: float = 3e-4
    epsilon_high: float | None = 4e-4
    max_staleness: int = field(default=0, metadata={
        "help": "overlapped rounds: a producer thread generates the next rounds while the trainer steps, with the "
                "weights of at most this many optimizer steps ago (older rounds are dropped), and the loss corrects "
                "for that behaviour policy with the engine's logprobs (vllm_importance_sampling_mode). 0: generate, "
                "then train, exactly the on-policy objective. Needs an engine in its own processes whose weights "
                "can change between requests: engine ray, or vllm_mode server with one training process"})
    # the ratio uses trainer-recomputed old logprobs; the sampler mismatch is logged, and corrected only for
    # overlapped rounds (max_staleness > 0), where the samples come from an older policy
    vllm_importance_sampling_correction: bool = False
    vllm_importance_sampling_mode: str = field(default="token_truncate", metadata={
        "help": "max_staleness > 0: the behaviour-policy correction (sculptor_rl.train.loss.behaviour_weights), "
                "TRL's modes: token_truncate (each token's weight exp(old - engine) clamped to "
                "[vllm_importance_sampling_clip_min, vllm_importance_sampling_clip_max]), sequence_truncate (one "
                "weight per sample, its tokens' product), token_mask / sequence_mask (0 outside the range)"})
    logging_steps: float = 1
    report_to: None | str | list[str] = field(default=None, metadata={"help": REPORT_TO_HELP})

    _VALID_DICT_FIELDS = GRPOConfig._VALID_DICT_FIELDS + ["environment_params"]

    def __post_init__(self):
        if self.heldout_tasks and str(self.eval_strategy).lower().endswith("steps"):
            # TRL's schedule, run by our callback (`heldout`): the Trainer's own loop wants an eval_dataset of tokens
            every = self.eval_steps or self.logging_steps
            if 0 < every < 1 and self.max_steps > 0:  # a fraction of the run, as TrainingArguments reads it
                every = math.ceil(every * self.max_steps)
            self.heldout_steps, self.eval_strategy = self.heldout_steps or int(every), "no"
        for ours, trls, default in (("max_new_tokens", "max_completion_length", _TRL_DEFAULTS["max_completion_length"]),
                                    ("max_model_len", "vllm_max_model_length", None)):
            if getattr(self, trls) not in (default, getattr(self, ours)):
                raise ValueError(f"set {ours} (the name rl, eval and serve share), not TRL's {trls}")
            setattr(self, trls, getattr(self, ours))
        self.report_to = resolve_report_to(self.report_to)
        self.bf16_asked = self.bf16  # what validate reports for the target GPU; bf16 itself is what runs here
        self.bf16 = train_bf16(self.bf16)
        self.use_cpu = train_on_cpu(self.use_cpu, self.bf16 is not False or self.fp16)  # None: TRL's bf16
        super().__post_init__()



def check_config(cfg: SculptorGRPOConfig) -> list[str]:
    """Errors that would stop a run (raised as one ValueError); returns warnings."""
    errors, warnings = [], []
    if not cfg.tasks:
        errors.append("set `tasks:` (a .jsonl written by `sculptor-rl data generate`, a .parquet or a datasets name)")
    elif cfg.tasks.endswith((".jsonl", ".parquet")) and not Path(cfg.tasks).exists():
        warnings.append(f"tasks file {cfg.tasks} does not exist yet (make it with `sculptor-rl data generate`)")
    env = None
    try:  # an unknown environment, unknown or bad parameters (e.g. a memtool mode) fail here, before a model loads
        params_of(cfg.environment, cfg.environment_params)
        env = env_class(cfg.environment)
    except (ValueError, TypeError) as e:
        errors.append(f"environment: {e}")
    if env is not None and cfg.tasks and cfg.tasks.endswith((".jsonl", ".parquet")) and Path(cfg.tasks).exists():
        try:  # every record's family one the environment runs, its fields there and typed: before any rollout
            load_tasks(cfg.tasks, environment=cfg.environment)
        except ValueError as e:
            errors.append(f"tasks: {e}")
    for name, low in (("max_tool_calls", 0), ("max_new_tokens", 1), ("max_context_tokens", 1)):
        if getattr(cfg, name) < low:
            errors.append(f"{name} must be at least {low}, got {getattr(cfg, name)}")
    if cfg.segments_per_group < 0:
        errors.append(f"segments_per_group must be 0 (every sample) or a count, got {cfg.segments_per_group}")
    if cfg.memory_updates not in MEMORY_UPDATES:
        errors.append(f"memory_updates must be one of {MEMORY_UPDATES}, got {cfg.memory_updates!r}")
    elif cfg.memory_updates != "none":
        if env is not None and env.check_memory_entry is None:
            errors.append(f"memory_updates grows an environment's memory across episodes: the {cfg.environment} "
                          f"environment keeps none (memtoolagent does)")
        elif not (cfg.environment_params or {}).get("memory"):
            errors.append("memory_updates: set environment_params.memory, the store's path (JSONL; read when it "
                          "exists, saved after every round)")
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
    errors += refused_settings(cfg, RL_REFUSED)  # TRL's settings the trainer does not honour (`parent_settings`)
    errors += overlap_errors(cfg)
    if cfg.importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        errors.append(f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}: 'sequence' (GSPO per "
                      "sample), 'rollout' (GSPO over a rollout's samples, paper eq. 2) or 'token' (GRPO)")
    if cfg.loss_type not in LOSS_TYPES:
        errors.append(f"loss_type must be one of {LOSS_TYPES} (per-sample mean or per-token mean)")
    if cfg.loss_weighting not in LOSS_WEIGHTINGS:
        errors.append(f"loss_weighting must be one of {LOSS_WEIGHTINGS}")
    elif cfg.loss_weighting == "per-rollout" and cfg.loss_type != "grpo":
        errors.append("loss_weighting 'per-rollout' takes loss_type 'grpo' ('dapo' counts every token once)")
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
    if cfg.max_tokens_per_batch is not None and cfg.max_tokens_per_batch < 1:
        errors.append("max_tokens_per_batch must be positive (or unset)")
    if cfg.eval_strategy != "no":  # 'steps' with heldout_tasks became heldout_steps (__post_init__)
        errors.append("eval_strategy: 'steps' with heldout_tasks (held-out rollouts every eval_steps), or 'no'; "
                      "evaluate checkpoints with `sculptor-rl eval`")
    if cfg.heldout_tasks and cfg.heldout_steps < 1:
        errors.append("heldout_tasks needs heldout_steps >= 1 (or eval_strategy 'steps' with eval_steps)")
    if cfg.max_new_tokens >= cfg.max_context_tokens:
        errors.append("max_new_tokens must be below max_context_tokens")
    if cfg.max_model_len and cfg.max_model_len < cfg.max_context_tokens:
        warnings.append(f"rollouts stop at max_model_len = {cfg.max_model_len} tokens, below "
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


def overlap_errors(cfg: SculptorGRPOConfig) -> list[str]:
    """What overlapped rounds (`max_staleness` > 0) cannot run with. A colocated engine (vLLM in this process, or
    the policy's own `generate`) shares the trainer's devices, and its weights can only change while it does not
    generate: it keeps the synchronous rounds (overlapping would gain nothing there and race the in-place load)."""
    if cfg.max_staleness < 0:
        return ["max_staleness must be >= 0 (0: synchronous rounds)"]
    if not cfg.max_staleness:
        return []
    errors = []
    if cfg.engine == "hf" or (cfg.engine == "vllm" and cfg.vllm_mode == "colocate"):
        errors.append(f"max_staleness > 0 overlaps generation with training on an engine in its own processes "
                      f"(engine ray, or vllm_mode server); engine {cfg.engine!r}"
                      f"{' with vllm_mode colocate' if cfg.engine == 'vllm' else ''} shares the trainer's devices "
                      "and keeps the synchronous rounds: set max_staleness 0")
    if cfg.memory_updates != "none":
        errors.append("max_staleness > 0 with memory_updates: a round's memory snapshot is made from every earlier "
                      "round, which overlapped rounds have not finished; set max_staleness 0")
    if cfg.steps_per_generation != cfg.gradient_accumulation_steps or cfg.num_iterations != 1:
        errors.append("max_staleness > 0 counts staleness in rounds of one optimizer step: set steps_per_generation "
                      "= gradient_accumulation_steps and num_iterations 1")
    if cfg.vllm_importance_sampling_mode not in BEHAVIOUR_CORRECTIONS:
        errors.append(f"vllm_importance_sampling_mode must be one of {BEHAVIOUR_CORRECTIONS}")
    elif cfg.vllm_importance_sampling_mode.endswith("truncate") and cfg.vllm_importance_sampling_clip_max is None:
        errors.append("a *_truncate vllm_importance_sampling_mode needs vllm_importance_sampling_clip_max")
    return errors


def plan(cfg: SculptorGRPOConfig) -> str:
    """What a run of this config will do, in a few lines (counts per training process)."""
    rollouts = cfg.per_device_train_batch_size * cfg.steps_per_generation
    level = {"sequence": "GSPO (sequence-level ratio per sample)", "token": "GRPO (token-level ratio)",
             "rollout": "GSPO (sequence-level ratio over a rollout's samples, paper eq. 2)"}
    lora = f" + LoRA r={cfg.lora_r}" if cfg.use_peft else ""
    memory = (f"kv_cache_memory_bytes {cfg.vllm_kv_cache_memory_bytes}" if cfg.vllm_kv_cache_memory_bytes else
              f"gpu_memory_utilization {cfg.vllm_gpu_memory_utilization} on GPU, KV cache sized from need on CPU")
    if cfg.engine == "hf":
        engine = "hf generate with the policy itself (no sync)"
    elif cfg.engine == "ray":
        engine = (f"{cfg.ray_num_workers} Ray rollout worker(s) per process at {cfg.ray_address or 'a local cluster'}"
                  f" (vLLM, {memory}), reload saved weights from "
                  "output_dir/engine-weights after each step")
    elif cfg.vllm_mode == "server":
        where = cfg.vllm_server_base_url or f"{cfg.vllm_server_host}:{cfg.vllm_server_port}"
        engine = f"vLLM server at {where}, NCCL weight sync after each step (no rank samples meanwhile)"
    else:
        sleep = ", asleep while training (GPU)" if cfg.vllm_enable_sleep_mode else ""
        engine = (f"colocated vLLM ({memory}, max_model_len {cfg.max_model_len or 'model default'}{sleep}), new "
                  "weights after each step: in memory on a GPU, reloaded from a saved copy on CPU")
    ds = f"DeepSpeed {cfg.deepspeed}" if cfg.deepspeed else "no DeepSpeed config (accelerate launch may add one)"
    optimizer_steps = cfg.steps_per_generation // cfg.gradient_accumulation_steps
    lines = [
        f"model        {cfg.model or 'embedded SmolLM2-135M-Instruct'}{lora}",
        f"tasks        {cfg.tasks}{f' (first {cfg.tasks_limit})' if cfg.tasks_limit else ''}, "
        f"environment {cfg.environment}",
        f"engine       {engine}",
        f"rollouts     {rollouts} per process per round = {rollouts // cfg.num_generations} task(s) x "
        f"{cfg.num_generations} generations (times the number of training processes)",
        f"loop         max_tool_calls {cfg.max_tool_calls}, max_context_tokens {cfg.max_context_tokens}, "
        f"max_new_tokens {cfg.max_new_tokens}, temperature {cfg.temperature}",
        f"objective    {level[cfg.importance_sampling_level]}, loss_type {cfg.loss_type}, {cfg.loss_weighting}, "
        f"eps {cfg.epsilon}/{cfg.epsilon_high}, beta {cfg.beta}, lm_coef {cfg.lm_coef}, "
        f"scale_rewards {cfg.scale_rewards}",
        f"optimizer    {getattr(cfg.optim, 'value', cfg.optim)}, lr {cfg.learning_rate}; {optimizer_steps} optimizer "
        f"step(s) per round of {cfg.steps_per_generation} micro-batches; num_iterations {cfg.num_iterations}, "
        f"max_steps {cfg.max_steps}",
        f"precision    {'bf16' if cfg.bf16 else 'fp16' if cfg.fp16 else 'fp32'}, gradient checkpointing "
        f"{'on' if cfg.gradient_checkpointing else 'off'}; {ds}",
        f"batches      shared prefixes {'on' if cfg.shared_prefix else 'off'}; micro-batches "
        + (f"of up to {cfg.max_tokens_per_batch} computed tokens" if cfg.max_tokens_per_batch else
           "of about equal size"),
        f"output       {cfg.output_dir} (save every {cfg.save_steps} steps, report_to {cfg.report_to})",
    ]
    if cfg.max_staleness:
        lines.insert(3, f"overlap      rounds generated while the trainer steps, by weights at most {cfg.max_staleness} "
                        f"step(s) old (older rounds dropped); {cfg.vllm_importance_sampling_mode} importance weights "
                        f"in [{cfg.vllm_importance_sampling_clip_min}, {cfg.vllm_importance_sampling_clip_max}]")
    if cfg.memory_updates != "none":
        lines.insert(2, f"memory       {cfg.environment_params['memory']} grows by one entry per task group after "
                        f"each round (failures critiqued by {cfg.memory_updates}); snapshots in "
                        f"{cfg.output_dir}/memory/")
    return "\n".join(lines)


def validate(cfg: SculptorGRPOConfig) -> list[str]:
    """Check the config and what it names of the model (tokenizer, chat template and parser, context length;
    `preflight`) without loading weights or starting an engine; print the plan and what was checked. Returns
    warnings; ValueError with every error found."""
    warnings = check_config(cfg)
    print(plan(cfg))
    env = env_class(cfg.environment)
    tools = getattr(env, "tools", None)
    errors, lines = preflight(cfg, cfg.bf16_asked, tools if isinstance(tools, list) else TOOL_SCHEMAS)
    for line in lines:
        print(f"check        {line}")
    for w in warnings:
        print(f"warning: {w}")
    if errors:
        raise ValueError("invalid RL config:\n- " + "\n- ".join(errors))
    return warnings
