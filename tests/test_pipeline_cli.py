"""`sculptor-rl pipeline --model M --environment E`: a user's model folder (a tiny Qwen3 with Qwen3's official chat
template) and a user's environment (the calculator example, installed by entry point, named by import path), from
`--dry-run` to the report, each a fresh process; every setting from the command line (`--set key.sub=value`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_example_env import run, site, tiny_qwen3  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
CALCULATOR = "sculptor_calculator:CalculatorEnv"
# tiny budgets: 4 teacher rollouts for SFT (one epoch), one GSPO step of 2 rollouts on the HF engine, 3 held-out tasks
TINY = ["train_tasks=4", "rl_tasks=4", "eval_tasks=3", "teacher_tasks=3", "sft.num_train_epochs=1", "sft.bf16=false",
        "rl.max_steps=1", "rl.engine=hf", "rl.num_generations=2", "rl.gradient_accumulation_steps=2",
        "rl.max_new_tokens=16", "rl.bf16=false", "rl.report_to=[]", "eval.engine=hf", "eval.max_new_tokens=16"]


def pipeline(site, tmp_path, *args: str, timeout: int = 600):
    sets = [x for s in [f"runs_dir={tmp_path / 'runs'}", "name=calc", *TINY] for x in ("--set", s)]
    return run(site, ["-m", "sculptor_rl.cli", "pipeline", *args, *sets], ROOT, timeout)


def test_a_user_model_and_environment_from_dry_run_to_report(site, tmp_path, tiny_qwen3):  # noqa: F811
    out = pipeline(site, tmp_path, "--model", tiny_qwen3, "--environment", CALCULATOR, "--dry-run")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "a task of sum made and its scripted teacher found" in out.stdout
    assert "rl: configs/acm/rl_quickstart_cpu.yaml OK (1 steps)" in out.stdout
    assert "eval: modes calculator on sum OK" in out.stdout
    assert "chat template: renders a two-step tool conversation; the hermes parser reads both calls back" in out.stdout
    assert out.stdout.rstrip().endswith("nothing was run") and not (tmp_path / "runs").exists()

    # a wrong key or value stops the dry run in one line, naming it
    bad = pipeline(site, tmp_path, "--model", tiny_qwen3, "--environment", CALCULATOR, "--dry-run",
                   "--set", "rl.max_stepz=1")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "unknown key 'max_stepz'" in bad.stderr and "did you mean 'max_steps'" in bad.stderr
    bad = pipeline(site, tmp_path, "--model", tiny_qwen3, "--environment", CALCULATOR, "--dry-run",
                   "--set", "task=product")
    assert bad.returncode == 2 and "add 'product' to CalculatorEnv.task_families" in bad.stderr
    assert not (tmp_path / "runs").exists()

    out = pipeline(site, tmp_path, "--model", tiny_qwen3, "--environment", CALCULATOR)
    assert out.returncode == 0, out.stderr[-4000:]
    root = tmp_path / "runs" / "calc"
    train = [json.loads(line) for line in (root / "data" / "train.jsonl").read_text().splitlines()]
    assert len(train) == 4 and {t["task"] for t in train} == {"sum"}
    assert json.loads((root / "collect" / "done.json").read_text())["trajectories"] == 4  # the teacher: all right
    # the SFT and GSPO checkpoints carry the model's own (official) template
    official = (ROOT / "tests/data/templates/qwen3.jinja").read_text()
    for stage in ("sft", "rl"):
        assert (root / stage / "final" / "chat_template.jinja").read_text() == official
    results = json.loads((root / "eval" / "results.json").read_text())
    assert results["modes"] == ["calculator"] and len(results["models"]) == 3
    report = (root / "report.md").read_text()
    assert "| sum | 3 | 1.000 |" in report  # the teachers' table: the calculator's own teacher
    assert "## Evaluation on held-out tasks" in report and "| calculator |" in report


@pytest.mark.slow
def test_the_embedded_model_and_a_builtin_environment_from_dry_run_to_report(tmp_path, model_path):
    """The same command with the defaults: the embedded SmolLM2-135M (no --model) and the acm environment (the
    quickstart's config), at tiny budgets."""
    sets = [f"runs_dir={tmp_path / 'runs'}", "name=acm", "budget_minutes=null", "train_tasks=2", "rl_tasks=2",
            "eval_tasks=2", "teacher_tasks=2", "task_params.keys=2", "task_params.updates=4", "sft.max_steps=2",
            "rl.max_steps=1", "rl.engine=hf", "rl.num_generations=2", "rl.gradient_accumulation_steps=2",
            "rl.max_new_tokens=16", "rl.report_to=[]", "eval.engine=hf", "eval.max_new_tokens=16",
            "eval.max_tool_calls=2"]
    args = ["-m", "sculptor_rl.cli", "pipeline", "--environment", "acm", *(x for s in sets for x in ("--set", s))]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, *args, "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "a task of pi_llm, needlebench, mrcr, babilong, gsm_infinite made" in out.stdout
    assert "eval: modes acm, full on pi_llm OK" in out.stdout and not (tmp_path / "runs").exists()
    out = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-4000:]
    root = tmp_path / "runs" / "acm"
    results = json.loads((root / "eval" / "results.json").read_text())
    assert len(results["models"]) == 3 and results["modes"] == ["acm", "full"]
    report = (root / "report.md").read_text()
    assert "| pi_llm | 2 | 1.000 |" in report  # the scripted teachers' table
    assert "## Evaluation on held-out tasks" in report


