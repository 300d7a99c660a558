"""One way to load a config (sculptor_rl.config): one clear error naming the file and the key on an unknown key
or a wrong type, for every command; and every file in configs/ and slurm/ loads with the command that reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sculptor_rl.config import check_values, load_config, parse_command
from sculptor_rl.envs import params_of
from sculptor_rl.eval.run import EvalConfig, eval_tasks
from sculptor_rl.eval.run import check_config as check_eval_config
from sculptor_rl.pipeline import PipelineConfig
from sculptor_rl.serve import ServeConfig
from sculptor_rl.slurm import SlurmConfig, render
from sculptor_rl.train.rl_config import SculptorGRPOConfig, check_config
from sculptor_rl.train.sft import SculptorSFTConfig

ROOT = Path(__file__).resolve().parents[1]
CPU = {"use_cpu": True}  # TrainingArguments' device checks on this CPU box


def check_rl(path: Path) -> None:
    cfg = load_config(SculptorGRPOConfig, path, CPU)
    check_config(cfg)
    assert cfg.max_completion_length == cfg.max_new_tokens and cfg.vllm_max_model_length == cfg.max_model_len


def check_sft(path: Path) -> None:
    load_config(SculptorSFTConfig, path, CPU)


def check_eval(path: Path) -> None:
    cfg = EvalConfig.from_yaml(path, num=1)
    check_eval_config(cfg)
    assert eval_tasks(cfg)


def check_serve(path: Path) -> None:
    cfg = parse_command(ServeConfig, ["--config", str(path)])
    params_of(cfg.environment, cfg.environment_params)


def check_pipeline(path: Path) -> None:
    full = PipelineConfig.from_yaml(path)
    for cfg in full.recipes():
        check_eval_config(load_config(EvalConfig, None, {**cfg.eval, "tasks": cfg.eval_families}, "pipeline eval"))
        load_config(SculptorSFTConfig, ROOT / cfg.sft_config, {**cfg.sft, **CPU})
        check_config(load_config(SculptorGRPOConfig, ROOT / cfg.rl_config, {**cfg.rl, **CPU, "tasks": "t.jsonl"}))


def check_accelerate(path: Path) -> None:
    cfg = yaml.safe_load(path.read_text())
    if "deepspeed_config" in cfg:
        assert (ROOT / cfg["deepspeed_config"]["deepspeed_config_file"]).exists()


def check_deepspeed(path: Path) -> None:
    assert json.loads(path.read_text())["zero_optimization"]["stage"] in (0, 1, 2, 3)


def check_slurm(path: Path) -> None:
    cfg = SlurmConfig.from_yaml(path)
    assert render(cfg).startswith("#!/bin/bash")
    check_rl(ROOT / cfg.config) if cfg.job == "rl" else check_sft(ROOT / cfg.config)


# configs/<environment>/<stage>[_<variant>].yaml: the stage's command reads it
STAGES = {"rl": check_rl, "sft": check_sft, "eval": check_eval, "serve": check_serve}
ENVIRONMENTS = ("acm", "memtool", "memtoolagent", "tamem", "toolmem")
CHECKS = {"configs/accelerate": check_accelerate, "configs/deepspeed": check_deepspeed, "slurm": check_slurm,
          "configs/quickstart.yaml": check_pipeline, "configs/quickstart_gpu.yaml": check_pipeline,
          "configs/long_cpu.yaml": check_pipeline, "configs/paper_protocol.yaml": check_pipeline,
          "configs/paper_protocol_gpu.yaml": check_pipeline, "configs/paradigms.yaml": check_eval}
FILES = sorted(p for d in ("configs", "slurm") for p in (ROOT / d).rglob("*") if p.is_file())


def checker(rel: str):
    parts = rel.split("/")
    if len(parts) == 3 and parts[0] == "configs" and parts[1] in ENVIRONMENTS:
        return STAGES.get(parts[2].removesuffix(".yaml").split("_")[0])
    return next((check for k, check in CHECKS.items() if rel == k or rel.startswith(k + "/")), None)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_config_loads(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # configs name each other relative to the repository
    rel = str(path.relative_to(ROOT))
    check = checker(rel)
    assert check, f"{rel}: no command reads this file (configs/<environment>/<stage>_*.yaml, or add it to CHECKS)"
    check(path)


@pytest.mark.parametrize("kind,text,message", [
    (EvalConfig, "modes: [acm]\nmax_new_token: 64\n", "unknown key 'max_new_token' for EvalConfig (did you mean "
                                                       "'max_new_tokens'?)"),
    (EvalConfig, "num: eight\n", "key 'num': expected int | None, got 'eight' (str)"),
    (EvalConfig, "temperature: [0]\n", "key 'temperature': expected float"),
    (SculptorGRPOConfig, "env: memtool\n", "unknown key 'env' for SculptorGRPOConfig (did you mean 'environment'?)"),
    (SculptorGRPOConfig, "max_tool_calls: '20'\n", "key 'max_tool_calls': expected int, got '20' (str)"),
    (SculptorGRPOConfig, "use_peft: yes please\n", "key 'use_peft': expected bool"),
    (SculptorSFTConfig, "lora_rank: 8\n", "unknown key 'lora_rank' for SculptorSFTConfig"),
    (ServeConfig, "port: 80.5\n", "key 'port': expected int"),
    (PipelineConfig, "train_tasks: [1]\n", "key 'train_tasks': expected int"),
    (SlurmConfig, "nodes: two\n", "key 'nodes': expected int"),
])
def test_unknown_key_or_wrong_type_names_the_file_and_the_key(kind, text, message, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        if kind in (SculptorGRPOConfig, SculptorSFTConfig, ServeConfig):
            parse_command(kind, ["--config", str(path)])
        else:
            load_config(kind, path)
    assert str(e.value) == f"{path}: {message}" or str(e.value).startswith(f"{path}: {message}")


def test_the_commands_report_it_in_one_line(tmp_path, capsys):
    from sculptor_rl.cli import main

    path = tmp_path / "rl.yaml"
    path.write_text("tasks: t.jsonl\nmax_new_tokens: many\n")
    for argv in (["rl", "validate", "--config", str(path)], ["eval", "--config", str(path)],
                 ["sft", "--config", str(path)], ["serve", "--config", str(path)]):
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {path}: ") and len(err.splitlines()) == 1, err


def test_overrides_are_checked_too_and_a_non_mapping_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="pipeline eval: unknown key 'loop' for EvalConfig"):
        load_config(EvalConfig, None, {"loop": {"max_new_tokens": 8}}, "pipeline eval")
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ValueError, match=f"{path}: a config file must hold a mapping of settings, got list"):
        load_config(EvalConfig, path)
    assert load_config(EvalConfig, None, {"num": None}).num is None  # None: an unset flag


def test_rl_keeps_trls_fields_in_step_with_the_shared_names():
    cfg = SculptorGRPOConfig(output_dir="/tmp/unused", max_new_tokens=64, max_model_len=2048, **CPU)
    assert (cfg.max_completion_length, cfg.vllm_max_model_length) == (64, 2048)
    with pytest.raises(ValueError, match="set max_new_tokens .the name rl, eval and serve share., not TRL's "
                                         "max_completion_length"):
        SculptorGRPOConfig(output_dir="/tmp/unused", max_completion_length=100, **CPU)


def test_check_values_on_a_plain_dataclass():
    from dataclasses import dataclass

    @dataclass
    class C:
        n: int = 1
        names: list[str] | None = None

    check_values(C, {"n": 2, "names": ["a"]}, "x.yaml")
    with pytest.raises(ValueError, match="x.yaml: key 'names': expected list"):
        check_values(C, {"names": [1]}, "x.yaml")


def test_eval_flags_override_the_config(tmp_path, monkeypatch):
    """--max-tool-calls and --temperature reach the EvalConfig over the YAML's values; unset flags keep them."""
    import sculptor_rl.eval.run as run
    from sculptor_rl.cli import main

    seen = []

    def capture(cfg):
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(run, "evaluate", capture)
    path = tmp_path / "eval.yaml"
    path.write_text("max_tool_calls: 8\ntemperature: 0.0\nmax_new_tokens: 160\n")
    with pytest.raises(SystemExit):
        main(["eval", "--config", str(path), "--max-tool-calls", "3", "--temperature", "0.7", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["eval", "--config", str(path), "--out", str(tmp_path)])
    assert [(c.max_tool_calls, c.temperature, c.max_new_tokens) for c in seen] == [(3, 0.7, 160), (8, 0.0, 160)]


@pytest.mark.parametrize("text,message", [
    ("small_recipe: {train_task: 3}\n", "(small_recipe): unknown key 'train_task' for PipelineConfig (did you mean "
                                        "'train_tasks'?)"),
    ("small_recipe: {sft: {num_epochs: 1}}\n", "(small_recipe sft): unknown key 'num_epochs'"),
    ("small_recipe: {heldout: [pi_lm]}\n", "unknown task family 'pi_lm'"),
    ("eval: {checkpoint_modes: acm}\n", "(eval): key 'checkpoint_modes': expected list"),
])
def test_a_pipelines_small_recipe_is_checked_when_the_config_is_read(text, message, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        PipelineConfig.from_yaml(str(path))
    assert message in str(e.value)
