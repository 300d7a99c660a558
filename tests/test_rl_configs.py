"""Every shipped RL / DeepSpeed / accelerate config is consistent, and `rl validate` catches broken ones."""

import json
from pathlib import Path

import pytest
import yaml

from sculptor_rl.cli import main as cli_main
from sculptor_rl.train.rl import SculptorGRPOConfig, check_config, main
from sculptor_rl.train.rl_config import plan

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((ROOT / "configs/rl").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_rl_config_validates(path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # configs name their files relative to the repo
    main(["validate", "--config", str(path)])
    out = capsys.readouterr().out
    assert "config OK" in out and "objective" in out


@pytest.mark.parametrize("path", sorted((ROOT / "configs/accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_config_points_at_a_deepspeed_config_with_auto_batches(path):
    cfg = yaml.safe_load(path.read_text())
    assert cfg["num_processes"] >= 1 and cfg["distributed_type"] in ("DEEPSPEED", "MULTI_GPU")
    if cfg["distributed_type"] == "DEEPSPEED":
        ds = json.loads((ROOT / cfg["deepspeed_config"]["deepspeed_config_file"]).read_text())
        assert ds["zero_optimization"]["stage"] in (2, 3)
        assert all(ds[k] == "auto" for k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"))
        # DeepSpeed derives the global batch from its own world size: accelerate sees one process per rank on CPU
        assert "train_batch_size" not in ds
        assert cfg["deepspeed_config"]["zero3_init_flag"] == (ds["zero_optimization"]["stage"] == 3)


def config(**kw):
    base = dict(output_dir="/tmp/unused", tasks="t.jsonl", use_cpu=True, report_to="none")
    return SculptorGRPOConfig(**{**base, **kw})


@pytest.mark.parametrize("kw,message", [
    (dict(per_device_train_batch_size=3, num_generations=4, gradient_accumulation_steps=2), "num_generations"),
    (dict(steps_per_generation=3, gradient_accumulation_steps=2, per_device_train_batch_size=4,
          num_generations=2), "must be a multiple of gradient_accumulation_steps"),
    (dict(vllm_mode="server", model="Qwen/Qwen3-8B", per_device_train_batch_size=8), "vllm_server_base_url"),
    (dict(vllm_mode="server", vllm_server_base_url="http://h:8000", per_device_train_batch_size=8), "set `model`"),
    (dict(use_vllm=True, per_device_train_batch_size=8), "leave use_vllm off"),
    (dict(loss_type="bnpo", per_device_train_batch_size=8), "loss_type must be one of"),
    (dict(engine="openai", per_device_train_batch_size=8), "engine must be one of"),
    (dict(engine="ray", ray_num_workers=0, per_device_train_batch_size=8), "ray_num_workers"),
    (dict(tasks="", per_device_train_batch_size=8), "set `tasks:`"),
    (dict(memory_updates="always", per_device_train_batch_size=8), "memory_updates must be one of"),
    (dict(memory_updates="rules", per_device_train_batch_size=8), "needs environment memtoolagent, not 'acm'"),
    (dict(memory_updates="rules", environment="memtoolagent", per_device_train_batch_size=8),
     "set environment_params.memory"),
    (dict(memory_updates="policy", environment="memtoolagent", environment_params={"retrieval": "topk"},
          per_device_train_batch_size=8), "set environment_params.memory"),
])
def test_check_config_names_the_problem(kw, message):
    with pytest.raises(ValueError, match=message):
        check_config(config(**kw))


def test_plan_names_a_growing_memory():
    memtoolagent = dict(per_device_train_batch_size=8, environment="memtoolagent",
                        environment_params={"memory": "m.jsonl"})
    assert "\nmemory " not in plan(config(**memtoolagent))
    shown = plan(config(**memtoolagent, memory_updates="rules"))
    assert "memory       m.jsonl grows by one entry per task group" in shown and "/tmp/unused/memory/" in shown


def test_validate_reports_a_bad_config_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks: t.jsonl\nnum_generations: 3\nper_device_train_batch_size: 4\n")
    with pytest.raises(SystemExit) as e:
        cli_main(["rl", "validate", "--config", str(bad)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error:" in err and "num_generations" in err and "Traceback" not in err
