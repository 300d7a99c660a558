"""Saved eval runs → ToolMem experiences: a tool is a model in one mode (`sft_final/acm`, `rl_final/acm`,
`smollm2-135m-instruct/full`), scored exactly by the task family's scorer as the run recorded it.

`sculptor-rl eval` saves each (model, mode) run under `OUT/runs/<model>/<mode>/`: `trajectories.jsonl` (one
trajectory per task: its `task_id`, final `answer`, exact `score`, `stop_reason`, ...) and `summary.json`, written
last (a run without it is incomplete). `eval_run_experiences` turns such run directories, with the task records
they ran on (the eval's data file), into experiences of the shape of `sculptor_rl.envs.toolmem.experiences`: the tool
is "<model dir>/<mode dir>", `raw` the trajectory's score, `score` its 1-5 (`likert`), `prompt` the task as a
predictor sees it (`experiences._prompt`), `feedback` what the model answered and what was right. Experiences
come task by task (the tasks file's order), the runs in the order given within a task. Nothing is skipped: a
malformed line, a task id with no record, a task run twice, a score outside [0, 1], a record of another family
than the trajectory's or of no long-context family is a ValueError naming the file and line.

A run covers one task set, so `split_by_task` splits its experiences into train and test by task (disjoint,
deterministic by a seed). Records for the `toolmem` family come from `family.from_experiences` (predict and
select: kind choose re-runs a context strategy's view of the task, which a model tool has not).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from ...jsonl import iter_jsonl
from ...records import load_tasks
from ...trajectory import Trajectory
from .experiences import FAMILY_MODULES, RUBRIC, _prompt, likert

__all__ = ["eval_run_experiences", "split_by_task"]

FEEDBACK_CHARS = 300  # of an answer quoted in the feedback


def _quote(text: str) -> str:
    return repr(text if len(text) <= FEEDBACK_CHARS else text[:FEEDBACK_CHARS] + " ...")


def _run_experiences(run: Path, tasks: dict[str, dict], tasks_file: str) -> list[dict]:
    path, tool = run / "trajectories.jsonl", f"{run.resolve().parent.name}/{run.resolve().name}"
    if not path.is_file():
        raise ValueError(f"{run}: no trajectories.jsonl (an eval run directory is OUT/runs/<model>/<mode>)")
    if not (run / "summary.json").is_file():
        raise ValueError(f"{run}: not a complete eval run (no summary.json beside trajectories.jsonl; eval writes "
                         "it last)")
    out, seen = [], {}
    for where, obj in iter_jsonl(path):
        try:
            traj = Trajectory.from_json(obj)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{where}: not a trajectory record ({type(e).__name__}: {e})") from None
        record = tasks.get(traj.task_id)
        if record is None:
            raise ValueError(f"{where}: task {traj.task_id!r} has no record in {tasks_file}")
        if traj.task_id in seen:
            raise ValueError(f"{where}: task {traj.task_id!r} again (first at {seen[traj.task_id]})")
        seen[traj.task_id] = where
        if record["task"] != traj.task or record["task"] not in FAMILY_MODULES:
            raise ValueError(f"{where}: a {traj.task} trajectory of the {record['task']} record {traj.task_id!r} "
                             f"(experiences are of the long-context families: {', '.join(FAMILY_MODULES)})")
        if isinstance(traj.score, bool) or not 0 <= traj.score <= 1:
            raise ValueError(f"{where}: score {traj.score!r} is not an exact score in [0, 1]")
        try:
            prompt = _prompt(record)
        except KeyError as e:
            raise ValueError(f"{where}: the record {traj.task_id!r} in {tasks_file} has no meta {e} (a generated "
                             "long-context record states its size, length and question)") from None
        raw, gold = float(traj.score), FAMILY_MODULES[record["task"]].render_answer(record["answer"])
        said = f"answered {_quote(traj.answer)}" if traj.answer is not None else \
            f"gave no answer (stopped: {traj.stop_reason})"
        feedback = (f"{tool} ({traj.num_tool_calls} tool calls, context {traj.context_tokens_before} -> "
                    f"{traj.context_tokens_after} tokens) {said}; the right answer is {_quote(gold)}. Exact score "
                    f"{raw:.2f}, so {likert(raw)}/5.")
        out.append({"id": f"{record['id']}/{tool}", "task_id": record["id"], "family": record["task"],
                    "bucket": record["meta"]["bucket"], "tool": tool, "prompt": prompt,
                    "solution": traj.answer or "", "raw": raw, "score": likert(raw), "rubric": RUBRIC,
                    "feedback": feedback})
    if not out:
        raise ValueError(f"{path}: no trajectories in it")
    return out


def eval_run_experiences(runs: Sequence[str | Path], tasks: str | Path) -> list[dict]:
    """The experiences of saved eval runs (`OUT/runs/<model>/<mode>` directories) on the task records of `tasks`
    (the eval's data file, `.jsonl` or `.parquet`), task by task."""
    records = {r["id"]: r for r in load_tasks(tasks)}
    per_run = [_run_experiences(Path(run), records, str(tasks)) for run in runs]
    tools = [run[0]["tool"] for run in per_run]
    if len(set(tools)) < len(tools):
        raise ValueError(f"a tool is given twice: {tools}")
    order = {task_id: i for i, task_id in enumerate(records)}
    return sorted((e for run in per_run for e in run), key=lambda e: order[e["task_id"]])  # stable: runs in order


def split_by_task(experiences: Sequence[dict], test_fraction: float = 0.5,
                  seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train, test): the experiences of disjoint task sets, `test_fraction` of the tasks (rounded) in test, drawn
    deterministically by `seed`; each keeps the experiences' order. Both must hold a task."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    tasks = sorted({e["task_id"] for e in experiences})
    random.Random(f"toolmem-split:{seed}").shuffle(tasks)
    cut = round(len(tasks) * test_fraction)
    if not 0 < cut < len(tasks):
        raise ValueError(f"{len(tasks)} tasks cannot be split {1 - test_fraction:g}/{test_fraction:g} into a train "
                         "and a test set that both hold a task")
    test = set(tasks[:cut])
    return [e for e in experiences if e["task_id"] not in test], [e for e in experiences if e["task_id"] in test]
