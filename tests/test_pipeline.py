"""The quickstart pipeline's light stages, resume included (SFT, RL and eval are tested on their own)."""

import json

from sculptor_rl.pipeline import PipelineConfig, run_pipeline


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
