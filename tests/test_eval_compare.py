"""`sculptor-rl eval --compare`: eval outputs at two context budgets (scripted teachers as the engine, a few
generated tasks, no weights run) compared in one chart of accuracy against peak prompt tokens and a table of
paired tests between the paradigms at each budget."""

from __future__ import annotations

import json

import pytest

from sculptor_rl.cli import main
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.eval.compare import comparisons, load_runs, points
from sculptor_rl.eval.run import EvalConfig, eval_tasks, evaluate

BUDGETS = (384, 768)
FAMILIES = ["babilong", "needlebench"]
SIZES = {f: [{"context_tokens": 800}] for f in FAMILIES}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Per budget: MemAgent, MEM1 and ReSum each evaluated as its own environment with its own teacher (a teacher
    reads only its paradigm's prompts), and ACM with the truncate baseline under the ACM teacher (which calls a tool
    first, so truncate answers nothing)."""
    root, dirs = tmp_path_factory.mktemp("evals"), []
    for budget in BUDGETS:
        for env, modes in (("memagent", ["memagent"]), ("mem1", ["mem1"]), ("resum", ["resum"]), ("acm", ["acm", "truncate"])):
            cfg = EvalConfig(environment=env, modes=modes, tasks=FAMILIES, num=3, sizes=SIZES,
                             context_budget=budget, out=str(root / f"b{budget}" / env))
            evaluate(cfg, engine=ScriptedTeacher(eval_tasks(cfg), environment=env))
            dirs.append(cfg.out)
    return dirs


def test_cli_writes_the_chart_and_the_paired_table(outputs, tmp_path, capsys):
    out = tmp_path / "cmp"
    main(["eval", "--compare", *outputs, "--out", str(out)])
    printed = capsys.readouterr().out
    assert (out / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads((out / "comparison.json").read_text())
    assert result["budgets"] == list(BUDGETS) and len(result["sources"]) == 8
    md = (out / "comparison.md").read_text()
    points_rows = md.split("## Accuracy (%) and prompt tokens\n\n")[1].split("\n\n")[0].splitlines()
    assert points_rows[0] == ("| Paradigm | Budget | n | BABILong | NeedleBench | All | Peak prompt tokens | "
                              "Mean prompt tokens |")
    assert len(points_rows) == 2 + 5 * len(BUDGETS)  # 5 series × 2 budgets
    pairs = md.split("## Paired tests at each budget (all tasks)\n\n")[1].split("\n\n")[0].splitlines()
    assert len(pairs) == 2 + 10 * len(BUDGETS)  # C(5, 2) pairs per budget, over all tasks
    assert pairs[2:] == printed.splitlines()[2:2 + 10 * len(BUDGETS)]
    memagent_vs_truncate = next(r for r in pairs if "| 384 | memagent → truncate |" in r)
    # the teacher solves all 6 tasks in MemAgent, truncate none: 6 / 0 and McNemar's exact p = 2 / 2**6
    assert "| 6 | -100.0 [-100.0, -100.0] |" in memagent_vs_truncate and "| 6 / 0 | 0.031 |" in memagent_vs_truncate


def test_points_are_each_runs_summary_by_budget(outputs):
    runs = load_runs(outputs)
    pts = points(runs)
    assert list(pts) == ["memagent", "mem1", "resum", "acm", "truncate"]
    for run in runs:
        for family, s in [*run["tasks"].items(), ("all", run["overall"])]:
            (p,) = [p for p in pts[run["series"]][family] if p["budget"] == run["budget"]]
            assert (p["accuracy"], p["peak_prompt_tokens"], p["n"]) == (s["accuracy"], s["peak_prompt_tokens"], s["n"])
            assert p["accuracy_ci"] == s["ci"]["accuracy"] and p["peak_prompt_ci"] == s["ci"]["peak_prompt_tokens"]
    for series in pts:
        assert [p["budget"] for p in pts[series]["all"]] == list(BUDGETS)
    peak = {s: [p["peak_prompt_tokens"] for p in pts[s]["all"]] for s in pts}
    # the budget-reading paradigms and the baseline hold more at the larger budget; ACM does not read it
    assert all(peak[s][0] < peak[s][1] for s in ("memagent", "mem1", "resum", "truncate"))
    assert peak["acm"][0] == peak["acm"][1]
    assert [p["accuracy"] for p in pts["memagent"]["all"]] == [1.0, 1.0]
    assert [p["accuracy"] for p in pts["truncate"]["all"]] == [0.0, 0.0]


def test_paired_tests_pair_tasks_at_one_budget(outputs):
    runs = load_runs(outputs)
    tests = comparisons(runs)
    assert len(tests) == 10 * len(BUDGETS) * 3  # pairs × budgets × (2 families + all)
    by = {(r["series"], r["budget"]): {x["task_id"]: x for x in r["rollouts"]} for r in runs}
    for t in tests:
        a, b = by[(t["a"], t["budget"])], by[(t["b"], t["budget"])]
        ids = [i for i in a if t["task"] in ("all", a[i]["task"])]
        assert t["n"] == len(ids) == (6 if t["task"] == "all" else 3)
        diffs = [b[i]["score"] - a[i]["score"] for i in ids]
        assert t["accuracy"]["diff"] == pytest.approx(sum(diffs) / len(diffs))
        assert t["correct"]["only_b"] == sum(b[i]["correct"] and not a[i]["correct"] for i in ids)
        peaks = [b[i]["peak_prompt_tokens"] - a[i]["peak_prompt_tokens"] for i in ids]
        assert t["peak_prompt_tokens"]["diff"] == pytest.approx(sum(peaks) / len(peaks))
    # runs on other tasks are not paired
    runs[0]["settings"] = {**runs[0]["settings"], "tasks_sha256": "other"}
    assert len(comparisons(runs)) == len(tests) - 4 * 3  # memagent at 384 against the 4 others


def test_bad_inputs_are_refused(outputs, tmp_path):
    with pytest.raises(ValueError, match="memagent at budget 384 is in both"):
        load_runs([outputs[0], outputs[0]])
    with pytest.raises(FileNotFoundError, match="no results.json"):
        load_runs([tmp_path])
