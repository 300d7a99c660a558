"""Context-management paradigms compared across context budgets (`sculptor-rl eval --compare DIR ...`).

Reads the `results.json` of several eval outputs (typically one per `context_budget`, each running every paradigm
of configs/paradigms.yaml, or one per paradigm and budget) and writes to one folder:
- `comparison.png`: accuracy (95 % interval) against the mean peak prompt tokens per task (the largest prompt the
  engine saw in a rollout, chat template included; its 95 % interval as the horizontal bar), one panel per task
  family and one over all tasks, each paradigm (model · mode when several models ran) a line through its budgets;
- `comparison.md`: the points as a table, then paired tests between the paradigms at each budget on the tasks both
  ran (`report.paired_tests`: paired bootstrap of accuracy and peak prompt, exact McNemar of correct answers);
- `comparison.json`: both, per family.

A run's budget is its eval's `context_budget`. Modes that do not read it (acm, full) give the same point at every
budget. Two runs are paired only when they ran the same tasks (the `tasks_sha256` their saved settings hold).
"""

from __future__ import annotations

import json
import logging
from itertools import combinations
from pathlib import Path

from .report import TITLES, _ci, _diff, _p, _table, paired_tests

log = logging.getLogger(__name__)

__all__ = ["load_runs", "points", "comparisons", "write_comparison", "points_table", "comparison_table",
           "plot_comparison"]

OVERALL = "all"


def load_runs(dirs: list[str | Path]) -> list[dict]:
    """Every run of the eval outputs `dirs` (a folder holding results.json, or the file), each with its `budget`
    and `series` (its mode; "model · mode" when the outputs hold several models). A series twice at one budget is
    an error: which one to plot would be a guess."""
    loaded = []
    for d in dirs:
        path = Path(d) / "results.json" if Path(d).is_dir() else Path(d)
        if not path.is_file():
            raise FileNotFoundError(f"{d}: no results.json (an `sculptor-rl eval` output folder?)")
        results = json.loads(path.read_text())
        budget = results.get("config", {}).get("context_budget")
        if budget is None:
            raise ValueError(f"{path}: its config holds no context_budget")
        loaded += [{**run, "budget": budget, "source": str(path)} for run in results["runs"]]
    if not loaded:
        raise ValueError("no runs in " + ", ".join(map(str, dirs)))
    for run in loaded:
        if "peak_prompt_tokens" not in run["overall"]:
            raise ValueError(f"{run['source']}: run {run['model']} / {run['mode']} has no peak_prompt_tokens "
                             "(saved before eval measured prompts; evaluate again)")
    several_models = len({run["model"] for run in loaded}) > 1
    seen = {}
    for run in loaded:
        run["series"] = f"{run['model']} · {run['mode']}" if several_models else run["mode"]
        key = (run["series"], run["budget"])
        if key in seen:
            raise ValueError(f"{run['series']} at budget {run['budget']} is in both {seen[key]} and {run['source']}")
        seen[key] = run["source"]
    return loaded


def _families(runs: list[dict]) -> list[str]:
    families = list(dict.fromkeys(task for run in runs for task in run["tasks"]))
    return families + ([OVERALL] if len(families) > 1 else [])


def _summary(run: dict, family: str) -> dict | None:
    return run["overall"] if family == OVERALL else run["tasks"].get(family)


def points(runs: list[dict]) -> dict[str, dict[str, list[dict]]]:
    """{series: {family: [point per budget, budgets ascending]}}; a point: budget, n, accuracy and mean peak prompt
    tokens with their 95 % intervals (from the run's summary), mean prompt tokens."""
    out: dict[str, dict[str, list[dict]]] = {}
    for family in _families(runs):
        for run in sorted(runs, key=lambda r: r["budget"]):
            s = _summary(run, family)
            if s is None:
                continue
            ci = s.get("ci", {})
            out.setdefault(run["series"], {}).setdefault(family, []).append(
                {"budget": run["budget"], "n": s["n"], "accuracy": s["accuracy"], "accuracy_ci": ci.get("accuracy"),
                 "peak_prompt_tokens": s["peak_prompt_tokens"], "peak_prompt_ci": ci.get("peak_prompt_tokens"),
                 "mean_prompt_tokens": s["mean_prompt_tokens"]})
    return out


