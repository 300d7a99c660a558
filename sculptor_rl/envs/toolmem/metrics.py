"""ToolMem's metrics (paper §3.2 and §4), each with a 95 % interval from `sculptor_rl.stats`.

- score prediction: MAE, RMSE and Pearson's r between predicted and true 1-5 scores (an unparsed prediction
  counts as the worst error the scale allows, 4, so a model cannot gain by not answering);
- tool selection on pairs (A, B) of one task with unequal true scores, A the more capable tool of the two (the
  paper's pairs put it on the left): `<` ("worse") is "A scores below B", `>` ("better") "above". With TP< the
  pairs predicted and truly `<`, P< the pairs predicted `<`, R< the pairs truly `<` (and the same for `>`):
  F1< = 2 TP< / (P< + R<), F1> = 2 TP> / (P> + R>), accuracy = (TP< + TP>) / |D|. A prediction of a tie is in
  neither P< nor P>, so it counts as wrong;
- choosing a tool per task: the mean exact score of the chosen tools' answers, beside the best tool per task (the
  oracle) and each tool always chosen (an unparsed choice scores 0). A choice may be a tie of several tools (the
  tools predicted best, `choices_from_predictions`): it scores their mean, the value of an even pick among them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...stats import bootstrap_mean, interval

__all__ = ["WORST_ERROR", "choice_metrics", "choices_from_predictions", "pearson", "prediction_metrics",
           "selection_metrics"]

WORST_ERROR = 4.0  # |1 - 5|: the error an unparsed prediction counts as


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r; None when either side is constant (r is undefined) or there are fewer than 2 points."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(a) < 2 or a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def _pearson_interval(x: np.ndarray, y: np.ndarray, resamples: int = 2000) -> list[float] | None:
    """The percentile bootstrap interval of r (resamples where r is undefined are left out)."""
    if len(x) < 3:
        return None
    rng = np.random.default_rng(0)
    rs = [r for idx in rng.integers(0, len(x), size=(resamples, len(x))) if (r := pearson(x[idx], y[idx])) is not None]
    return [float(v) for v in np.quantile(rs, [0.025, 0.975])] if len(rs) >= resamples // 2 else None


def prediction_metrics(predicted: Sequence[float | None], true: Sequence[float]) -> dict:
    """MAE, RMSE and Pearson of predictions against true scores (None: unparsed), with 95 % intervals; Pearson
    over the parsed predictions only."""
    errors = [WORST_ERROR if p is None else abs(p - t) for p, t in zip(predicted, true, strict=True)]
    if not errors:
        return {"n": 0}
    squared = [e * e for e in errors]
    ms_ci = bootstrap_mean(squared)
    parsed = [(p, t) for p, t in zip(predicted, true) if p is not None]
    px, py = (np.asarray(v, dtype=np.float64) for v in zip(*parsed)) if parsed else (np.zeros(0), np.zeros(0))
    return {"n": len(errors), "parsed": len(parsed),
            "mae": float(np.mean(errors)), "mae_ci": list(bootstrap_mean(errors)),
            "rmse": math.sqrt(np.mean(squared)), "rmse_ci": [math.sqrt(v) for v in ms_ci],
            "pearson": pearson(px, py), "pearson_ci": _pearson_interval(px, py)}


def selection_metrics(pred_a: Sequence[float | None], pred_b: Sequence[float | None], true_a: Sequence[float],
                      true_b: Sequence[float]) -> dict:
    """F1<, F1> and accuracy over the pairs with unequal true scores (predictions None: no preference)."""
    rows = [(pa, pb, ta, tb) for pa, pb, ta, tb in zip(pred_a, pred_b, true_a, true_b, strict=True) if ta != tb]
    lt = [pa is not None and pb is not None and pa < pb for pa, pb, _, _ in rows]
    gt = [pa is not None and pb is not None and pa > pb for pa, pb, _, _ in rows]
    true_lt = [ta < tb for _, _, ta, tb in rows]
    tp_lt = sum(p and t for p, t in zip(lt, true_lt))
    tp_gt = sum(p and not t for p, t in zip(gt, true_lt))
    r_lt = sum(true_lt)

    def f1(tp: int, p: int, r: int) -> float | None:
        return 2 * tp / (p + r) if p + r else None

    correct = [(p and t) or (g and not t) for p, g, t in zip(lt, gt, true_lt)]
    return {"n": len(rows), "f1_lt": f1(tp_lt, sum(lt), r_lt), "f1_gt": f1(tp_gt, sum(gt), len(rows) - r_lt),
            "accuracy": (tp_lt + tp_gt) / len(rows) if rows else None,
            "accuracy_ci": list(interval([float(c) for c in correct])) if rows else None}


def choice_metrics(rows: Sequence[dict]) -> dict:
    """Rows {"tools", "raw" (each tool's exact score), "predicted" (the chosen tool, None, or a list of tied
    tools)}, one per task; `choices` counts the rows that chose one tool, each tool's and none (None), `ties` those
    whose choice is a tie of several tools."""
    picks = [[t for t in ([p] if isinstance(p, str) else p or []) if t in r["tools"]]
             for r in rows for p in [r["predicted"]]]
    chosen = [float(np.mean([r["raw"][r["tools"].index(t)] for t in ts])) if ts else 0.0 for r, ts in zip(rows, picks)]
    fixed = {t: [r["raw"][r["tools"].index(t)] for r in rows if t in r["tools"]] for t in rows[0]["tools"]}
    return {"n": len(rows), "chosen": float(np.mean(chosen)), "chosen_ci": list(bootstrap_mean(chosen)),
            "oracle": float(np.mean([max(r["raw"]) for r in rows])),
            "fixed": {t: float(np.mean(v)) for t, v in fixed.items()},
            "choices": {**{t: picks.count([t]) for t in fixed}, None: picks.count([])},
            "ties": sum(len(ts) > 1 for ts in picks)}


def choices_from_predictions(rows: Sequence[dict]) -> list[dict]:
    """Choice rows (`choice_metrics`) from predict rows {"task_id", "tools": [tool], "predicted" (1-5 or None),
    "raw": [exact score]}: per task with two tools or more, the tools predicted best (an unparsed prediction ranks
    below any score; None when no prediction parsed)."""
    tasks: dict[str, dict[str, tuple]] = {}
    for r in rows:
        tasks.setdefault(r["task_id"], {})[r["tools"][0]] = (r["predicted"], r["raw"][0])
    out = []
    for found in tasks.values():
        if len(found) < 2:
            continue
        scores = {t: p for t, (p, _) in found.items() if p is not None}
        top = max(scores.values(), default=None)
        best = [t for t, p in scores.items() if p == top] if scores else None
        out.append({"tools": list(found), "raw": [raw for _, raw in found.values()], "predicted": best})
    return out
