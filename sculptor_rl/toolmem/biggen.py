"""BiGGen Bench's published records (prometheus-eval/BiGGen-Bench-Results) → ToolMem experiences.

A row is one model's response to one instance: `id`, `capability`, `task`, `system_prompt`, `input`,
`score_rubric` ({criteria, score1_description .. score5_description}), `response`, `model_name`, and each judge's
`<judge>_score` and `<judge>_feedback` (gpt4, gpt4_04_turbo, claude: one score; prometheus_8x7b(_bgb): a list of
five, averaged here). The paper takes `gpt4_04_turbo` as the ground truth (§3.2), as `judge` does by default.
The tool is the model that answered; the experience format is `sculptor_rl.toolmem.experiences`'. Rows the judge
did not score (a missing or out-of-range score) are left out; a missing column is a ValueError naming the row.
Nothing is downloaded: the user points at the file (`.parquet`, `.jsonl`, ... — `tasks.importers.read_rows`).
"""

from __future__ import annotations

import math
from pathlib import Path

from ..tasks.importers import read_rows
from .experiences import likert

__all__ = ["JUDGES", "import_biggen", "rubric_text"]

JUDGES = ("gpt4_04_turbo", "gpt4", "claude", "prometheus_8x7b", "prometheus_8x7b_bgb")
REQUIRED = ("id", "capability", "task", "system_prompt", "input", "score_rubric", "response", "model_name")


def rubric_text(rubric: dict) -> str:
    """The score rubric as the paper's prompts show it: the criteria, then one line per score."""
    return "\n".join([rubric["criteria"], *(f"{n}: {rubric[f'score{n}_description']}" for n in range(1, 6))])


def _judge_score(value) -> float | None:
    """The judge's 1-5 score (a list of ratings: their mean); None when the judge gave none."""
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        ratings = [v for v in list(value) if isinstance(v, (int, float)) and 1 <= v <= 5]
        return sum(ratings) / len(ratings) if ratings else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 1 <= value <= 5 and math.isfinite(value):
        return float(value)
    return None


def import_biggen(source: str | Path, judge: str = "gpt4_04_turbo", models: list[str] | None = None) -> list[dict]:
    """Experiences of every (instance, model) row of `source` that `judge` scored, optionally only `models`."""
    if judge not in JUDGES:
        raise ValueError(f"unknown judge {judge!r} (known: {', '.join(JUDGES)})")
    out = []
    for where, _, row in read_rows(source):
        for column in (*REQUIRED, f"{judge}_score", f"{judge}_feedback"):
            if column not in row:
                raise ValueError(f"{where}: missing column {column!r} of a BiGGen Bench results record")
        if models is not None and row["model_name"] not in models:
            continue
        score = _judge_score(row[f"{judge}_score"])
        if score is None:
            continue
        prompt = "\n\n".join(p for p in (row["system_prompt"], row["input"]) if p)
        out.append({"id": f"{row['id']}/{row['model_name']}", "task_id": row["id"], "family": row["capability"],
                    "bucket": row["task"], "tool": row["model_name"], "prompt": prompt, "solution": row["response"],
                    "raw": (score - 1) / 4, "score": likert((score - 1) / 4),
                    "rubric": rubric_text(row["score_rubric"]),
                    "feedback": row[f"{judge}_feedback"] or ""})
    return out
