"""The published benchmarks' REAL release files (small excerpts under tests/data/real/, each with its PROVENANCE.md):
the importers read them as published and the scorers give the verdicts of each benchmark's own scoring code,
run here beside ours where its licence lets it be kept (BABILong, Apache-2.0; WorkBench, MIT)."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from sculptor_rl.tasks import benchmark_scoring as bs
from sculptor_rl.tasks.common import context_spans
from sculptor_rl.tasks.importers import import_benchmark

REAL = Path(__file__).parent / "data" / "real"


def official(path: Path, name: str):
    """A benchmark's own module, kept beside its data (never installed)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- BABILong (booydar/babilong) ----

BABILONG = REAL / "babilong"
babilong_metrics = official(BABILONG / "official_metrics.py", "babilong_official_metrics")
babilong_prompts = official(BABILONG / "official_prompts.py", "babilong_official_prompts")


def babilong_record(task: str, target: str, question: str) -> dict:
    return {"id": "x", "answer": target, "meta": {"benchmark": "babilong", "babilong_task": task, "question": question}}


def test_babilong_label_sets_are_the_official_ones():
    assert {k: sorted(v) for k, v in bs.BABILONG_LABELS.items()} == {
        k: sorted(v) for k, v in babilong_metrics.TASK_LABELS.items()}


def test_babilong_verdicts_on_published_model_outputs_are_the_official_ones():
    """76 outputs of Phi-3-mini and Gemini 3 Flash the repository publishes (babilong_evals/), right and wrong."""
    with open(BABILONG / "predictions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    verdicts = [babilong_metrics.compare_answers(r["target"], r["output"], r["question"],
                                                 babilong_metrics.TASK_LABELS[r["task"]]) for r in rows]
    assert len(rows) == 76 and 20 < sum(verdicts) < 56  # both kinds present
    ours = [bs.score(babilong_record(r["task"], r["target"], r["question"]), r["output"]) for r in rows]
    assert ours == [float(v) for v in verdicts]


@pytest.mark.parametrize("task", sorted(babilong_metrics.TASK_LABELS, key=lambda t: int(t[2:])))
def test_babilong_verdicts_equal_compare_answers_on_every_label_of_every_task(task):
    """Each label as the target, against outputs naming it, another label, two labels, labels in the question,
    a later sentence, a context echo: the official function's verdict each time (qa7's "none" is never right
    there, since it names "one" too, nor here)."""
    labels = babilong_metrics.TASK_LABELS[task]
    for target in labels + (["apple,milk", "milk,football"] if task == "qa8" else []):
        other = next(label for label in labels if label.lower() not in target.lower())
        questions = ["Where is Mary? ", f"Is it the {other} or not?", f"What about {target}?"]
        outputs = [f"{target}.", f"The answer is {target.upper()}", f"{other}. {target}.", f"{target} or {other}.",
                   "Three, not two.", f"<context>{target}", "", f"Answer: {target.replace(',', ' and ')}"]
        for question in questions:
            for output in outputs:
                want = babilong_metrics.compare_answers(target, output, question, labels)
                assert bs.score(babilong_record(task, target, question), output) == float(want), (output, question)
    assert bs.score(babilong_record("qa7", "two", "How many objects is Mary carrying?"), "Three, not two.") == 0.0


def test_babilong_prompt_is_the_official_default_template_with_its_default_prompts(tmp_path):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(babilong_prompts.DEFAULT_PROMPTS, ensure_ascii=False), encoding="utf-8")
    with open(BABILONG / "predictions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[::8]
    context = "  Mary moved to the bathroom. The rain fell {softly}.\n"  # stripped, braces kept
    for r in rows:
        path = tmp_path / f"{r['task']}_{r['length']}.jsonl"
        path.write_text(json.dumps({"input": context, "question": r["question"], "target": r["target"]}) + "\n")
        (record,) = import_benchmark("babilong", path, prompts=str(prompts))
        want = babilong_prompts.get_formatted_input(context, r["question"], **babilong_prompts.DEFAULT_PROMPTS[
            r["task"]], template=babilong_prompts.DEFAULT_TEMPLATE)
        assert record["messages"][0]["content"] == want
        ((i, s, e),) = context_spans(record)
        assert record["messages"][i]["content"][s:e] == context.strip()
        assert bs.score(record, bs.render_answer(record)) == 1.0 and bs.score(record, "") == 0.0
