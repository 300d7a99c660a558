"""Evaluation reports: `results.json`, `results.md` (a table shaped like the paper's Table 2, then details per
task, per length bucket and per tool) and two PNG plots (accuracy vs context length; tool-usage distribution).

`results` is what `sculptor_rl.eval.run.evaluate` returns: {env, tasks, models, modes, runs, config}, one run per
model × mode with its summary per task (and per bucket within a task) from `sculptor_rl.metrics` and its
per-rollout values. Every rate and mean is shown with its 95 % interval (the summaries' "ci"; error bars in the
plots), and `write_report` adds `comparisons`: consecutive models (the order given, e.g. base, SFT, RL) and each
later one against the first, in each mode, paired on the tasks both ran (`comparisons`). MemTool runs (env
memtool) also carry the paper's tool-management metrics: a table of them, and `loaded_tools.png` (mean
tools loaded per turn, one line per run) instead of the accuracy-vs-length plot.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..acm import TOOL_SCHEMAS
from ..envs import env_class
from ..envs.registry import LONG_CONTEXT_BENCHMARKS
from ..stats import mcnemar_exact, paired_bootstrap

log = logging.getLogger(__name__)

__all__ = ["write_report", "markdown", "accuracy_table", "bucket_table", "comparisons", "paired_tests",
           "comparison_table", "TITLES"]

TITLES = {"pi_llm": "PI-LLM", "needlebench": "NeedleBench", "mrcr": "MRCR", "babilong": "BABILong",
          "longbench_v2": "LongBench v2", "frames": "FRAMES", "gsm_infinite": "GSM-Infinite", "memtool": "MemTool"}
TOOLS = [s["function"]["name"] for s in TOOL_SCHEMAS]


def write_report(results: dict, out: str | Path) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results["comparisons"] = comparisons(results)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(markdown(results))
    _env_sections(results, out)  # its plots
    if any(task in LONG_CONTEXT_BENCHMARKS for task in results["tasks"]):
        plot_accuracy_vs_length(results, out / "accuracy_vs_length.png")
    if any(run["mode"] == "acm" for run in results["runs"]):
        plot_tool_usage(results, out / "tool_usage.png")
    log.info("wrote results.json, results.md and plots to %s", out)


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header: list[str], rows: list[list]) -> str:
    return "\n".join([_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows)])


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _ci(summary: dict, key: str, scale: float = 100, digits: int = 1) -> str:
    """A value with its 95 % interval, "5.0 [0.9, 23.6]" (runs saved before intervals existed: the value alone)."""
    value, ci = summary[key], summary.get("ci", {}).get(key)
    if value is None:
        return "–"
    text = f"{scale * value:.{digits}f}"
    return text if ci is None else f"{text} [{scale * ci[0]:.{digits}f}, {scale * ci[1]:.{digits}f}]"


def accuracy_table(results: dict) -> str:
    """Rows model × mode, columns the task families and their average: accuracy in % with its 95 % interval
    (the paper's Table 2)."""
    tasks = results["tasks"]
    rows = [[run["model"], run["mode"], *(_ci(run["tasks"][t], "accuracy") for t in tasks), _pct(run["average"])]
            for run in results["runs"]]
    return _table(["Model", "Mode", *(TITLES.get(t, t) for t in tasks), "Avg."], rows)


def bucket_table(results: dict, key: str = "accuracy") -> str:
    """Rows task family (benchmark) × length bucket, columns the runs (model · mode): `key` (accuracy or
    context_reduction) in % with its 95 % interval (the paper's per-length tables). Buckets in order of their mean
    context length."""
    runs, rows = results["runs"], []
    for task in results["tasks"]:
        buckets: dict[str, float] = {}
        for run in runs:
            for bucket, b in run["tasks"].get(task, {}).get("buckets", {}).items():
                buckets.setdefault(bucket, b["context_tokens_before"])
        for bucket in sorted(buckets, key=buckets.get):
            cells = [_ci(b, key) if (b := run["tasks"].get(task, {}).get("buckets", {}).get(bucket)) else "–"
                     for run in runs]
            n = max((run["tasks"][task]["buckets"][bucket]["n"] for run in runs
                     if bucket in run["tasks"].get(task, {}).get("buckets", {})), default=0)
            rows.append([TITLES.get(task, task), bucket, n, f"{buckets[bucket]:.0f}", *cells])
    return _table(["Task", "Bucket", "n", "Ctx tokens", *(_label(results, run) for run in runs)], rows)


def comparisons(results: dict) -> list[dict]:
    """Each model against the one before it (base → SFT → RL) and, from the third on, against the first (a
    reference: base, or the SFT checkpoint an ablation starts from), in each mode, on the tasks both ran (paired
    by task id): per task family (and over all of them when there are several) the paired bootstrap of the
    accuracy and of the context reduction (B - A) and the exact McNemar test of correct answers. Runs saved
    without per-rollout values are left out."""
    by_run = {(run["model"], run["mode"]): run for run in results["runs"]}
    families = results["tasks"] + (["all"] if len(results["tasks"]) > 1 else [])
    models = results["models"]
    pairs = [*zip(models, models[1:]), *((models[0], m) for m in models[2:])]
    out = []
    for mode in results["modes"]:
        for a, b in pairs:
            run_a, run_b = by_run.get((a, mode)), by_run.get((b, mode))
            if not (run_a and run_b and "rollouts" in run_a and "rollouts" in run_b):
                continue
            out += [{"mode": mode, "a": a, "b": b, **test}
                    for test in paired_tests(run_a["rollouts"], run_b["rollouts"], families)]
    return out


def paired_tests(rollouts_a: list[dict], rollouts_b: list[dict], families: list[str]) -> list[dict]:
    """Two runs' per-rollout values (`metrics.per_rollout`) paired by task id, per family ("all": every task): the
    paired bootstrap of the accuracy, the context reduction and (rollouts that carry it) the peak prompt (B - A),
    and the exact McNemar test of correct answers. A family neither run has is left out."""
    first = {r["task_id"]: r for r in rollouts_a}
    matched = [(first[r["task_id"]], r) for r in rollouts_b if r["task_id"] in first]
    out = []
    for family in families:
        chosen = [(x, y) for x, y in matched if family in ("all", y["task"])]
        if not chosen:
            continue
        xs, ys = zip(*chosen)
        test = {"task": family, "n": len(chosen),
                "accuracy": paired_bootstrap([x["score"] for x in xs], [y["score"] for y in ys]),
                "correct": mcnemar_exact([x["correct"] for x in xs], [y["correct"] for y in ys]),
                "context_reduction": paired_bootstrap([x["context_reduction"] for x in xs],
                                                      [y["context_reduction"] for y in ys])}
        if all("peak_prompt_tokens" in r for r in (*xs, *ys)):  # runs saved before it was measured lack it
            test["peak_prompt_tokens"] = paired_bootstrap([x["peak_prompt_tokens"] for x in xs],
                                                          [y["peak_prompt_tokens"] for y in ys])
        out.append(test)
    return out


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else "<0.001"


def _diff(d: dict, scale: float = 100, digits: int = 1) -> str:
    lo, hi = d["ci"]
    return f"{scale * d['diff']:+.{digits}f} [{scale * lo:+.{digits}f}, {scale * hi:+.{digits}f}]"


def comparison_table(results: dict) -> str:
    rows = [[c["mode"], f"{c['a']} → {c['b']}", TITLES.get(c["task"], c["task"]), c["n"], _diff(c["accuracy"]),
             _p(c["accuracy"]["p"]), f"{c['correct']['only_a']} / {c['correct']['only_b']}", _p(c["correct"]["p"]),
             _diff(c["context_reduction"]), _p(c["context_reduction"]["p"])]
            for c in results["comparisons"]]
    return _table(["Mode", "A → B", "Task", "n", "Δ Acc. pp (95 % CI)", "p", "Correct only A / only B",
                   "p (McNemar)", "Δ Reduction pp (95 % CI)", "p"], rows)


def _env_sections(results: dict, out: Path | None = None) -> list[str]:
    """The environment's own report section (`Env.report`), its plots written to `out` when given."""
    return env_class(results["environment"]).report(results, out) if results.get("environment") else []


def _details(results: dict) -> str:
    header = ["Model", "Mode", "Task", "n", "Acc. %", "Correct %", "Reward", "Format err. %", "Tool calls",
              "Tool entropy", "Ctx tokens before", "after", "Reduction %", "Gen. tokens", "Wall s"]
    rows = []
    for run in results["runs"]:
        for task, s in run["tasks"].items():
            rows.append([run["model"], run["mode"], task, s["n"], _ci(s, "accuracy"), _ci(s, "correct"),
                         _ci(s, "reward", 1, 2), _ci(s, "format_error_rate"), f"{s['tool_calls_per_task']:.2f}",
                         f"{s['tool_entropy']:.2f}", f"{s['context_tokens_before']:.0f}",
                         f"{s['context_tokens_after']:.0f}", _ci(s, "context_reduction"),
                         f"{s['generated_tokens']:.0f}", f"{s['wall_time']:.0f}"])
    return _table(header, rows)


def _tools(results: dict) -> str:
    rows = [[run["model"], task, *(f"{s['tool_calls_per_tool'].get(name, 0):.2f}" for name in TOOLS)]
            for run in results["runs"] if run["mode"] == "acm" for task, s in run["tasks"].items()]
    return _table(["Model", "Task", *TOOLS], rows)


def markdown(results: dict) -> str:
    parts = ["# Evaluation", "## Accuracy (%)", accuracy_table(results),
             "Accuracy is the mean task score: exact match (PI-LLM: the fraction of keys right; MRCR: the "
             "similarity ratio to the true reply; MemTool: the fraction of a session's requests answered exactly); "
             "records of a published benchmark (`data import`, or generated with format=official) are scored by "
             "that benchmark's own rule (sculptor_rl/longcontext/benchmark_scoring.py). "
             "In brackets: the 95 % interval (Wilson where every score is 0 or 1, else a bootstrap of the mean, "
             "4000 resamples, seed 0); Avg. is the mean of the families' accuracies."]
    if any(task in LONG_CONTEXT_BENCHMARKS for task in results["tasks"]):
        parts += ["## Accuracy per length bucket (%)", bucket_table(results),
                  "Rows: task family (benchmark) and length bucket (its `meta.bucket`: PI-LLM update count, "
                  "NeedleBench length/needles, MRCR token bin/needles, BABILong length/task, LongBench v2 "
                  "length/difficulty, FRAMES number of articles), in order of mean context tokens; n: tasks in the "
                  "bucket; columns: the runs. In brackets: the 95 % interval, as above."]
    if results.get("comparisons"):
        parts += ["## Paired comparisons (same tasks)", comparison_table(results),
                  "Each model against the one listed before it and against the first, on the tasks both ran. "
                  "Δ: B − A in points, with the paired bootstrap's 95 % interval and two-sided p-value; correct "
                  "answers: tasks only A / only B got fully right and the exact McNemar test on them. Claim a "
                  "difference only where p < 0.05 "
                  "(and mind the number of comparisons)."]
    parts += _env_sections(results)
    parts += ["## Per task", _details(results),
              "Format err.: rollouts with an unparseable call or an unknown tool. Tool calls: per task. Ctx tokens: "
              "the task's messages before and after context management (truncate/bm25: what they kept). "
              "Wall s: the task family's rollouts, run as one batch. In brackets: 95 % intervals (Wilson for rates, "
              "the bootstrap for reward, reduction and partial-credit accuracy).",
              "## Per length bucket: context reduction (%)", bucket_table(results, "context_reduction"),
              "Context reduction: 1 - context tokens after / before, per bucket, with its 95 % interval."]
    if any(run["mode"] == "acm" for run in results["runs"]):
        parts += ["## Tool calls per task, by tool (acm)", _tools(results)]
    return "\n\n".join(parts) + "\n"


def _label(results: dict, run: dict) -> str:
    return run["mode"] if len(results["models"]) == 1 else f"{run['model']} · {run['mode']}"


def plot_accuracy_vs_length(results: dict, path: Path) -> None:
    """One panel per task family: accuracy per length bucket (x: mean context tokens), one line per run, with
    95 % intervals as error bars."""
    from matplotlib.figure import Figure

    tasks = results["tasks"]
    fig = Figure(figsize=(4.2 * len(tasks), 3.6), layout="constrained")
    axes = fig.subplots(1, len(tasks), sharey=True, squeeze=False)[0]
    runs = results["runs"]
    for ax, task in zip(axes, tasks):
        for k, run in enumerate(runs):
            buckets = sorted(run["tasks"][task]["buckets"].values(), key=lambda b: b["context_tokens_before"])
            # runs often tie (all at 0 %): markers, dashes and a small x offset of their own keep each visible
            x = [b["context_tokens_before"] * (1 + 0.02 * (k - (len(runs) - 1) / 2)) for b in buckets]
            y = [100 * b["accuracy"] for b in buckets]
            ci = [b.get("ci", {}).get("accuracy") or [b["accuracy"]] * 2 for b in buckets]
            err = [[max(0.0, v - 100 * lo) for v, (lo, _) in zip(y, ci)],  # (rounding can make a 0 negative)
                   [max(0.0, 100 * hi - v) for v, (_, hi) in zip(y, ci)]]
            ax.errorbar(x, y, yerr=err, capsize=3, marker="osD^v<>p"[k % 8],
                        linestyle=("-", "--", ":", "-.")[k % 4], markersize=7 - k % 4, label=_label(results, run))
        ax.set(title=TITLES.get(task, task), xlabel="context tokens", ylim=(-5, 105))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy (%, 95 % interval)")
    axes[-1].legend(fontsize="small")
    fig.savefig(path, dpi=120)


def plot_tool_usage(results: dict, path: Path) -> None:
    """Calls per task of each ACM tool (all task families together), one bar per model's acm run."""
    from matplotlib.figure import Figure

    runs = [run for run in results["runs"] if run["mode"] == "acm"]
    fig = Figure(figsize=(8, 3.8), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(runs)
    for k, run in enumerate(runs):
        per_tool = run["overall"]["tool_calls_per_tool"]
        ax.bar([i + k * width for i in range(len(TOOLS))], [per_tool.get(name, 0) for name in TOOLS], width,
               label=f"{run['model']} (entropy {run['overall']['tool_entropy']:.2f} bits)")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(TOOLS))], TOOLS, rotation=20, ha="right")
    total = sum(run["overall"]["tool_calls_per_task"] for run in runs)
    ax.set(ylabel="calls per task", ylim=(0, None), title="ACM tool usage" + ("" if total else " (no tool calls)"))
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=120)
