"""sbatch scripts rendered from a small YAML (slurm/*.yaml): multi-node SFT, and RL on separate training and
rollout nodes.

    sculptor-rl slurm render --config slurm/rl_qwen3_8b_ray.yaml [--out job.sbatch]   # the script (to read, edit)
    sculptor-rl slurm submit --config slurm/rl_qwen3_8b_ray.yaml [--dry-run]          # sbatch it, or only print

One job holds every node; the script splits SLURM's node list: the first `nodes` train, the next
`rollout_nodes` generate. Training runs one `accelerate launch` per node (srun, one task per node), which starts
one process per GPU; the rendezvous is the first training node and the machine rank is the srun task's rank.
Rollouts (RL):
- `vllm-serve`: `trl vllm-serve` on the one rollout node (tensor x data parallel over its GPUs: TRL's client
  talks to one server); the trainer runs `vllm_mode: server` against it, weights over NCCL.
- `ray`: a Ray cluster over the rollout nodes; the training nodes join it offering no CPU or GPU, so every
  rollout actor lands on a rollout node. The trainer runs `engine: ray` with the rollout engines split evenly
  over its processes; new weights go through output_dir, which must be on a filesystem all nodes share.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .config import load_config

__all__ = ["SlurmConfig", "render"]

JOBS = ("sft", "rl")
ROLLOUTS = ("vllm-serve", "ray")


@dataclass
class SlurmConfig:
    job: str  # sft | rl
    config: str  # the trainer's YAML (configs/<environment>/sft_*.yaml, rl_*.yaml)
    name: str = "sculptor-rl"
    nodes: int = 1  # training nodes
    gpus_per_node: int = 8
    rollout_nodes: int = 0  # rl: nodes that only generate
    rollout: str = "vllm-serve"  # rl: vllm-serve | ray
    tensor_parallel_size: int = 1  # rl: GPUs per vLLM engine
    accelerate_config: str = "configs/accelerate/zero3.yaml"
    partition: str | None = None
    account: str | None = None
    time: str = "24:00:00"
    cpus_per_task: int = 32
    setup: list[str] = field(default_factory=lambda: ["source .venv/bin/activate"])  # run first, on every node
    args: list[str] = field(default_factory=list)  # more trainer flags (they override its YAML)
    main_port: int = 29500
    vllm_port: int = 8000
    ray_port: int = 6379

    @classmethod
    def from_yaml(cls, path: str | Path) -> "SlurmConfig":
        return load_config(cls, path)

    @property
    def processes(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def rollout_engines(self) -> int:
        return self.rollout_nodes * self.gpus_per_node // self.tensor_parallel_size


def check(cfg: SlurmConfig) -> None:
    errors = []
    if cfg.job not in JOBS:
        errors.append(f"job must be one of {JOBS}")
    if cfg.nodes < 1 or cfg.gpus_per_node < 1:
        errors.append("nodes and gpus_per_node must be at least 1")
    if cfg.job == "sft" and cfg.rollout_nodes:
        errors.append("sft has no rollouts: set rollout_nodes: 0")
    if cfg.job == "rl":
        if cfg.rollout not in ROLLOUTS:
            errors.append(f"rollout must be one of {ROLLOUTS}")
        if cfg.rollout_nodes < 1:
            errors.append("rl needs rollout_nodes >= 1 (training and rollouts run on separate nodes)")
        if cfg.gpus_per_node % cfg.tensor_parallel_size:
            errors.append("gpus_per_node must be a multiple of tensor_parallel_size")
        if cfg.rollout == "vllm-serve" and cfg.rollout_nodes > 1:
            errors.append("vllm-serve runs on one rollout node (TRL's client talks to one server): use rollout: ray")
        if cfg.rollout == "ray" and cfg.rollout_nodes and cfg.rollout_engines % cfg.processes:
            errors.append(f"ray: {cfg.rollout_engines} rollout engines do not split evenly over {cfg.processes} "
                          "training processes")
    if errors:
        raise ValueError("invalid SLURM config:\n- " + "\n- ".join(errors))


def render(cfg: SlurmConfig) -> str:
    """The sbatch script. Node names are resolved when it runs (`scontrol show hostnames`)."""
    check(cfg)
    trainer = yaml.safe_load(Path(cfg.config).read_text()) or {}
    accel = yaml.safe_load(Path(cfg.accelerate_config).read_text())
    n, r, g = cfg.nodes, cfg.rollout_nodes, cfg.gpus_per_node
    header = [f"--job-name={cfg.name}", f"--nodes={n + r}", "--ntasks-per-node=1", f"--gpus-per-node={g}",
              f"--cpus-per-task={cfg.cpus_per_task}", f"--time={cfg.time}", "--output=%x-%j.out"]
    header += [f"--{k}={v}" for k, v in (("partition", cfg.partition), ("account", cfg.account)) if v]
    lines = ["#!/bin/bash", *(f"#SBATCH {h}" for h in header), "set -euo pipefail", 'cd "$SLURM_SUBMIT_DIR"',
             *cfg.setup,
             'mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
             f'TRAIN_NODES=$(IFS=,; echo "${{HOSTS[*]:0:{n}}}")', 'MAIN="${HOSTS[0]}"']
    args, before = list(cfg.args), ""
    if cfg.job == "rl":
        lines += [f'ROLLOUT_HEAD="${{HOSTS[{n}]}}"']
        tp = cfg.tensor_parallel_size
        if cfg.rollout == "vllm-serve":
            flags = dict(zip(cfg.args[::2], cfg.args[1::2]))  # a `--model` in args overrides the YAML's
            model = flags.get("--model", trainer.get("model"))
            if not model:
                raise ValueError(f"{cfg.config}: set `model` (the vLLM server loads it)")
            serve = ["trl", "vllm-serve", "--model", model, "--tensor_parallel_size", str(tp),
                     "--data_parallel_size", str(g // tp), "--host", "0.0.0.0", "--port", str(cfg.vllm_port)]
            if trainer.get("max_model_len"):
                serve += ["--max_model_len", str(trainer["max_model_len"])]
            lines += ["# the vLLM server (the trainer waits for it: vllm_server_timeout)",
                      f'srun --nodes=1 --ntasks=1 -w "$ROLLOUT_HEAD" {shlex.join(serve)} &']
            args = ["--engine", "vllm", "--vllm_mode", "server", "--vllm_server_base_url",
                    f"http://$ROLLOUT_HEAD:{cfg.vllm_port}", *args]
        else:
            head = f"$ROLLOUT_HEAD:{cfg.ray_port}"
            lines += ["# the Ray cluster: head on the first rollout node, the other rollout nodes join it",
                      f'srun --nodes=1 --ntasks=1 -w "$ROLLOUT_HEAD" ray start --head --port={cfg.ray_port} '
                      f"--num-gpus={g} --block &",
                      f'until ray status --address "{head}" >/dev/null 2>&1; do sleep 5; done']
            if r > 1:
                lines += [f'ROLLOUT_REST=$(IFS=,; echo "${{HOSTS[*]:{n + 1}:{r - 1}}}")',
                          f'srun --nodes={r - 1} --ntasks-per-node=1 -w "$ROLLOUT_REST" ray start '
                          f'--address="{head}" --num-gpus={g} --block &']
            before = f"ray start --address={head} --num-cpus=0 --num-gpus=0 && "
            args = ["--engine", "ray", "--ray_address", "auto", "--ray_num_workers",
                    str(cfg.rollout_engines // cfg.processes), "--vllm_tensor_parallel_size", str(tp), *args]
    launch = ["accelerate", "launch", "--config_file", cfg.accelerate_config, "--num_machines", str(n),
              "--num_processes", str(cfg.processes), "--machine_rank", "$SLURM_PROCID", "--main_process_ip",
              "$MAIN", "--main_process_port", str(cfg.main_port)]
    if accel.get("distributed_type") == "DEEPSPEED":  # one launcher per node (the default, pdsh, needs ssh)
        launch += ["--deepspeed_multinode_launcher", "standard"]
    launch += ["-m", f"sculptor_rl.train.{cfg.job}", "--config", cfg.config, *args]
    # $SLURM_PROCID is each task's own (escaped); $MAIN and $ROLLOUT_HEAD are this script's
    command = (before + " ".join(shlex.quote(a) if "$" not in a else a for a in launch)).replace(
        "$SLURM_PROCID", r"\$SLURM_PROCID")
    lines += [f"# training: one accelerate launch per node, {g} processes each",
              f'srun --nodes={n} --ntasks-per-node=1 -w "$TRAIN_NODES" bash -c "{command}"']
    return "\n".join(lines) + "\n"
