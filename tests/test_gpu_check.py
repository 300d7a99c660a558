"""bench/gpu_check.py's part 2 config: the quickstart's, with the HF engine for rl and eval and the trainers on the
GPU, valid for the pipeline (its sections checked as `sculptor-rl pipeline` checks them)."""

import importlib
import sys
from pathlib import Path

import yaml

from sculptor_rl.pipeline import PipelineConfig
from sculptor_rl.train.rl_config import SculptorGRPOConfig, check_config

BENCH = Path(__file__).resolve().parents[1] / "bench"


def gpu_check(monkeypatch, **env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("gpu_check", None)
    return importlib.import_module("gpu_check")


def test_part2_config_runs_rl_and_eval_on_the_hf_engine_on_the_gpu(monkeypatch, tmp_path):
    gc = gpu_check(monkeypatch, GPU_CHECK_DEVICE="cuda", GPU_CHECK_TINY="0", GPU_CHECK_RUNS=str(tmp_path / "runs"))
    path = tmp_path / "quickstart_gpu.yaml"
    gc.part2_config(path)
    cfg = PipelineConfig.from_yaml(str(path))
    quickstart = yaml.safe_load((BENCH.parent / "configs" / "quickstart.yaml").read_text())
    assert cfg.rl["engine"] == "hf" and cfg.eval["engine"] == "hf" and cfg.eval["engine_kwargs"]["batch_size"] == 32
    assert cfg.rl["use_cpu"] is False and cfg.sft["use_cpu"] is False
    assert (cfg.task, cfg.task_params, cfg.train_tasks) == (quickstart["task"], quickstart["task_params"],
                                                           quickstart["train_tasks"])
    assert cfg.eval_tasks == 32 and cfg.runs_dir == str(tmp_path / "runs") and cfg.budget_minutes is None
    # the RL stage's config as the pipeline builds it (rl_config, then the overrides) passes the trainer's checks
    values = {**yaml.safe_load((BENCH.parent / cfg.rl_config).read_text()), **cfg.rl, "use_cpu": True}
    rl = SculptorGRPOConfig(**{**values, "output_dir": str(tmp_path / "rl"), "tasks": "x.jsonl"})
    assert rl.engine == "hf" and isinstance(check_config(rl), list)


def test_tiny_cpu_run_keeps_the_cpu_settings(monkeypatch, tmp_path):
    gc = gpu_check(monkeypatch, GPU_CHECK_DEVICE="cpu", GPU_CHECK_TINY="1", GPU_CHECK_RUNS=str(tmp_path / "runs"))
    gc.part2_config(tmp_path / "c.yaml")
    cfg = PipelineConfig.from_yaml(str(tmp_path / "c.yaml"))
    assert "use_cpu" not in cfg.rl and cfg.rl["max_steps"] == 1 and cfg.eval_tasks == 2