def comparisons(runs: list[dict]) -> list[dict]:
    """At each budget, every pair of series (in the order they first appear) that ran the same tasks: the paired
    tests per family and over all (`report.paired_tests`)."""
    families = _families(runs)
    order = list(dict.fromkeys(run["series"] for run in runs))
    out = []
    for budget in sorted({run["budget"] for run in runs}):
        at = {run["series"]: run for run in runs if run["budget"] == budget}
        for a, b in combinations([s for s in order if s in at], 2):
            sha_a, sha_b = (at[s].get("settings", {}).get("tasks_sha256") for s in (a, b))
            if sha_a != sha_b:
                log.info("budget %s: %s and %s ran different tasks; not paired", budget, a, b)
                continue
            out += [{"budget": budget, "a": a, "b": b, **test}
                    for test in paired_tests(at[a]["rollouts"], at[b]["rollouts"], families)]
    return out


def points_table(pts: dict[str, dict[str, list[dict]]]) -> str:
    """Rows series × budget; columns the families' and the overall accuracy (%, 95 % interval), then the mean peak
    and mean prompt tokens over all tasks."""
    families = list(dict.fromkeys(f for per in pts.values() for f in per))
    rows = []
    for series, per in pts.items():
        last = per.get(OVERALL) or per[families[0]]
        for k, p in enumerate(last):
            at = {f: next((q for q in per.get(f, []) if q["budget"] == p["budget"]), None) for f in families}
            cells = [_ci({"accuracy": q["accuracy"], "ci": {"accuracy": q["accuracy_ci"]}}, "accuracy") if q else "–"
                     for q in at.values()]
            peak = _ci({"v": p["peak_prompt_tokens"], "ci": {"v": p["peak_prompt_ci"]}}, "v", 1, 0)
            rows.append([series, p["budget"], p["n"], *cells, peak, f"{p['mean_prompt_tokens']:.0f}"])
    return _table(["Paradigm", "Budget", "n", *(TITLES.get(f, "All" if f == OVERALL else f) for f in families),
                   "Peak prompt tokens", "Mean prompt tokens"], rows)


def _headline(tests: list[dict]) -> str:
    """The family a table shows: all tasks, where there are several families."""
    return OVERALL if any(t["task"] == OVERALL for t in tests) else (tests[0]["task"] if tests else OVERALL)


def comparison_table(tests: list[dict], family: str | None = None) -> str:
    """The paired tests of one family (default: over all tasks, or the one family)."""
    family = family or _headline(tests)
    rows = [[t["budget"], f"{t['a']} → {t['b']}", t["n"], _diff(t["accuracy"]), _p(t["accuracy"]["p"]),
             f"{t['correct']['only_a']} / {t['correct']['only_b']}", _p(t["correct"]["p"]),
             _diff(t["peak_prompt_tokens"], 1, 0), _p(t["peak_prompt_tokens"]["p"])]
            for t in tests if t["task"] == family]
    return _table(["Budget", "A → B", "n", "Δ Acc. pp (95 % CI)", "p", "Correct only A / only B", "p (McNemar)",
                   "Δ Peak prompt tokens (95 % CI)", "p"], rows)


