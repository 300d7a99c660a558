"""The quickstart pipeline's light stages, resume included (SFT, RL and eval are tested on their own)."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.pipeline import RECIPES, STAGES, PipelineConfig, run_pipeline
from sculptor_rl.envs.tasks import generate


def test_stages_write_their_outputs_and_are_skipped_when_done(tmp_path, capsys, model_path):
    cfg = PipelineConfig(name="t", runs_dir=str(tmp_path), task_params={"keys": 2, "updates": 24}, train_tasks=3,
                         eval_tasks=2, rl_tasks=2, teacher_tasks=2)
    root = run_pipeline(cfg, ["data", "teachers", "collect", "report"])
    out = capsys.readouterr().out
    assert "| pi_llm | 2 | 1.000 |" in out  # the teachers' table
    collect = json.loads((root / "collect" / "done.json").read_text())
    assert collect["trajectories"] == 3 and collect["samples"] == 9  # fragment, fold, answer per rollout
    report = (root / "report.md").read_text()
    assert "| teachers |" in report and "Scripted teachers" in report

    run_pipeline(cfg, ["data", "teachers"])
    assert "[1/7] data: done already" in capsys.readouterr().out


ABLATION = Path(__file__).resolve().parents[1] / "scripts" / "gspo_ablation.sh"


@pytest.mark.slow  # four `sculptor-rl rl validate` processes, ~55 s
def test_the_gspo_ablation_script_plans_four_variants_from_one_start(tmp_path, model_path):
    """scripts/gspo_ablation.sh with DRY_RUN=1: `rl validate` of each variant (level x weighting) from the same
    SFT start and RL tasks, the step count passed through; and a missing start is a clear error."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("rl", "eval"):
        write_jsonl(generate("pi_llm", 2, seed=0, keys=2, updates=8), data / f"{split}.jsonl")
    env = {**os.environ, "SFT": model_path, "DATA": str(data), "OUT": str(tmp_path / "ablation"), "DRY_RUN": "1"}
    proc = subprocess.run([str(ABLATION), "3"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    plans = proc.stdout.split("config OK")[:-1]
    objectives = [re.search(r"^objective +(.*)$", p, re.M)[1] for p in plans]
    assert [("per sample" in o, "over a rollout's samples" in o, "per-rollout" in o) for o in objectives] == [
        (True, False, False), (True, False, True), (False, True, False), (False, True, True)]
    for plan, variant in zip(plans, ["sequence-per-sample", "sequence-per-rollout", "rollout-per-sample",
                                     "rollout-per-rollout"]):
        assert re.search(rf"^model +{re.escape(model_path)}$", plan, re.M)
        assert re.search(rf"^tasks +{re.escape(str(data / 'rl.jsonl'))},", plan, re.M)
        assert "max_steps 3" in plan and f"ablation/{variant}" in plan
        # the round size and learning rate of the README's ablation table, whatever the long recipe's are now
        assert "= 2 task(s) x 4 generations" in plan and "lr 1e-05;" in plan
    assert not (tmp_path / "ablation").exists()  # a dry run trains nothing

    proc = subprocess.run([str(ABLATION)], env={**env, "SFT": str(tmp_path / "none")}, capture_output=True, text=True)
    assert proc.returncode == 2 and f"missing {tmp_path / 'none'}/config.json" in proc.stderr


def test_a_training_mix_and_heldout_families(tmp_path):
    """The paper's protocol: training and RL tasks drawn from a mix of families by weight (interleaved), held-out
    tasks from other families with their own parameters and another seed; unknown families fail before any stage."""
    from sculptor_rl.envs.tasks import load_tasks

    cfg = PipelineConfig(name="mix", runs_dir=str(tmp_path), train_mix={"babilong": 2.0, "gsm_infinite": 1.0},
                         heldout=["pi_llm", "mrcr"], family_params={"babilong": {"context_tokens": 300},
                                                                   "pi_llm": {"keys": 2, "updates": 8}},
                         train_tasks=4, rl_tasks=6, eval_tasks=3)
    root = run_pipeline(cfg, ["data"])
    train = load_tasks(root / "data" / "train.jsonl")
    rl = load_tasks(root / "data" / "rl.jsonl")
    held = load_tasks(root / "data" / "eval.jsonl")
    assert [t["task"] for t in train] == ["babilong", "babilong", "gsm_infinite", "babilong"]  # 2.67 : 1.33 -> 3 : 1
    assert [t["task"] for t in rl] == ["babilong", "gsm_infinite", "babilong", "babilong", "gsm_infinite", "babilong"]
    assert [t["task"] for t in held] == ["pi_llm"] * 3 + ["mrcr"] * 3
    assert all((t["meta"]["keys"], t["meta"]["updates"]) == (2, 8) for t in held[:3])
    assert not {t["id"] for t in held} & {t["id"] for t in train + rl}
    assert all(t["meta"]["context_tokens"] == 300 for t in train if t["task"] == "babilong")

    for bad, message in [({"heldout": ["pi_lm"]}, "unknown task family 'pi_lm'"),
                         ({"train_mix": {"babilong": 0.0}}, "positive sum")]:
        with pytest.raises(ValueError, match=message):
            run_pipeline(PipelineConfig(name="bad", runs_dir=str(tmp_path), **bad), ["data"])
    assert not (tmp_path / "bad").exists()


def test_the_probe_chooses_the_recipe_that_fits_and_a_resumed_run_keeps_it(tmp_path, capsys, caplog, model_path):
    """With `budget_minutes`, the probe's estimate is printed and saved; over budget the small recipe is followed
    (its data is the small one's), and over budget again the smaller one it holds (here without GSPO: its stage is
    skipped); a resumed run follows the saved choice without probing again."""
    from sculptor_rl.envs.tasks import load_tasks

    no_rl = [s for s in STAGES if s != "rl"]
    small = {"train_tasks": 2, "task_params": {"keys": 1, "updates": 2}, "eval_checkpoints": ["sft"],
             "small_recipe": {"stages": no_rl}}
    cfg = PipelineConfig(name="tight", runs_dir=str(tmp_path), task_params={"keys": 2, "updates": 4}, train_tasks=4,
                         eval_tasks=2, rl_tasks=2, budget_minutes=0.01, small_recipe=small)
    root = run_pipeline(cfg, ["data"])
    out = capsys.readouterr().out
    assert re.search(r"probe \(\d+ s, (bf16|fp32)\): a training step of \d+ tokens [\d.]+ s", out)
    assert "estimated minutes, full recipe: data, teachers, collect 0.3, sft " in out
    assert "estimated minutes, small recipe:" in out and "following the small recipe (train_tasks: 2," in out
    assert "following the smaller recipe (stages: ['data', 'teachers', 'collect', 'sft', 'eval', 'report'])" in out
    assert "slower than the budget allows" in caplog.text  # not even the smallest fits 0.01 minutes
    plan = json.loads((root / "plan.json").read_text())
    assert plan["recipe"] == "smaller" and list(plan["estimate"]) == ["full", "small", "smaller"]
    full, reduced, least = plan["estimate"]["full"], plan["estimate"]["small"], plan["estimate"]["smaller"]
    assert 0 < reduced["sft"] < full["sft"]  # half the teacher rollouts, shorter samples
    assert 0 < reduced["eval"] < full["eval"]  # shorter prompts, the GSPO checkpoint not evaluated
    assert reduced["rl"] > 0 and least["rl"] == 0 and least["sft"] == reduced["sft"]
    assert len(load_tasks(root / "data" / "train.jsonl")) == 2

    run_pipeline(cfg, ["data", "rl", "report"])
    out = capsys.readouterr().out
    assert "recipe: smaller, as chosen when this run started" in out and "probe (" not in out
    assert "[5/7] rl: not in this recipe, skipped" in out and not (root / "rl").exists()
    assert "Recipe: **smaller** (budget 0.01 minutes)" in (root / "report.md").read_text()


def test_small_recipes_nest_and_are_checked_when_the_config_is_read(tmp_path):
    """Each `small_recipe` replaces the recipe before it, the one it holds next; nesting past `RECIPES` and a
    recipe that evaluates a stage it leaves out are refused."""
    cfg = PipelineConfig(train_tasks=8, small_recipe={"train_tasks": 4, "small_recipe": {"stages": ["data"],
                                                                                          "eval_checkpoints": []}})
    full, small, smaller = cfg.recipes()
    assert (full.train_tasks, small.train_tasks, smaller.train_tasks) == (8, 4, 4)
    assert small.stages == STAGES and smaller.stages == ["data"] and smaller.small_recipe == {}
    deep = {}
    for _ in RECIPES:
        deep = {"train_tasks": 2, "small_recipe": deep} if deep else {"train_tasks": 2}
    with pytest.raises(ValueError, match="small_recipe: at most 3 nested"):
        PipelineConfig(small_recipe=deep).recipes()
    path = tmp_path / "p.yaml"
    path.write_text("small_recipe: {small_recipe: {stages: [data, sft, eval]}}\n")
    with pytest.raises(ValueError, match="eval_checkpoints: rl is not among this recipe's stages"):
        PipelineConfig.from_yaml(str(path))
    path.write_text("small_recipe: {small_recipe: {stage: [data]}}\n")
    with pytest.raises(ValueError, match=r"\(small_recipe small_recipe\): unknown key 'stage'"):
        PipelineConfig.from_yaml(str(path))



def test_a_null_on_the_command_line_unsets_the_files_value():
    """`--set budget_minutes=null` runs the recipe as configured (no probe), whatever the file sets."""
    assert PipelineConfig.from_yaml("configs/quickstart.yaml").budget_minutes == 30
    assert PipelineConfig.from_yaml("configs/quickstart.yaml", {"budget_minutes": None}).budget_minutes is None


def test_estimate_is_the_probe_times_the_recipe_times_the_reference_ratios():
    from sculptor_rl.probe import REFERENCE, Probe, RecipeShape, estimate

    p = Probe("fp32", train_tokens=1000, train_s=2.0, prompt_tokens=2000, forward_s=0.5, seconds=9.0)
    shape = RecipeShape(samples_per_rollout=3.0, sample_tokens=1500, prompt_tokens=1600, prompt_new_tokens=1000)
    got = estimate(p, shape, train_tasks=10, epochs=2, rl_steps=4, eval_runs={"once": 300, "tools": 200})
    start = REFERENCE["engine_start"] * 0.5
    assert got["sft"] == pytest.approx(10 * 3 * 2 * REFERENCE["sft_step"] * 3.0)
    assert got["rl"] == pytest.approx(start + (REFERENCE["rl_start"] + 4 * REFERENCE["rl_step"]) * 3.0)
    assert got["eval"] == pytest.approx(start + (300 * REFERENCE["eval_once"] + 200 * REFERENCE["eval_tools"]) * 0.25)
    assert estimate(p, shape, 10, 2, 0, {"once": 1})["rl"] == 0.0


def test_the_report_says_what_the_rl_stage_showed(tmp_path):
    """The paired SFT → GSPO comparison in acm mode, said plainly: a gain where p < 0.05, else that the stage showed
    the loop running end to end, not a gain."""
    cfg = PipelineConfig(name="r", runs_dir=str(tmp_path))
    (tmp_path / "r" / "eval").mkdir(parents=True)

    def report(p):
        acc = {"diff": 0.043, "ci": [0.014, 0.073], "p": p}
        results = {"models": ["base", "sft/final", "rl/final"], "comparisons": [
            {"mode": "full", "a": "sft/final", "b": "rl/final", "task": "pi_llm", "n": 9, "accuracy": acc},
            {"mode": "acm", "a": "sft/final", "b": "rl/final", "task": "pi_llm", "n": 300, "accuracy": acc}]}
        (tmp_path / "r" / "eval" / "results.json").write_text(json.dumps(results))
        for done in (tmp_path / "r").glob("report/done.json"):
            done.unlink()
        return (run_pipeline(cfg, ["report"]) / "report.md").read_text()

    assert ("GSPO changed held-out accuracy measurably over SFT: +4.3 points [+1.4, +7.3], p = 0.004 (paired, 300 "
            "tasks)") in report(0.004)
    assert "GSPO did not change held-out accuracy measurably over SFT: +4.3 points" in report(0.2)
    assert "not a gain" in report(0.2)

    cfg = PipelineConfig(name="r", runs_dir=str(tmp_path), rl={"max_steps": 2}, eval_checkpoints=["sft"])
    text = report(0.2)
    assert "GSPO ran 2 steps" in text and "does not evaluate its checkpoint on the held-out tasks" in text
    assert "over SFT" not in text

    cfg = PipelineConfig(name="r", runs_dir=str(tmp_path), eval_checkpoints=["sft"],
                         stages=[s for s in STAGES if s != "rl"])
    text = report(0.2)
    assert "This recipe leaves the GSPO stage out" in text and "GSPO ran" not in text


def test_eval_checkpoints_are_the_trained_stages_only():
    PipelineConfig(eval_checkpoints=[]).check()  # the base model alone
    with pytest.raises(ValueError, match=r"eval_checkpoints: a list of sft, rl, got \['base'\]"):
        PipelineConfig(eval_checkpoints=["base"]).check()


def test_every_training_stage_gets_the_runs_chat_format(tmp_path):
    """The SFT stage trains in the chat template (its kwargs, its parser) the samples were made with, as the RL
    and eval stages do: with `qwen3_append_only` its own SFT would otherwise refuse the samples."""
    from sculptor_rl.pipeline import _rl_config, _sft_config

    cfg = PipelineConfig(name="fmt", runs_dir=str(tmp_path), chat_template="qwen3_append_only",
                         chat_template_kwargs={"enable_thinking": False}, parser="hermes")
    for stage in (_sft_config(cfg, tmp_path / "s.jsonl", tmp_path / "sft"),
                  _rl_config(cfg, None, tmp_path / "t.jsonl", tmp_path / "rl")):
        assert (stage.chat_template, stage.chat_template_kwargs, stage.parser) == (
            "qwen3_append_only", {"enable_thinking": False}, "hermes")


def test_a_checkpoint_keeps_its_chat_settings_for_rl_eval_and_serve(model_path, tmp_path):
    """`save_final` writes the template kwargs and parser beside the tokenizer (which holds the template); a later
    stage reading the checkpoint without flags gets the same format (same provenance), flags still win."""
    from sculptor_rl.agent.chat import ChatFormat

    trained = ChatFormat.from_pretrained(model_path, chat_template_kwargs={"mode": "terse"}, parser="hermes")
    trained.tokenizer.save_pretrained(tmp_path)
    trained.save_settings(tmp_path)
    again = ChatFormat.from_pretrained(str(tmp_path))
    assert (again.kwargs, again.parser_name) == ({"mode": "terse"}, "hermes")
    assert again.provenance["hash"] == trained.provenance["hash"]
    told = ChatFormat.from_pretrained(str(tmp_path), chat_template_kwargs={"mode": "long"})
    assert told.kwargs == {"mode": "long"}


# Qwen3's sizes (hidden, layers, intermediate, attention heads, tied embeddings): its 0.6B, 1.7B, 4B and 8B configs
QWEN3_SIZES = {"0.6B": (1024, 28, 3072, 16, True), "1.7B": (2048, 28, 6144, 16, True),
               "4B LoRA": (2560, 36, 9728, 32, True), "8B cluster": (4096, 36, 12288, 32, False)}


def _model_folder(path: Path, hidden, layers, intermediate, heads, tied) -> str:
    """A model folder holding only a config.json of these sizes (no weights)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": intermediate,
        "num_attention_heads": heads, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": tied}))
    return str(path)


def test_on_a_gpu_the_model_size_picks_the_sft_and_rl_configs(tmp_path, monkeypatch):
    from sculptor_rl.models import parameter_count
    from sculptor_rl.pipeline import SIZE_CLASSES, starting_config

    default = "configs/quickstart.yaml"
    for name, sizes in QWEN3_SIZES.items():
        model = _model_folder(tmp_path / name.replace(" ", "_"), *sizes)
        params, source = parameter_count(model)
        assert source == "estimated from its config.json"
        path, overrides, why = starting_config(None, default, {"model": model}, gpu=True)
        # the CPU recipe (its probe budget, its SFT epochs) is not where a GPU run starts from
        assert path is None, why
        assert overrides == {"model": model, "sft_config": SIZE_CLASSES[name]["sft_config"],
                             "rl_config": SIZE_CLASSES[name]["rl_config"]}, name
        assert f"size class {name}:" in why and f"{params / 1e9:.2f}B parameters" in why
        cfg = PipelineConfig.from_yaml(path, overrides)
        assert (cfg.sft_config, cfg.rl_config, cfg.budget_minutes) == (overrides["sft_config"],
                                                                      overrides["rl_config"], None)
    # Qwen3's published totals: 0.6B, 1.7B, 4.0B, 8.2B
    assert [round(parameter_count(str(tmp_path / n.replace(" ", "_")))[0] / 1e8) for n in QWEN3_SIZES] == \
        [6, 17, 40, 82]
    small = str(tmp_path / "0.6B")
    # --set wins over the class, key by key; a --config's keys win too
    _, overrides, why = starting_config(None, default, {"model": small, "rl_config": "mine.yaml"}, gpu=True)
    assert overrides["rl_config"] == "mine.yaml" and overrides["sft_config"] == SIZE_CLASSES["0.6B"]["sft_config"]
    assert "rl_config mine.yaml (--set)" in why
    path, overrides, why = starting_config("configs/paper_protocol_gpu.yaml", default, {"model": small}, gpu=True)
    assert path.endswith("configs/paper_protocol_gpu.yaml") and overrides == {"model": small}
    assert "no size class needed" in why
    # the device is asked at the boundary only: torch's answer when the caller does not say
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "size class 1.7B" in starting_config(None, default, {"model": str(tmp_path / "1.7B")})[2]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path, overrides, why = starting_config(None, default, {"model": str(tmp_path / "1.7B")})
    assert path.endswith(default) and overrides == {"model": str(tmp_path / "1.7B")}
    assert why.startswith("recipe: CPU (no CUDA device)") and "the probe picks it" in why
    # a folder with weights: the safetensors headers count exactly
    from safetensors.numpy import save_file
    import numpy as np

    weights = Path(_model_folder(tmp_path / "w", *QWEN3_SIZES["8B cluster"]))
    save_file({"a": np.zeros((3, 5), np.float32), "b": np.zeros(7, np.float32)}, str(weights / "model.safetensors"))
    assert parameter_count(str(weights)) == (22, "its safetensors headers")
    # a size that cannot be read names what to pass
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="--set sft_config=FILE --set rl_config=FILE"):
        starting_config(None, default, {"model": str(tmp_path / "bare")}, gpu=True)


def test_shipped_configs_are_found_from_any_folder_or_named_in_one_line(tmp_path, monkeypatch):
    from sculptor_rl import config
    from sculptor_rl.pipeline import starting_config

    monkeypatch.chdir(tmp_path)
    assert config.shipped("configs/quickstart.yaml") == str(config.SOURCE_TREE / "configs/quickstart.yaml")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "quickstart.yaml").write_text("name: mine\n")
    assert config.shipped("configs/quickstart.yaml") == "configs/quickstart.yaml"  # the folder's own first
    monkeypatch.chdir(tmp_path / "configs")
    monkeypatch.setattr(config, "SOURCE_TREE", tmp_path / "wheel")  # an install without the source tree
    with pytest.raises(ValueError, match=r"^configs/quickstart.yaml: not found .* pass --config FILE") as e:
        starting_config(None, "configs/quickstart.yaml", {}, gpu=False)
    assert "\n" not in str(e.value)