def test_a_named_template_renders_every_stage(site, tmp_path, tiny_qwen3):  # noqa: F811
    """`chat_template: qwen3_append_only` (the paper protocol's) on a model whose own template is Qwen3's official
    one: the teachers, collect, SFT, GSPO and eval all render with the variant, and both checkpoints keep it."""
    from sculptor_rl.agent.chat import ChatFormat

    variant = ChatFormat.from_pretrained(tiny_qwen3, "qwen3_append_only")
    assert variant.provenance != ChatFormat.from_pretrained(tiny_qwen3).provenance
    out = pipeline(site, tmp_path, "--model", tiny_qwen3, "--environment", CALCULATOR,
                   "--set", "chat_template=qwen3_append_only")
    assert out.returncode == 0, out.stderr[-4000:]
    root = tmp_path / "runs" / "calc"
    made_by = {}  # every record that says which tokenizer and template made its ids, by file
    for path in root.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if isinstance(record, dict) and record.get("tokenizer"):
                made_by.setdefault(str(path.relative_to(root)), set()).add(record["tokenizer"]["hash"])
    stages = {name.split("/")[0] for name in made_by}
    assert {"teachers", "collect", "eval"} <= stages, made_by
    assert all(hashes == {variant.provenance["hash"]} for hashes in made_by.values()), made_by
    for stage in ("sft", "rl"):
        assert (root / stage / "final" / "chat_template.jinja").read_text() == variant.template


def test_a_dry_run_outside_a_clone_finds_the_shipped_configs_and_probes_on_a_cpu(tmp_path, model_path):
    """`pipeline --dry-run` from a folder that is not the repository: the quickstart's config and its SFT and RL
    configs come from the installed package's source tree; with no GPU (hidden) the probe sizes the recipe."""
    from sculptor_rl.config import SOURCE_TREE

    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-m", "sculptor_rl.cli", "pipeline", "--dry-run", "--set",
                          f"runs_dir={tmp_path / 'runs'}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (f"recipe: CPU (no CUDA device): {SOURCE_TREE / 'configs/quickstart.yaml'}; the probe picks it or a "
            "smaller one at the start (budget_minutes 30)") in out.stdout
    for recipe in ("config", "small recipe", "smaller recipe"):  # every recipe the probe may choose
        assert f"{recipe}: sft: configs/acm/sft_quickstart_cpu.yaml OK" in out.stdout
    assert "dry run: every stage's config checked" in out.stdout and not (tmp_path / "runs").exists()