def plot_comparison(pts: dict[str, dict[str, list[dict]]], path: Path) -> None:
    """One panel per family and one over all tasks: accuracy (95 % interval) against mean peak prompt tokens (its
    95 % interval), each series a line through its budgets, the budget written by each point."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    families = list(dict.fromkeys(f for per in pts.values() for f in per))
    families = [f for f in families if f != OVERALL] + ([OVERALL] if OVERALL in families else [])
    cols = min(3, len(families))
    rows = -(-len(families) // cols)
    fig = Figure(figsize=(4.6 * cols, 3.8 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, sharey=True, squeeze=False).ravel()
    for ax, family in zip(axes, families):
        for k, (series, per) in enumerate(pts.items()):
            line = per.get(family, [])
            if not line:
                continue
            x = [p["peak_prompt_tokens"] for p in line]
            y = [100 * p["accuracy"] for p in line]
            yci = [p["accuracy_ci"] or [p["accuracy"]] * 2 for p in line]
            xci = [p["peak_prompt_ci"] or [p["peak_prompt_tokens"]] * 2 for p in line]
            yerr = [[max(0.0, v - 100 * lo) for v, (lo, _) in zip(y, yci)],  # (rounding can make a 0 negative)
                    [max(0.0, 100 * hi - v) for v, (_, hi) in zip(y, yci)]]
            xerr = [[max(0.0, v - lo) for v, (lo, _) in zip(x, xci)], [max(0.0, hi - v) for v, (_, hi) in zip(x, xci)]]
            # paradigms often tie on accuracy (all at 100 %): markers and dashes of their own keep each visible
            bars = ax.errorbar(x, y, xerr=xerr, yerr=yerr, capsize=3, marker="osD^v<>p"[k % 8],
                               linestyle=("-", "--", ":", "-.")[k % 4], markersize=7 - k % 4, label=series)
            for xi, yi, p in zip(x, y, line):
                ax.annotate(str(p["budget"]), (xi, yi), textcoords="offset points", xytext=(4, -10), fontsize=6,
                            color=bars[0].get_color())
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set(title=TITLES.get(family, "All tasks" if family == OVERALL else family),
               xlabel="mean peak prompt tokens per task", ylim=(-5, 105))
        ax.grid(alpha=0.3, which="both")
    for ax in axes[len(families):]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel("accuracy (%, 95 % interval)")
    handles, labels = axes[len(families) - 1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    fig.savefig(path, dpi=120)


def write_comparison(dirs: list[str | Path], out: str | Path) -> dict:
    """comparison.json, comparison.md and comparison.png of the eval outputs `dirs`, in `out`; returns the json."""
    runs = load_runs(dirs)
    pts, tests = points(runs), comparisons(runs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"sources": sorted({run["source"] for run in runs}), "budgets": sorted({run["budget"] for run in runs}),
              "points": pts, "comparisons": tests}
    (out / "comparison.json").write_text(json.dumps(result, indent=1))
    family = _headline(tests)
    parts = ["# Paradigms across context budgets", "Sources: " + ", ".join(result["sources"]),
             "![accuracy against peak prompt](comparison.png)",
             "## Accuracy (%) and prompt tokens", points_table(pts),
             "Accuracy per family and over all tasks with its 95 % interval (Wilson for 0/1 scores, else a bootstrap "
             "of the mean); peak prompt: the largest prompt of a rollout (tokens, chat template included), averaged "
             "over tasks, with its bootstrap interval; mean prompt: the rollout's mean prompt, averaged.",
             f"## Paired tests at each budget ({TITLES.get(family, 'all tasks' if family == OVERALL else family)})",
             comparison_table(tests, family),
             "Each pair of paradigms at one budget, on the tasks both ran. Δ: B − A (accuracy in points, peak prompt in "
             "tokens) with the paired bootstrap's 95 % interval and two-sided p-value; correct answers: tasks only A / "
             "only B got fully right and the exact McNemar test on them. Claim a difference only where p < 0.05, and "
             f"mind the number of comparisons ({sum(t['task'] == family for t in tests)} here). comparison.json holds "
             "the tests per task family."]
    (out / "comparison.md").write_text("\n\n".join(parts) + "\n")
    plot_comparison(pts, out / "comparison.png")
    log.info("wrote comparison.json, comparison.md and comparison.png to %s", out)
    return result
