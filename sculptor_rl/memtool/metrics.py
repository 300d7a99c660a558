"""MemTool metrics, the RL reward, and the plot of loaded tools per turn.

All read `Trajectory.info["turns"]` (one record per request, see `envs.memtool.Turn`): A_t tools added and R_t
removed during turn t, N_t loaded at its end, its calls and whether it was completed.

- removal ratio: ΣR / ΣA over the session;
- 3-turn removal ratio: the mean over sliding windows of 3 consecutive turns (those that added tools) of
  min(1, ΣR / ΣA) in the window — a window that also cleans up earlier additions counts as complete removal;
- residual tools after peaks: a peak is a turn whose N_t exceeds the turn before (0 before the first turn) and
  is not exceeded by the turn after; its residual is the mean N over the (up to) 3 turns that follow it. The
  metric is the mean residual over all peaks (lower: tools do not pile up after use);
- tool correctness: calls that are one of the request's calls (name and arguments) / all non-management calls;
- task completion: requests answered exactly / requests in the session (the rollout's score).
Pooled over sessions: sums for the ratios of sums, all windows and peaks for the means.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from statistics import mean

__all__ = ["removal_ratio", "window_removal_ratios", "peak_residuals", "session_reward", "summarize",
           "format_table", "loaded_per_turn", "plot_loaded_tools", "plot_loaded_curves"]

WINDOW = 3


def _ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


def _mean(values: list[float]) -> float:
    return float(mean(values)) if values else math.nan


def removal_ratio(turns: list[dict]) -> float:
    return _ratio(sum(t["removed"] for t in turns), sum(t["added"] for t in turns))


def window_removal_ratios(turns: list[dict], window: int = WINDOW) -> list[float]:
    """min(1, ΣR/ΣA) per window of `window` consecutive turns that added tools (one window if fewer turns)."""
    spans = [turns[i:i + window] for i in range(max(1, len(turns) - window + 1))]
    return [min(1.0, sum(t["removed"] for t in s) / added) for s in spans if (added := sum(t["added"] for t in s))]


def peak_residuals(turns: list[dict], after: int = WINDOW) -> list[float]:
    """For each peak of the loaded-tools curve that has a turn after it: the mean tools loaded in the next turns."""
    n = [t["loaded"] for t in turns]
    return [mean(n[i + 1:i + 1 + after]) for i in range(len(n) - 1)
            if n[i] > (n[i - 1] if i else 0) and n[i] >= n[i + 1]]


def session_reward(traj, cfg, loaded_tools_penalty: float = 0.0) -> float:
    """The RL reward: task completion (the score, in [0, 1]) minus `loaded_tools_penalty` × mean tools loaded per
    turn; `cfg.format_error_penalty` (-1) on a format error or a limit breach, `cfg.cap_penalty` (-1) when a cap
    stopped the rollout."""
    turns = traj.info["turns"]
    if traj.format_errors or any(t["breaches"] for t in turns):
        return cfg.format_error_penalty
    if traj.stop_reason != "answer":
        return cfg.cap_penalty
    return traj.score - loaded_tools_penalty * mean(t["loaded"] for t in turns)


def _summary(trajs: list) -> dict:
    turns = [t.info["turns"] for t in trajs]
    flat = [t for ts in turns for t in ts]
    return {
        "sessions": len(trajs),
        "task_completion": _mean([t.score for t in trajs]),
        "tool_correctness": _ratio(sum(t["correct_calls"] for t in flat), sum(t["calls"] for t in flat)),
        "removal_ratio": removal_ratio(flat),
        "removal_ratio_3turn": _mean([r for ts in turns for r in window_removal_ratios(ts)]),
        "residual_after_peaks": _mean([r for ts in turns for r in peak_residuals(ts)]),
        "loaded_mean": _mean([t["loaded"] for t in flat]),
        "loaded_max": max((t["loaded"] for t in flat), default=0),
        "limit_breaches": sum(t["breaches"] for t in flat),
        "format_errors": sum(t.format_errors for t in trajs),
        "tool_calls": sum(t.num_tool_calls for t in trajs) / len(trajs),
        "reward": _mean([t.reward for t in trajs]),
    }


def summarize(trajs: list) -> dict[str, dict]:
    """The metrics per mode (memtool trajectories only; grouped by `info["mode"]`)."""
    groups = defaultdict(list)
    for t in trajs:
        if t.info.get("env") != "memtool":
            raise ValueError(f"rollout {t.rollout_id} is not a memtool session (task {t.task!r})")
        groups[t.info["mode"]].append(t)
    return {mode: _summary(g) for mode, g in groups.items()}


def format_table(summary: dict[str, dict]) -> str:
    cols = ["sessions", "task_completion", "tool_correctness", "removal_ratio", "removal_ratio_3turn",
            "residual_after_peaks", "loaded_mean", "loaded_max", "limit_breaches", "format_errors", "reward"]
    lines = ["| mode | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for mode, s in summary.items():
        lines.append(f"| {mode} | " + " | ".join(f"{s[c]:.3f}" if isinstance(s[c], float) else str(s[c])
                                                  for c in cols) + " |")
    return "\n".join(lines)


def loaded_per_turn(trajs: list) -> list[float]:
    """Tools loaded at the end of each turn, averaged over the sessions that reached that turn."""
    by_turn = defaultdict(list)
    for t in trajs:
        for i, turn in enumerate(t.info["turns"]):
            by_turn[i].append(turn["loaded"])
    return [float(mean(by_turn[i])) for i in range(len(by_turn))]


def plot_loaded_tools(trajs: list, path: str | Path) -> Path:
    """Loaded tools at the end of each turn, averaged over sessions, one line per mode (PNG)."""
    per_mode = defaultdict(list)
    for t in trajs:
        per_mode[t.info["mode"]].append(t)
    return plot_loaded_curves({mode: loaded_per_turn(g) for mode, g in sorted(per_mode.items())}, path)


def plot_loaded_curves(curves: dict[str, list[float]], path: str | Path) -> Path:
    """One line per label (a mode, or model · mode): the mean tools loaded at the end of turn 1, 2, ... (PNG)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    for i, (label, ys) in enumerate(curves.items()):
        ax.plot(range(1, len(ys) + 1), ys, marker="osD^v<>p"[i % 8], markersize=4, label=label,
                linestyle=("-", "--", ":", "-.")[i % 4])  # modes that coincide stay visible
    ax.set(xlabel="turn (request)", ylabel="tools loaded", title="MemTool: loaded tools per turn")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
