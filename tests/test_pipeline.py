"""The quickstart pipeline's light stages, resume included (SFT, RL and eval are tested on their own)."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.pipeline import PipelineConfig, run_pipeline
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
