"""Every shipped RL / DeepSpeed / accelerate config is consistent, and `rl validate` catches broken ones."""

import json
from pathlib import Path

import pytest
import yaml

from sculptor_rl.cli import main as cli_main
from sculptor_rl.train.rl import SculptorGRPOConfig, check_config, main
from sculptor_rl.train.rl_config import plan

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*/rl_*.yaml")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_rl_config_validates(path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # configs name their files relative to the repo
    main(["validate", "--config", str(path)])
    out = capsys.readouterr().out
    assert "config OK" in out and "objective" in out


@pytest.mark.parametrize("path", sorted((ROOT / "configs/accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_config_points_at_a_deepspeed_config_with_auto_batches(path):
    cfg = yaml.safe_load(path.read_text())
    assert cfg["num_processes"] >= 1 and cfg["distributed_type"] in ("DEEPSPEED", "MULTI_GPU", "FSDP")
    if cfg["distributed_type"] == "FSDP":  # FSDP2, saving whole HF checkpoints
        assert cfg["fsdp_config"]["fsdp_version"] == 2
        assert cfg["fsdp_config"]["fsdp_state_dict_type"] == "FULL_STATE_DICT"
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
    (dict(memory_updates="rules", per_device_train_batch_size=8), "the acm environment keeps none"),
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


GPU_RECIPES = ["acm/rl_qwen3_0.6b_gspo.yaml", "acm/rl_qwen3_1.7b_gspo.yaml", "acm/rl_qwen3_4b_gspo_lora.yaml",
               "acm/rl_qwen3_8b_gspo.yaml", "tamem/rl_qwen3_8b.yaml"]


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_gpu_recipe_validates_offline_saying_what_it_did_not_check(name, capsys, monkeypatch):
    """The Hub cannot be reached in the tests: validate says which checks needed the model's files, and runs the
    rest (report_to, precision, the config's own checks)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    main(["validate", "--config", f"configs/{name}"])
    out = capsys.readouterr().out
    assert "check        report_to: tensorboard (installed)" in out and "check        precision: bf16" in out
    assert "max_model_len: NOT checked" in out and "chat template: NOT checked" in out and "config OK" in out


def test_single_gpu_recipes_colocate_with_sleep_mode():
    recipes = {n: yaml.safe_load((ROOT / "configs" / n).read_text()) for n in GPU_RECIPES[:3]}
    assert [r["model"] for r in recipes.values()] == ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B"]
    assert all(r["vllm_mode"] == "colocate" and r["vllm_enable_sleep_mode"] and "deepspeed" not in r
               for r in recipes.values())
    assert [bool(r.get("use_peft")) for r in recipes.values()] == [False, False, True]  # full, full, LoRA


def test_validate_fails_on_an_integration_that_is_not_installed(tmp_path, capsys):
    """The Qwen3-8B recipe as it stood (report_to: [tensorboard, wandb], wandb not installed): one clear error
    before any model loads, where it used to say "config OK" and fail in WandbCallback after loading 8B."""
    from transformers.integrations import is_wandb_available

    if is_wandb_available():
        pytest.skip("wandb is installed here")
    recipe = yaml.safe_load((ROOT / "configs/acm/rl_qwen3_8b_gspo.yaml").read_text())
    recipe["report_to"] = ["tensorboard", "wandb"]
    path = tmp_path / "qwen3_8b_wandb.yaml"
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(SystemExit) as e:
        cli_main(["rl", "validate", "--config", str(path)])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "error: report_to: wandb is not installed (pip install 'sculptor-rl[wandb]'" in err


def test_report_to_defaults_to_the_installed_integrations():
    from transformers.integrations import get_available_reporting_integrations

    expected = [n for n in ("tensorboard", "wandb", "trackio") if n in get_available_reporting_integrations()]
    assert SculptorGRPOConfig(output_dir="/tmp/unused", tasks="t.jsonl", use_cpu=True).report_to == expected


def test_validate_checks_max_model_len_and_the_template_against_the_model(tmp_path, capsys, model_path):
    """On a local model: a max_model_len above its context fails (vLLM would refuse it), and a chat template that
    cannot render tool turns is reported as a validation error."""
    import shutil

    base = dict(tasks="t.jsonl", output_dir=str(tmp_path / "out"), model=model_path, report_to="none")
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({**base, "max_model_len": 8192}))
    main(["validate", "--config", str(good)])
    out = capsys.readouterr().out
    assert "max_model_len: 8192 within" in out and "the hermes parser reads both calls back" in out
    qwen3 = tmp_path / "qwen3.yaml"  # the GPU recipes' template family (its official template, the same tokens)
    qwen3.write_text(yaml.safe_dump({**base, "chat_template": str(ROOT / "tests/data/templates/qwen3.jinja")}))
    main(["validate", "--config", str(qwen3)])
    assert "the hermes parser reads both calls back" in capsys.readouterr().out

    long = tmp_path / "long.yaml"
    long.write_text(yaml.safe_dump({**base, "max_model_len": 131072}))
    with pytest.raises(SystemExit) as e:
        main(["validate", "--config", str(long)])
    assert "max_model_len 131072 is above" in str(e.value.code) and "of 8192 tokens" in str(e.value.code)

    broken = tmp_path / "broken-template"
    shutil.copytree(model_path, broken, ignore=shutil.ignore_patterns("*.safetensors"))
    (broken / "chat_template.jinja").write_text(  # renders calls (Hermes blocks), raises on a tool turn
        "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tool role') }}{% endif %}"
        "{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
        "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**base, "model": str(broken), "parser": "hermes"}))
    with pytest.raises(SystemExit) as e:
        main(["validate", "--config", str(bad)])
    assert "chat template: rendering a two-step tool conversation raised" in str(e.value.code)
    assert "no tool role" in str(e.value.code)


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*/rl_*.yaml")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_rl_configs_train_the_papers_objective_unless_they_say_why(path):
    """The default (`SculptorGRPOConfig`) and every shipped config: one ratio over a rollout's samples (eq. 2) and
    each rollout one term (eq. 1); a config that differs says why in a comment."""
    defaults = config()
    assert (defaults.importance_sampling_level, defaults.loss_weighting) == ("rollout", "per-rollout")
    cfg = yaml.safe_load(path.read_text())
    objective = (cfg.get("importance_sampling_level", "rollout"), cfg.get("loss_weighting", "per-rollout"))
    assert objective == ("rollout", "per-rollout") or "not the paper's objective" in path.read_text()
