"""Every entry point configures logging, rank-prefixed where a launcher started several processes, so the
project's INFO lines reach SLURM logs under `accelerate launch` (which configures none itself)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(module: str, args: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1", **env})


def test_sft_entry_point_logs_with_the_rank_prefix(tmp_path):
    """`python -m sculptor_rl.train.sft` as rank 1 of 2 (RANK as accelerate launch sets it): its INFO line carries
    the rank, and a config naming an integration that is not installed ends in one error line."""
    config = tmp_path / "sft.yaml"
    config.write_text(f"samples: s.jsonl\noutput_dir: {tmp_path}/out\nreport_to: [not-an-integration]\n")
    proc = run("sculptor_rl.train.sft", ["--config", str(config)], RANK="1", WORLD_SIZE="2")
    assert proc.returncode == 1
    assert "[rank 1] " in proc.stderr and " INFO sculptor_rl: sculptor-rl sft: torch " in proc.stderr
    assert "error: report_to: not-an-integration is not installed" in proc.stderr


def test_cli_logs_without_a_prefix_in_one_process(tmp_path):
    proc = run("sculptor_rl.cli", ["rl", "validate", "--config", "configs/acm/rl_qwen3_8b_gspo.yaml"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(l for l in proc.stderr.splitlines() if "sculptor-rl rl validate: torch" in l)
    assert " INFO sculptor_rl: " in line and not line.startswith("[rank")


@pytest.mark.slow
def test_two_ranks_under_accelerate_launch_log_with_their_rank():
    """`accelerate launch -m sculptor_rl.train.rl` (the documented GPU entry) with 2 CPU processes, under the shipped
    ZeRO-2 accelerate config as tests/test_deepspeed.py runs it: each rank's INFO lines on stderr, prefixed."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "configs/accelerate/zero2.yaml",
         "--num_processes", "2", "--main_process_port", "29571", "-m", "sculptor_rl.train.rl", "validate",
         "--config", "configs/acm/rl_quickstart_cpu.yaml"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        assert any(l.startswith(f"[rank {rank}] ") and " INFO sculptor_rl: sculptor-rl rl validate: " in l
                   and "(world size 2)" in l for l in proc.stderr.splitlines())
    assert proc.stdout.count("config OK") == 2
