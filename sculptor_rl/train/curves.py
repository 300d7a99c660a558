"""Training curves as a PNG next to the checkpoints (`output_dir/curves.png`), from the Trainer's log history.

Written on every checkpoint save and at the end of training; panels appear for the metrics the run logged.
"""

from __future__ import annotations

import math
from pathlib import Path

from transformers import TrainerCallback

__all__ = ["plot_curves", "panels_for", "with_tool_shares", "CurvesCallback"]

PANELS = [  # (title, metrics drawn in it)
    ("reward", ["reward"]),
    ("accuracy", ["accuracy", "correct"]),
    ("format errors", ["format_error_rate"]),
    ("tool calls per task", ["tool_calls_per_task", "tools/*"]),  # tools/*: every tool the run logged
    ("each tool's share of calls", ["share/*"]),  # Appendix G's Figure 13 (left), from tools/*
    ("tool-usage entropy (bits)", ["tool_entropy"]),
    ("restores after fold per task", ["restores_after_fold"]),
    ("context reduction", ["context_reduction"]),
    ("samples per rollout", ["samples_per_rollout"]),
    ("loss", ["loss", "lm_loss"]),
    ("seconds per step", ["time/generation_s", "time/scoring_s", "time/training_s", "time/weight_sync_s"]),
]


def with_tool_shares(entry: dict) -> dict:
    """The entry with `share/<tool>` added: each tool's fraction of the step's calls (none where no call was made)."""
    counts = {k.removeprefix("tools/"): v for k, v in entry.items() if k.startswith("tools/")}
    total = sum(counts.values())
    if not total:
        return entry
    return {**entry, **{f"share/{tool}": n / total for tool, n in counts.items()}}


def panels_for(log_history: list[dict]) -> list[tuple[str, list[str]]]:
    """The PANELS that have data: (title, the logged metrics drawn in it)."""
    logged = list(dict.fromkeys(k for e in log_history for k in e))
    # a wildcard's series that stayed 0 throughout (a tool never called) would only crowd the legend
    moved = {k for e in log_history for k, v in e.items() if isinstance(v, (int, float)) and v}
    panels = [(title, [k for key in keys for k in logged
                       if k == key or key.endswith("*") and k.startswith(key[:-1]) and k in moved])
              for title, keys in PANELS]
    return [(title, keys) for title, keys in panels if keys]


def plot_curves(log_history: list[dict], path: str | Path) -> Path | None:
    """One panel per group of logged metrics against the step; None when nothing was logged yet."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log_history = [with_tool_shares(e) for e in log_history]
    panels = panels_for(log_history)
    if not panels:
        return None
    cols = 3
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3 * rows), squeeze=False)
    # a tool keeps its colour in the counts and the shares (C0 is the panels' first series: calls per task)
    tools = sorted({k.split("/", 1)[1] for _, keys in panels for k in keys if k.startswith(("tools/", "share/"))})
    for ax, (title, keys) in zip(axes.flat, panels):
        for key in keys:
            points = [(e["step"], e[key]) for e in log_history if e.get(key) is not None]
            steps, values = zip(*points)
            name = key.split("/", 1)[-1]
            colour = f"C{1 + tools.index(name) % 9}" if key.startswith(("tools/", "share/")) else None
            ax.plot(steps, values, marker="o" if len(points) < 30 else None, label=name, color=colour)
            if key == "reward" and any("reward_std" in e for e in log_history):
                std = [e.get("reward_std", 0.0) for e in log_history if e.get(key) is not None]
                ax.fill_between(steps, [v - s for v, s in zip(values, std)], [v + s for v, s in zip(values, std)],
                                alpha=0.2)
        ax.set_title(title)
        ax.set_xlabel("step")
        if len(keys) > 1:
            ax.legend(fontsize="x-small")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


class CurvesCallback(TrainerCallback):
    def _plot(self, args, state):
        if state.is_world_process_zero:
            plot_curves(state.log_history, Path(args.output_dir) / "curves.png")

    def on_save(self, args, state, control, **kwargs):
        self._plot(args, state)

    def on_train_end(self, args, state, control, **kwargs):
        self._plot(args, state)
