"""The training curves (`sculptor_rl.train.curves`): the panels a GSPO run's log history gives, each tool's share of
the calls (Appendix G, Figure 13), and the PNG written beside the checkpoints."""

import pytest

from sculptor_rl.train.curves import panels_for, plot_curves, with_tool_shares


def _rl_history():  # as the GSPO trainer logs it: calls per task for each tool it holds, `other` for the rest
    return [
        {"step": step, "reward": 0.5 + 0.1 * step, "reward_std": 0.2, "accuracy": 0.4, "tool_entropy": 1.0 + step / 10,
         "tools/fold_fragment": 2.0 + step, "tools/restore_fragment": 0.5 * step, "tools/summarize_fragment": 0.0,
         "tools/other": 0.0, "loss": 0.01}
        for step in (1, 2, 3)
    ] + [{"step": 3, "train_runtime": 12.0}]


def test_tool_shares_are_each_tools_fraction_of_the_calls():
    entry = {"step": 2, "tools/fold_fragment": 3.0, "tools/restore_fragment": 1.0, "tools/other": 0.0}
    shares = with_tool_shares(entry)
    assert shares["share/fold_fragment"] == pytest.approx(0.75)
    assert shares["share/restore_fragment"] == pytest.approx(0.25)
    assert shares["share/other"] == 0.0
    assert {k: shares[k] for k in entry} == entry
    no_calls = {"step": 1, "tools/fold_fragment": 0.0}
    assert with_tool_shares(no_calls) == no_calls  # no share where nothing was called (not 0/0)
    assert with_tool_shares({"step": 1, "loss": 1.0}) == {"step": 1, "loss": 1.0}


def test_panels_draw_what_was_logged_and_leave_out_tools_never_called():
    history = [with_tool_shares(e) for e in _rl_history()]
    panels = dict(panels_for(history))
    assert panels["tool calls per task"] == ["tools/fold_fragment", "tools/restore_fragment"]
    assert panels["each tool's share of calls"] == ["share/fold_fragment", "share/restore_fragment"]
    assert panels["tool-usage entropy (bits)"] == ["tool_entropy"]
    assert panels["accuracy"] == ["accuracy"]
    assert "context reduction" not in panels and "seconds per step" not in panels  # not logged: no empty panel
    assert panels_for([{"step": 1, "train_runtime": 3.0}]) == []


def test_plot_curves_writes_a_png_and_nothing_without_metrics(tmp_path):
    path = plot_curves(_rl_history(), tmp_path / "rl" / "curves.png")
    assert path == tmp_path / "rl" / "curves.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert plot_curves([], tmp_path / "empty.png") is None
    assert not (tmp_path / "empty.png").exists()
