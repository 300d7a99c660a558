"""`sculptor-rl eval --environment memtool` on the scripted teacher (no weights run, so it is fast): the three
modes, the paper's metrics per mode with the teacher's known numbers, the loaded-tools plot, resume, and bad input. The
measured runs of the embedded model (vLLM) are in the issue note; configs/memtool/eval_cpu.yaml holds them."""

import json
import logging
from types import SimpleNamespace

import pytest
from conftest import CountingTeacher

from sculptor_rl.cli import main
from sculptor_rl.envs.memtool.env import MODES
from sculptor_rl.eval.run import ACM_MODES, EvalConfig, _fingerprint, eval_tasks, evaluate
from sculptor_rl.envs.memtool.metrics import loaded_per_turn, report_table
from sculptor_rl.longcontext import FAMILIES
from sculptor_rl.envs.tasks import generate
from sculptor_rl.trajectory import read_trajectories


@pytest.fixture
def cfg(tmp_path, model_path):
    return EvalConfig(environment="memtool", num=3, out=str(tmp_path / "out"), sizes={"memtool": [
        {"requests": 3, "calls_per_request": 1}]}, max_tool_calls=30, max_new_tokens=256)


def test_memtool_modes_metrics_and_plot(cfg, tmp_path):
    results = evaluate(cfg, engine=CountingTeacher(eval_tasks(cfg)))
    out = tmp_path / "out"
    assert results["environment"] == "memtool" and results["tasks"] == ["memtool"]
    assert [run["mode"] for run in results["runs"]] == list(MODES)
    runs = {run["mode"]: run for run in results["runs"]}
    # the teacher, 3 requests x 1 call: autonomous searches (5 tools), calls, removes the 4 extras; it keeps the
    # previous request's tool one more turn. Workflow/hybrid prune before each request: 5, 1 + 5, 1 + 5 loaded.
    auto, flow = runs["autonomous"]["memtool"], runs["workflow"]["memtool"]
    assert auto["loaded_per_turn"] == [1.0, 2.0, 2.0] and flow["loaded_per_turn"] == [5.0, 6.0, 6.0]
    assert auto["removal_ratio"] == pytest.approx(13 / 15) and flow["removal_ratio"] == pytest.approx(9 / 15)
    assert auto["avg_removal_ratio_3t"] == pytest.approx(13 / 15) and flow["avg_removal_ratio_3t"] == pytest.approx(0.6)
    # 3 turns: no peak has 3 turns after it, so eq. 3 is undefined; the up-to-3 variant reads the next 1-2 turns
    assert auto["avg_residual_3t"] is None and auto["ci"]["avg_residual_3t"] is None
    assert auto["residual_after_peaks_upto3"] == 2.0 and flow["residual_after_peaks_upto3"] == 6.0
    for mode, run in runs.items():
        m = run["memtool"]
        assert m["sessions"] == 3 and m["task_completion"] == 1.0 == m["tool_correctness"] == run["average"]
        assert m["limit_breaches"] == m["format_errors"] == 0 and m["reward"] == 1.0
        trajs = list(read_trajectories(out / "runs" / "smollm2-135m-instruct" / mode / "trajectories.jsonl"))
        assert len(trajs) == 3 and all(t.info["mode"] == mode and t.reward == 1.0 for t in trajs)
        assert run["settings"]["environment"] == "memtool" and run["settings"]["environment_params"] == {}
    assert runs["hybrid"]["memtool"]["loaded_per_turn"] == flow["loaded_per_turn"]
    assert runs["hybrid"]["overall"]["tool_calls_per_task"] > runs["workflow"]["overall"]["tool_calls_per_task"]

    md = (out / "results.md").read_text()
    table = md.split("## MemTool: tool-management metrics\n\n")[1].split("\n\n")[0].splitlines()
    assert table[0].startswith("| Model | Mode | Sessions × requests | Avg Removal Ratio 3T | Avg Residual 3T | "
                               "Tool Correctness | Task Completion | Removal ratio |") and len(table) == 5
    # 9 requests all right: Wilson's 95 % interval [0.70, 1.00]
    assert table[2].startswith("| smollm2-135m-instruct | autonomous | 3 × 3 | 0.867 [0.867, 0.867] | – | "
                               "1.00 [0.70, 1.00] | 1.00 [0.70, 1.00] | 0.867 |")
    # the accuracy table's MemTool column: 3 of 3 sessions right, Wilson's 95 % interval [43.9, 100.0]
    assert "| smollm2-135m-instruct | workflow | 100.0 [43.9, 100.0] | 100.0 |" in md
    assert (out / "loaded_tools.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "accuracy_vs_length.png").exists() and not (out / "tool_usage.png").exists()
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))


