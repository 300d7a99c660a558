"""BiGGen Bench's published records (prometheus-eval) → ToolMem experiences, in both layouts that are public.

- The hub's results (prometheus-eval/BiGGen-Bench-Results): a row is one model's response to one instance: `id`,
  `capability`, `task`, `system_prompt`, `input`, `score_rubric` ({criteria, score1_description ..
  score5_description}), `response`, `model_name`, and each judge's `<judge>_score` and `<judge>_feedback` (gpt4,
  gpt4_04_turbo, claude: one score; prometheus_8x7b(_bgb): a list of five, averaged here). The paper takes
  `gpt4_04_turbo` as the ground truth (§3.2), as `judge` does by default.
- The repository's evaluation output (prometheus-eval/prometheus-eval `BiGGen-Bench/sample_evals.json`, what its
  `run_response_eval.py` writes): one JSON object {id: record}, a record with the instance's columns, `response`,
  `response_model_name`, and one judge's `score` (text, "1".."5"), `feedback` and `eval_model_name` (`judge` does
  not apply: the file names its judge, kept as the experience's `judge`).
The tool is the model that answered; the experience format is `sculptor_rl.envs.toolmem.experiences`', with `judge`
and the row's other columns (`reference_answer`, `instance_idx`, ...) in `meta`. Rows the judge did not score (a
missing or out-of-range score) are left out; a missing column is a ValueError naming the row. Nothing is
downloaded: the user points at the file (`.parquet`, `.jsonl`, ... — `tasks.importers.read_rows` — or the JSON
object).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

from ...longcontext.importers import read_rows
from .experiences import likert

__all__ = ["JUDGES", "import_biggen", "rubric_text"]

JUDGES = ("gpt4_04_turbo", "gpt4", "claude", "prometheus_8x7b", "prometheus_8x7b_bgb")
INSTANCE = ("id", "capability", "task", "system_prompt", "input", "score_rubric", "response")
EVAL_OUTPUT = ("response_model_name", "score", "feedback", "eval_model_name")  # run_response_eval.py's columns


def rubric_text(rubric: dict) -> str:
    """The score rubric as the paper's prompts show it: the criteria, then one line per score."""
    return "\n".join([rubric["criteria"], *(f"{n}: {rubric[f'score{n}_description']}" for n in range(1, 6))])


def _judge_score(value) -> float | None:
    """The judge's 1-5 score (a list of ratings: their mean; text such as "5": its number); None when the judge
    gave none."""
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        ratings = [v for v in list(value) if isinstance(v, (int, float)) and 1 <= v <= 5]
        return sum(ratings) / len(ratings) if ratings else None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 1 <= value <= 5 and math.isfinite(value):
        return float(value)
    return None


def _plain(value):
    """A column's value as JSON holds it (a parquet list arrives as an array)."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)))


def _rows(source: str | Path) -> Iterator[tuple[str, dict]]:
    """(where, row) per record: a JSON object {id: record} (the evaluation output), else `read_rows`' files."""
    path = Path(source)
    if path.suffix.lower() == ".json" and path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
        if isinstance(data, dict):
            for key, row in data.items():
                if not isinstance(row, dict):
                    raise ValueError(f"{path} record {key!r}: not an object")
                yield f"{path} record {key!r}", row
            return
    for where, _, row in read_rows(source):
        yield where, row


def import_biggen(source: str | Path, judge: str = "gpt4_04_turbo", models: list[str] | None = None) -> list[dict]:
    """Experiences of every (instance, model) row of `source` that its judge scored (the hub's: `judge`),
    optionally only `models`."""
    if judge not in JUDGES:
        raise ValueError(f"unknown judge {judge!r} (known: {', '.join(JUDGES)})")
    out = []
    for where, row in _rows(source):
        evaluated = "response_model_name" in row  # run_response_eval.py's layout
        columns = (*INSTANCE, *EVAL_OUTPUT) if evaluated else (*INSTANCE, "model_name", f"{judge}_score",
                                                                 f"{judge}_feedback")
        for column in columns:
            if column not in row:
                raise ValueError(f"{where}: missing column {column!r} of a BiGGen Bench results record")
        model = row["response_model_name"] if evaluated else row["model_name"]
        if models is not None and model not in models:
            continue
        score = _judge_score(row["score"] if evaluated else row[f"{judge}_score"])
        if score is None:
            continue
        prompt = "\n\n".join(p for p in (row["system_prompt"], row["input"]) if p)
        out.append({"id": f"{row['id']}/{model}", "task_id": row["id"], "family": row["capability"],
                    "bucket": row["task"], "tool": model, "prompt": prompt, "solution": row["response"],
                    "raw": (score - 1) / 4, "score": likert((score - 1) / 4),
                    "rubric": rubric_text(row["score_rubric"]),
                    "feedback": (row["feedback"] if evaluated else row[f"{judge}_feedback"]) or "",
                    "meta": {"judge": row["eval_model_name"] if evaluated else judge,
                             **{k: _plain(v) for k, v in row.items() if k not in columns}}})
    return out


def import_records(fmt: str, source: str | Path, judge: str = "gpt4_04_turbo", models: str | None = None) -> list[dict]:
    """`sculptor-rl data import --format biggen`: the experiences of BiGGen Bench's published file (ToolMem's
    memory is built from them; `models`: comma-separated)."""
    return import_biggen(source, judge, models.split(",") if models else None)
