"""The sbatch scripts rendered from slurm/*.yaml: node and GPU counts from the config, the commands they run."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sculptor_rl.slurm import SlurmConfig, render

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    monkeypatch.chdir(ROOT)  # configs are read relative to the repo, as sbatch runs from the submit dir


def srun(script: str, what: str) -> str:
    (line,) = [x for x in script.splitlines() if x.startswith("srun") and what in x]
    return line


def flag(line: str, name: str) -> str:
    return re.search(rf"{name}[ =](\S+)", line).group(1)


@pytest.mark.parametrize("path", sorted((ROOT / "slurm").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_dry_run_to_valid_bash(path):
    proc = subprocess.run([sys.executable, "-m", "sculptor_rl.cli", "slurm", "submit", "--config", str(path),
                           "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# would write") and "sbatch" in proc.stdout
    syntax = subprocess.run(["bash", "-n"], input=proc.stdout, capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_multi_node_sft_runs_one_launcher_per_node_and_one_process_per_gpu():
    script = render(SlurmConfig(job="sft", config="configs/acm/sft_qwen3_8b.yaml", nodes=3, gpus_per_node=4,
                                partition="gpu"))
    assert "#SBATCH --nodes=3" in script and "#SBATCH --gpus-per-node=4" in script
    assert "#SBATCH --partition=gpu" in script and "#SBATCH --ntasks-per-node=1" in script
    line = srun(script, "accelerate launch")
    assert flag(line, "--nodes") == "3" and flag(line, "--ntasks-per-node") == "1"
    assert flag(line, "--num_machines") == "3" and flag(line, "--num_processes") == "12"
    # the rank comes from each srun task, the rendezvous from the script (first node of the allocation)
    assert r"--machine_rank \$SLURM_PROCID" in line and "--main_process_ip $MAIN" in line
    assert "--deepspeed_multinode_launcher standard" in line  # zero3: no pdsh/ssh needed
    assert "-m sculptor_rl.train.sft --config configs/acm/sft_qwen3_8b.yaml" in line
    assert "vllm-serve" not in script and "ray start" not in script


def test_rl_with_a_vllm_server_node():
    script = render(SlurmConfig(job="rl", config="configs/acm/rl_qwen3_8b_gspo.yaml", nodes=2, gpus_per_node=8,
                                rollout_nodes=1, rollout="vllm-serve", tensor_parallel_size=2,
                                args=["--model", "ckpt/sft"]))
    assert "#SBATCH --nodes=3" in script
    assert 'TRAIN_NODES=$(IFS=,; echo "${HOSTS[*]:0:2}")' in script and 'ROLLOUT_HEAD="${HOSTS[2]}"' in script
    serve = srun(script, "trl vllm-serve")
    assert serve.endswith("&") and '-w "$ROLLOUT_HEAD"' in serve
    assert flag(serve, "--model") == "ckpt/sft"  # the trainer's start point, overriding the YAML's model
    assert flag(serve, "--tensor_parallel_size") == "2" and flag(serve, "--data_parallel_size") == "4"
    train = srun(script, "accelerate launch")
    assert flag(train, "--num_processes") == "16" and flag(train, "--num_machines") == "2"
    assert "--vllm_mode server --vllm_server_base_url http://$ROLLOUT_HEAD:8000" in train
    assert '-w "$TRAIN_NODES"' in train


def test_rl_with_a_ray_cluster_at_the_papers_scale():
    """64 training + 64 rollout GPUs: one vLLM engine per training process, all on the rollout nodes."""
    script = render(SlurmConfig(job="rl", config="configs/acm/rl_qwen3_8b_gspo.yaml", nodes=8, gpus_per_node=8,
                                rollout_nodes=8, rollout="ray"))
    assert "#SBATCH --nodes=16" in script
    head = srun(script, "--head")
    assert flag(head, "--num-gpus") == "8" and '-w "$ROLLOUT_HEAD"' in head
    rest = srun(script, '-w "$ROLLOUT_REST"')
    assert flag(rest, "--nodes") == "7" and 'ROLLOUT_REST=$(IFS=,; echo "${HOSTS[*]:9:7}")' in script
    assert script.index("until ray status") < script.index(rest)  # workers join a running head
    train = srun(script, "accelerate launch")
    # training nodes join the cluster offering nothing, so no rollout actor lands on them
    assert "ray start --address=$ROLLOUT_HEAD:6379 --num-cpus=0 --num-gpus=0 && accelerate launch" in train
    assert flag(train, "--num_processes") == "64" and flag(train, "--ray_num_workers") == "1"
    assert "--engine ray --ray_address auto" in train


@pytest.mark.parametrize("kw,message", [
    (dict(job="sft", rollout_nodes=1), "sft has no rollouts"),
    (dict(job="rl"), "rollout_nodes >= 1"),
    (dict(job="rl", rollout_nodes=2, rollout="vllm-serve"), "use rollout: ray"),
    (dict(job="rl", nodes=2, rollout_nodes=1, rollout="ray"), "do not split evenly"),
    (dict(job="rl", rollout_nodes=1, tensor_parallel_size=3), "multiple of tensor_parallel_size"),
])
def test_bad_configs_name_the_problem(kw, message):
    with pytest.raises(ValueError, match=message):
        render(SlurmConfig(**{"config": "configs/acm/rl_qwen3_8b_gspo.yaml", **kw}))