def test_resume_and_environment_params_changes(cfg, caplog):
    evaluate(cfg, engine=CountingTeacher(eval_tasks(cfg)))
    again = CountingTeacher(eval_tasks(cfg))
    with caplog.at_level(logging.INFO, logger="sculptor_rl.eval.run"):
        evaluate(cfg, engine=again)
    assert again.completions == 0 and caplog.text.count("skipping") == 3
    caplog.clear()
    cfg.environment_params = {"limit": 4}  # the teacher's 5-tool searches now pass the limit
    third = CountingTeacher(eval_tasks(cfg))
    with caplog.at_level(logging.INFO, logger="sculptor_rl.eval.run"):
        results = evaluate(cfg, engine=third)
    assert third.completions > 0 and caplog.text.count("settings changed (environment_params)") == 3
    runs = {run["mode"]: run["memtool"] for run in results["runs"]}
    assert runs["autonomous"]["limit_breaches"] > 0 and runs["autonomous"]["reward"] == -1.0  # "Hit 4 limit"
    for mode in ("workflow", "hybrid"):  # the re-prune loop brings the count back under the limit: no error
        assert runs[mode]["limit_breaches"] == 0 and runs[mode]["reward"] == 1.0 and runs[mode]["loaded_max"] <= 3


def test_default_modes_and_tasks_follow_the_environment(cfg):
    assert EvalConfig().modes == list(ACM_MODES) and EvalConfig().tasks == list(FAMILIES)
    memtool = EvalConfig(environment="memtool")
    assert memtool.modes == list(MODES) and memtool.tasks == ["memtool"]
    assert EvalConfig(environment="memtool", modes=["hybrid"]).modes == ["hybrid"]
    assert [t["id"] for t in eval_tasks(cfg)] == [t["id"] for t in generate("memtool", 3, 0, requests=3,
                                                                              calls_per_request=1)]
    assert _fingerprint(EvalConfig(tasks=["pi_llm"]), "m", "acm", [])["environment"] == "acm"
    assert _fingerprint(cfg, "m", "workflow", [])["environment"] == "memtool"


@pytest.mark.parametrize("flags,message", [
    (["--environment", "memtool", "--modes", "autonomous,acm"], "unknown mode 'acm' of environment memtool"),
    (["--environment", "memtool", "--tasks", "pi_llm"], "unknown task 'pi_llm' for environment memtool"),
    (["--modes", "workflow"], "unknown mode 'workflow'"),
    (["--tasks", "memtool"], "unknown task 'memtool' for environment acm"),
    (["--environment", "memtool", "--environment-param", "limt=3"],
     "unknown parameter 'limt' of the memtool environment"),
    (["--environment", "memtool", "--environment-param", "limit=0"], "limit must be an integer >= 1"),
    (["--environment", "memtool", "--environment-param", "mode=workflow"], "not environment_params.mode"),
    (["--environment-param", "limit=3"], "unknown parameter 'limit' of the acm environment (it takes no parameters)"),
])
def test_cli_rejects_bad_memtool_input_before_starting_anything(flags, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["eval", *flags, "--out", str(tmp_path / "out")])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_shipped_memtool_config_loads():
    cfg = EvalConfig.from_yaml("configs/memtool/eval_cpu.yaml")
    assert cfg.environment == "memtool" and cfg.modes == list(MODES) and cfg.tasks == ["memtool"]
    assert cfg.max_tool_calls >= 11  # per request: a 9-call request, its search and its remove
    tasks = eval_tasks(cfg)  # the paper's sessions: 100 requests averaging 5 calls, stratified 1..9
    assert len(tasks) == cfg.num and {t["meta"]["bucket"] for t in tasks} == {"100x1-9"}
    assert all(sum(len(r["calls"]) for r in t["meta"]["requests"]) == 500 for t in tasks)


def test_loaded_per_turn_and_table_with_nothing_to_divide():
    turn = {"added": 0, "removed": 0, "loaded": 0, "calls": 0, "correct_calls": 0, "breaches": 0}
    # one session stopped in its first turn, one went on: later turns average the sessions that reached them
    a = SimpleNamespace(info={"turns": [{**turn, "loaded": 4}]})
    b = SimpleNamespace(info={"turns": [{**turn, "loaded": 2}, {**turn, "loaded": 6}]})
    assert loaded_per_turn([a, b]) == [3.0, 6.0] and loaded_per_turn([]) == []
    metrics = {"sessions": 1, "requests": 2, "task_completion": 0.0, "tool_correctness": None, "removal_ratio": None,
               "avg_removal_ratio_3t": None, "avg_residual_3t": None, "loaded_mean": 0.0, "loaded_max": 0,
               "ci": {"task_completion": [0.0, 0.658], "tool_correctness": None, "avg_removal_ratio_3t": None,
                      "avg_residual_3t": None},
               "limit_breaches": 0, "capped_requests": 1, "format_errors": 2, "tool_calls": 1.0, "reward": -1.0,
               "loaded_per_turn": [0.0]}
    results = {"environment": "memtool", "tasks": ["memtool"], "models": ["m"], "modes": ["autonomous"], "runs": [
        {"model": "m", "mode": "autonomous", "wall_time": 3.0, "memtool": metrics, "average": 0.0,
         "tasks": {}}]}
    row = report_table(results["runs"]).splitlines()[2]
    assert row == ("| m | autonomous | 1 × 2 | – | – | – | 0.00 [0.00, 0.66] | – | 0.00 | 0 | 0 | 1 | 2 | 1.0 | -1.000 "
                   "| 3 |")
