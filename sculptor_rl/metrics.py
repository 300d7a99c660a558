"""Aggregate metrics over trajectories (overall, per task family, per any grouping such as length bucket).

The one place metrics are defined: rollouts, collection and evaluation all report these numbers. Each summary
carries, under "ci", the 95 % interval of its rates and means (`sculptor_rl.stats.interval`: Wilson for a rate
or a 0/1 score, the bootstrap for a mean); `per_rollout` keeps each rollout's own values, which a paired
comparison of two checkpoints on the same tasks needs.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Callable

from .stats import bootstrap_mean, interval
from .trajectory import Trajectory

__all__ = ["summarize", "summarize_by", "summarize_by_task", "per_rollout", "prompt_tokens", "restores_after_fold",
           "tool_entropy", "format_table"]

# summary key: (the per-rollout value it averages, its interval). Scores are 0/1 (Wilson) or partial credit
# (bootstrap); reward and reduction are means even where every value happens to be 0 or 1.
INTERVALS = {"accuracy": ("score", interval), "correct": ("correct", interval), "reward": ("reward", bootstrap_mean),
             "format_error_rate": ("format_error", interval),
             "context_reduction": ("context_reduction", bootstrap_mean),
             "peak_prompt_tokens": ("peak_prompt_tokens", bootstrap_mean),
             "mean_prompt_tokens": ("mean_prompt_tokens", bootstrap_mean)}


def prompt_tokens(traj: Trajectory) -> tuple[int, float]:
    """The largest and the mean prompt the engine saw in a rollout (token ids, chat template included): the context
    a paradigm actually held, whatever it rewrites, resets or drops between its steps."""
    sizes = [len(s.prompt_ids) for s in traj.steps]
    return (max(sizes), sum(sizes) / len(sizes)) if sizes else (0, 0.0)


def tool_entropy(counts: Counter) -> float:
    """Shannon entropy (bits) of the tool-usage distribution; 0 for no calls or a single tool."""
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values() if c) if total else 0.0


def restores_after_fold(traj: Trajectory) -> int:
    """`restore_fragment` calls that ran on a fragment the rollout had folded before (the paper's Appendix G: the
    policy learning to take back an over-eager fold); read from the calls' arguments, whatever the environment."""
    folded, restored = set(), 0
    for step in traj.steps:
        for call in step.calls:
            fragment = call["arguments"].get("fragment_id") if isinstance(call["arguments"], dict) else None
            if call["name"] == "fold_fragment" and call["ok"]:
                folded.add(fragment)
            elif call["name"] == "restore_fragment" and call["ok"] and fragment in folded:
                restored += 1
                folded.discard(fragment)
    return restored


def summarize(trajs: list[Trajectory], correct_threshold: float = 1.0) -> dict:
    n = len(trajs)
    if not n:
        return {"n": 0}
    steps = [s for t in trajs for s in t.steps]
    calls = [c for s in steps for c in s.calls]
    tools = sum((t.tool_counts for t in trajs), Counter())
    rows = per_rollout(trajs, correct_threshold)
    return {
        "n": n,
        "accuracy": sum(t.score for t in trajs) / n,  # mean task score (partial credit where the task gives it)
        "correct": sum(t.score >= correct_threshold for t in trajs) / n,
        "reward": sum(t.reward for t in trajs) / n,
        # a step is format-valid when every call in it parsed and named a known tool
        "format_valid_steps": sum(not any(c["format_error"] for c in s.calls) for s in steps) / len(steps),
        "format_error_rate": sum(t.format_errors > 0 for t in trajs) / n,  # rollouts with a format error
        "valid_calls": sum(c["ok"] for c in calls) / len(calls) if calls else None,
        "tool_calls_per_task": len(calls) / n,
        "tool_calls_per_tool": {name: c / n for name, c in sorted(tools.items())},
        "tool_counts": dict(sorted(tools.items())),
        "tool_entropy": tool_entropy(tools),
        "restores_after_fold": sum(map(restores_after_fold, trajs)) / n,  # per task
        "context_tokens_before": sum(t.context_tokens_before for t in trajs) / n,
        "context_tokens_after": sum(t.context_tokens_after for t in trajs) / n,
        "context_reduction": sum(t.context_reduction for t in trajs) / n,
        "peak_prompt_tokens": sum(r["peak_prompt_tokens"] for r in rows) / n,  # per task: its largest prompt
        "mean_prompt_tokens": sum(r["mean_prompt_tokens"] for r in rows) / n,  # per task: its mean prompt
        "generated_tokens": sum(t.generated_tokens for t in trajs) / n,
        "stop_reasons": dict(Counter(t.stop_reason for t in trajs)),
        "ci": {key: list(ci([r[value] for r in rows])) for key, (value, ci) in INTERVALS.items()},
    }


def per_rollout(trajs: list[Trajectory], correct_threshold: float = 1.0) -> list[dict]:
    """Each rollout's own values, in order: its task id and family, and the numbers the summary averages."""
    return [{"task_id": t.task_id, "task": t.task, "score": t.score, "correct": int(t.score >= correct_threshold),
             "reward": t.reward, "format_error": int(t.format_errors > 0),
             "context_reduction": t.context_reduction, "peak_prompt_tokens": prompt_tokens(t)[0],
             "mean_prompt_tokens": prompt_tokens(t)[1]} for t in trajs]


def summarize_by(trajs: list[Trajectory], key: Callable[[Trajectory], str],
                 correct_threshold: float = 1.0) -> dict[str, dict]:
    """One summary per group, groups named by `key(trajectory)` (e.g. its task, or its length bucket)."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[key(t)].append(t)
    return {name: summarize(g, correct_threshold) for name, g in sorted(groups.items())}


def summarize_by_task(trajs: list[Trajectory], correct_threshold: float = 1.0) -> dict[str, dict]:
    out = summarize_by(trajs, lambda t: t.task, correct_threshold)
    if len(out) > 1:
        out["all"] = summarize(trajs, correct_threshold)
    return out


def format_table(summary: dict[str, dict]) -> str:
    cols = ["n", "accuracy", "correct", "reward", "format_valid_steps", "valid_calls", "tool_calls_per_task",
            "context_reduction"]
    lines = ["| task | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for task, s in summary.items():
        cells = [f"{s[c]:.3f}" if isinstance(s[c], float) else str(s[c]) for c in cols]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
