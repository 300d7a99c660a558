"""MemTool metrics (the paper's eq. 1-5), the RL reward, and the plot of loaded tools per turn.

All read `Trajectory.info["turns"]` (one record per request, see `envs.memtool.Turn`): A_t catalogue tools added
and R_t removed during turn t, N_t loaded at its end (the management tools are not counted: an agent that never
loads a tool has N = 0, as the paper's GPT-4.1 Nano row reads), its calls and whether it was completed.

The paper's definitions (the default):
- eq. 1, removal ratio: ΣR / ΣA over the session;
- eq. 2, avg. removal ratio 3T: (1/(T-2)) Σ_{t=3..T} (R_{t-2}+R_{t-1}+R_t) / (A_{t-2}+A_{t-1}+A_t), a plain mean
  over every 3-turn window. The paper leaves a window that added nothing undefined; here it counts 0 (a
  session that adds nothing scores 0.000, like the GPT-4.1 Nano row of Table 2), and a window that also removes
  earlier additions may exceed 1. Undefined (NaN) for sessions shorter than 3 turns;
- eq. 3, avg. residual 3T: (1/K) Σ_k (1/3) Σ_{i=1..3} N_{p_k+i}, the tools loaded in exactly the 3 turns after
  each peak p_k. The paper does not define a peak; here a peak is a turn whose N exceeds the turn before (N_0 = 0)
  and is not exceeded by the turn after (a plateau peaks at its first turn); only peaks followed by 3 turns count.
  K = 0 gives 0 when no tool was ever loaded (nothing remains; Table 2's Nano row), NaN otherwise;
- eq. 4, task completion: per request, the LLM judge's alignment score when the env has a judge (`judge_url`),
  else the exact check (every asked value in the reply); unreached requests count 0;
- eq. 5, tool correctness (DeepEval's default, names only): per request, the share of the expected tools that
  were called (and ran); the mean over the requests reached.
Our earlier definitions stay available as named variants (`variant="clipped"` / `"upto3"` / `"calls"`):
  removal_ratio_3turn_clipped: the mean of min(1, ΣR/ΣA) over the windows that added tools (NaN if none);
  residual_after_peaks_upto3: peaks with at least one turn after them, the mean over the (up to) 3 next turns;
  tool_correctness_calls: calls that are one of the request's calls, name and arguments / all catalogue calls.

`summarize` pools sessions: it averages over every window, peak and request of all of them, and gives each
of the four Table 2 numbers a 95 % interval over those units (`sculptor_rl.stats`: for the per-request rates,
Wilson when every value is 0 or 1, else a bootstrap of the mean; for the window ratios and residual counts, a
bootstrap of the mean). Windows overlap and requests of one session are not independent,
so these intervals are narrower than an interval over sessions would be; read them as a lower bound on the
uncertainty.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from statistics import mean

from ...stats import bootstrap_mean, interval

__all__ = ["report_table", "removal_ratio", "window_removal_ratios", "avg_removal_ratio_3t", "peaks", "peak_residuals",
           "avg_residual_3t", "request_completion", "request_correctness", "session_reward", "summarize",
           "format_table", "table2_cells", "TABLE2", "loaded_per_turn", "plot_loaded_tools", "plot_loaded_curves"]

WINDOW = 3
TABLE2 = ("avg_removal_ratio_3t", "avg_residual_3t", "tool_correctness", "task_completion")  # Table 2's columns
RATES = ("tool_correctness", "task_completion")  # per-request values in [0, 1]; the others are ratios and counts


def _ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


def _mean(values: list[float]) -> float:
    return float(mean(values)) if values else math.nan


def removal_ratio(turns: list[dict]) -> float:
    """eq. 1: ΣR / ΣA (NaN when nothing was added)."""
    return _ratio(sum(t["removed"] for t in turns), sum(t["added"] for t in turns))


def window_removal_ratios(turns: list[dict], variant: str = "paper") -> list[float]:
    """The 3-turn windows' ratios. paper: ΣR/ΣA of every window t = 3..T (0 where ΣA = 0); clipped: min(1, ΣR/ΣA)
    of the windows that added tools (one window if there are fewer than 3 turns)."""
    if variant == "paper":
        spans = [turns[i - WINDOW:i] for i in range(WINDOW, len(turns) + 1)]
        return [_ratio(sum(t["removed"] for t in s), added) if (added := sum(t["added"] for t in s)) else 0.0
                for s in spans]
    if variant == "clipped":
        spans = [turns[i:i + WINDOW] for i in range(max(1, len(turns) - WINDOW + 1))]
        return [min(1.0, sum(t["removed"] for t in s) / added) for s in spans
                if (added := sum(t["added"] for t in s))]
    raise ValueError(f"unknown variant {variant!r} (paper | clipped)")


def avg_removal_ratio_3t(turns: list[dict], variant: str = "paper") -> float:
    """eq. 2 (paper) or its clipped variant, for one session."""
    return _mean(window_removal_ratios(turns, variant))


def peaks(loaded: list[int]) -> list[int]:
    """0-based turns where the loaded count N rises above the turn before (N before the first turn: 0) and the next
    turn does not exceed it."""
    return [i for i in range(len(loaded) - 1) if loaded[i] > (loaded[i - 1] if i else 0) and loaded[i] >= loaded[i + 1]]


def peak_residuals(turns: list[dict], variant: str = "paper") -> list[float]:
    """Per peak, the mean N over the turns after it. paper: exactly the next 3 (peaks without 3 turns after them
    are left out); upto3: the next 1 to 3."""
    if variant not in ("paper", "upto3"):
        raise ValueError(f"unknown variant {variant!r} (paper | upto3)")
    n = [t["loaded"] for t in turns]
    need = WINDOW if variant == "paper" else 1
    return [mean(n[p + 1:p + 1 + WINDOW]) for p in peaks(n) if p + need < len(n)]


def _residual_units(turns: list[dict], variant: str = "paper") -> list[float]:
    """The peak residuals, or [0] for a session that never loaded a tool (K = 0 but nothing remains)."""
    return peak_residuals(turns, variant) or ([] if any(t["loaded"] for t in turns) else [0.0])


def avg_residual_3t(turns: list[dict], variant: str = "paper") -> float:
    """eq. 3 (paper) or its up-to-3 variant, for one session: the mean residual over the peaks (K = 0: 0 when
    nothing was ever loaded, else NaN)."""
    return _mean(_residual_units(turns, variant))


def request_completion(turns: list[dict], requests: int) -> list[float]:
    """eq. 4 per request: the judge's score where there is one, else 1/0 for the exact check; unreached requests
    (the rollout stopped) count 0."""
    done = [t["judged"] if t.get("judged") is not None else float(t["completed"]) for t in turns]
    return done + [0.0] * (requests - len(done))


def request_correctness(turns: list[dict]) -> list[float]:
    """eq. 5 per request reached (DeepEval's default): expected tools called / expected tools."""
    return [t["expected_called"] / t["expected"] for t in turns if t["expected"]]


def session_reward(traj, cfg, loaded_tools_penalty: float = 0.0) -> float:
    """The RL reward: task completion (the score, in [0, 1]) minus `loaded_tools_penalty` × mean tools loaded per
    turn; `cfg.format_error_penalty` (-1) on a format error or a limit error, `cfg.cap_penalty` (-1) when a cap
    stopped the rollout or failed one of its requests."""
    turns = traj.info["turns"]
    if traj.format_errors or any(t["breaches"] for t in turns):
        return cfg.format_error_penalty
    if traj.stop_reason != "answer" or any(t.get("capped") for t in turns):
        return cfg.cap_penalty
    return traj.score - loaded_tools_penalty * mean(t["loaded"] for t in turns)


def _summary(trajs: list) -> dict:
    sessions = [t.info["turns"] for t in trajs]
    flat = [t for ts in sessions for t in ts]
    units = {  # the values each Table 2 number averages, pooled over sessions
        "avg_removal_ratio_3t": [r for ts in sessions for r in window_removal_ratios(ts)],
        "avg_residual_3t": [r for ts in sessions for r in _residual_units(ts)],
        "tool_correctness": [c for ts in sessions for c in request_correctness(ts)],
        "task_completion": [c for t in trajs for c in request_completion(t.info["turns"], t.info["requests"])],
    }
    out = {"sessions": len(trajs), "requests": sum(t.info["requests"] for t in trajs), "turns": len(flat),
           **{k: _mean(v) for k, v in units.items()},
           "ci": {k: list(ci) if (ci := (interval if k in RATES else bootstrap_mean)(v)) else None
                  for k, v in units.items()},
           "judged": any(t.get("judged") is not None for t in flat),
           "removal_ratio": removal_ratio(flat),
           "removal_ratio_3turn_clipped": _mean([r for ts in sessions for r in window_removal_ratios(ts, "clipped")]),
           "residual_after_peaks_upto3": _mean([r for ts in sessions for r in _residual_units(ts, "upto3")]),
           "tool_correctness_calls": _ratio(sum(t["correct_calls"] for t in flat), sum(t["calls"] for t in flat)),
           "loaded_mean": _mean([t["loaded"] for t in flat]),
           "loaded_max": max((t["loaded"] for t in flat), default=0),
           "limit_breaches": sum(t["breaches"] for t in flat),
           "capped_requests": sum(bool(t.get("capped")) for t in flat),
           "format_errors": sum(t.format_errors for t in trajs),
           "tool_calls": sum(t.num_tool_calls for t in trajs) / len(trajs),
           "reward": _mean([t.reward for t in trajs])}
    return out


def summarize(trajs: list) -> dict[str, dict]:
    """The metrics per mode (memtool trajectories only; grouped by `info["mode"]`)."""
    groups = defaultdict(list)
    for t in trajs:
        if t.info.get("env") != "memtool":
            raise ValueError(f"rollout {t.rollout_id} is not a memtool session (task {t.task!r})")
        groups[t.info["mode"]].append(t)
    return {mode: _summary(g) for mode, g in groups.items()}


def _cell(s: dict, key: str, digits: int) -> str:
    value, ci = s[key], (s.get("ci") or {}).get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "")


def table2_cells(s: dict) -> list[str]:
    """A summary's Table 2 numbers, each with its 95 % interval: avg. removal ratio 3T, avg. residual 3T, tool
    correctness, task completion (– where undefined)."""
    return [_cell(s, key, digits) for key, digits in zip(TABLE2, (3, 2, 2, 2))]


def format_table(summary: dict[str, dict]) -> str:
    """Table 2's layout: one row per mode, then sessions × requests per session."""
    lines = ["| Mode | Avg Removal Ratio 3T | Avg Residual 3T | Tool Correctness | Task Completion | Sessions |",
             "|---|---|---|---|---|---|"]
    for mode, s in summary.items():
        per = s["requests"] // max(1, s["sessions"])
        lines.append(f"| {mode} | " + " | ".join([*table2_cells(s), f"{s['sessions']} × {per}"]) + " |")
    return "\n".join(lines)


def report_table(runs: list[dict], key: str = "memtool") -> str:
    """An eval report's rows model × mode (each run's summary under `key`), laid out like the paper's Table 2 (its
    four metrics with 95 % intervals), then the other tool-management numbers."""
    def num(x, digits: int = 3) -> str:
        return "–" if x is None else f"{x:.{digits}f}"

    header = ["Model", "Mode", "Sessions × requests", "Avg Removal Ratio 3T", "Avg Residual 3T", "Tool Correctness",
              "Task Completion", "Removal ratio", "Loaded (mean)", "Loaded (max)", "Limit breaches",
              "Capped requests", "Format errors", "Tool calls", "Reward", "Wall s"]
    rows = [[run["model"], run["mode"], f"{m['sessions']} × {m['requests'] // max(1, m['sessions'])}",
             *table2_cells(m), num(m["removal_ratio"]), num(m["loaded_mean"], 2), m["loaded_max"],
             m["limit_breaches"], m.get("capped_requests", "–"), m["format_errors"], num(m["tool_calls"], 1),
             num(m["reward"]), f"{run['wall_time']:.0f}"] for run in runs if (m := run.get(key))]
    return "\n".join("| " + " | ".join(str(c) for c in row) + " |" for row in [header, ["---"] * len(header), *rows])


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
