"""Scripted teachers (sculptor_rl.envs.teacher) solving generated tasks in the real ACM environment.

Reduction = 1 - rendered chars / original chars of the first messages (system + user) at the end of the
rollout; the assistant and tool messages the rollout appended are not counted. chars/4 is the token proxy,
so the ratio is the same in approximate tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from statistics import mean
from collections.abc import Callable

import pytest

from sculptor_rl.envs import tasks
from sculptor_rl.acm import Workspace
from sculptor_rl.envs.acm import AcmEnv
from sculptor_rl.envs.registry import family_names, teacher as teacher_for
from sculptor_rl.longcontext import babilong
from sculptor_rl.toolcalls import assistant_message, calls_of

MAX_CALLS = 20


@dataclass
class Rollout:
    score: float
    reduction: float
    calls: int
    failed: list[str]  # texts of calls that did not succeed
    transcript: list[dict]


def rollout(task: dict, after_calls: Callable[[Workspace, list], None] = lambda ws, calls: None) -> Rollout:
    """render -> teacher -> parse -> append the completion -> run each call and append its result -> repeat.
    `after_calls(ws, calls)` runs after each completion's calls (tests use it to tamper with the context)."""
    ws = AcmEnv(task, seed=0).workspace  # the task's messages after the ACM system prompt
    own = len(ws.render())
    teacher = teacher_for(task["task"])
    hidden = {k: v for k, v in task.items() if k != "answer"}  # a teacher must not need the answer
    calls, failed = 0, []
    while True:
        turn = teacher(hidden, ws.render())
        turn = turn if isinstance(turn, dict) else assistant_message(content=turn)
        ws.append(turn)
        made = calls_of(turn)
        if not made:
            completion = turn["content"]
            break
        for call in made:
            calls += 1
            assert calls <= MAX_CALLS, "too many tool calls"
            result = ws.execute(call.name, call.arguments)
            failed += [] if result.ok else [result.text]
            ws.append({"role": "tool", "content": result.text})
        after_calls(ws, made)
    shown, original = (sum(len(m["content"]) for m in messages[:own]) for messages in (ws.render(), ws.original()))
    return Rollout(tasks.score(task, completion), 1 - shown / original, calls, failed, ws.render())


# (task, params, minimum accuracy, minimum mean reduction)
DEFAULTS = [("pi_llm", {}, 0.95, 0.85), ("needlebench", {}, 0.9, 0.85), ("mrcr", {}, 0.9, 0.85),
            ("babilong", {}, 0.9, 0.85)]


@pytest.mark.parametrize("task,params,accuracy,reduction", DEFAULTS)
def test_teacher_on_default_tasks(task, params, accuracy, reduction):
    results = [rollout(r) for r in tasks.generate(task, 50, seed=1, **params)]
    assert not [f for r in results for f in r.failed]
    assert mean(r.score for r in results) >= accuracy
    assert mean(r.reduction for r in results) >= reduction
    assert max(r.calls for r in results) < MAX_CALLS


@pytest.mark.parametrize("task,params", [
    ("pi_llm", {"keys": 8, "updates": 80}),  # more updates than search_context shows at once
    ("pi_llm", {"keys": 3, "updates": 30, "query": "one"}),
    ("needlebench", {"needles": 5, "context_tokens": 1000}),
    ("needlebench", {"needles": 2, "context_tokens": 6000}),
    ("mrcr", {"needles": 4, "turns": 40, "context_tokens": 3000}),
    ("mrcr", {"needles": 3, "turns": 8, "context_tokens": 300}),  # tiny replies: gaps must still be folded
    ("babilong", {"facts": 20, "context_tokens": 1000}),
    ("babilong", {"facts": 1, "context_tokens": 300}),
])
def test_teacher_on_other_buckets(task, params):
    results = [rollout(r) for r in tasks.generate(task, 10, seed=2, **params)]
    assert not [f for r in results for f in r.failed]
    assert mean(r.score for r in results) >= 0.9
    assert min(r.reduction for r in results) > 0.3
    assert max(r.calls for r in results) < MAX_CALLS


def test_pi_llm_fold_ends_where_the_student_can_see():
    """The pi_llm teacher folds the stream up to its last TAIL_UPDATES updates, a fixed distance from the question,
    not up to the first of the asked keys' last updates (a place only the answer tells); it reaches further back
    only when an asked key's last update lies before that tail."""
    from sculptor_rl.envs.acm.teacher import TAIL_UPDATES

    structural = 0
    for task in tasks.generate("pi_llm", 40, seed=5, keys=3, updates=64):
        lines = task["messages"][0]["content"].split("\n\n")[1].split("\n")
        first_last = min(max(i for i, line in enumerate(lines) if line.startswith(f"{key}: "))
                         for key in task["answer"])
        call = calls_of(teacher_for("pi_llm")(task, AcmEnv(task).workspace.render()))[0]
        end = lines.index(next(line for line in lines if line.endswith(call.arguments["end_marker"])))
        assert lines[0].startswith(call.arguments["start_marker"])
        assert end == min(len(lines) - TAIL_UPDATES, first_last) - 1
        structural += first_last >= len(lines) - TAIL_UPDATES
    assert structural >= 34  # ~95 % of tasks with 3 keys


@pytest.mark.parametrize("task", ["pi_llm", "needlebench", "babilong"])
def test_teacher_on_the_official_formats(task):
    """format=official (one-line PI-LLM stream, `<Document>`, `<context>`): the context comes from meta.context,
    the answer in the benchmark's own form, scored by its rule."""
    results = [rollout(r) for r in tasks.generate(task, 10, seed=2, format="official")]
    assert not [f for r in results for f in r.failed]
    assert mean(r.score for r in results) == 1.0 and min(r.reduction for r in results) > 0.5


def test_a_context_the_teachers_cannot_fold_is_a_clear_error():
    (chat,) = tasks.generate("mrcr", 1, format="official")  # MRCR's chat: the context is 40 messages
    with pytest.raises(ValueError, match=r"task 'mrcr-s0-00000': .* 40 span\(s\) in 40 message\(s\)"):
        rollout(chat)
    (record,) = tasks.generate("babilong", 1)
    with pytest.raises(ValueError, match="task 'babilong-s0-00000': no meta.context"):
        rollout({**record, "meta": {k: v for k, v in record["meta"].items() if k != "context"}})
    with pytest.raises(ValueError, match="task 'babilong-s0-00000': the babilong teacher needs meta.person"):
        rollout({**record, "meta": {k: v for k, v in record["meta"].items() if k != "person"}})


def fold_before_the_answer(markers: dict) -> Callable[[Workspace, list], None]:
    """A `rollout` hook that fragments and folds the span `markers` name after the teacher's folds, just before it
    answers (its answer must then come from what is left visible)."""

    def hide(ws: Workspace, calls: list) -> None:
        if calls[-1].name == "fold_fragment":  # the teacher's last step: it answers next
            made = ws.call("fragment_context", {**markers, "num_fragments": 1})
            ws.call("fold_fragment", {"fragment_id": re.search(r"^- (f[a-z0-9]{5}):", made, re.M)[1]})

    return hide


def test_answer_comes_from_the_visible_context():
    """Folding the kept fact just before the teacher answers makes its answer wrong: it reads the context."""
    task = tasks.generate("babilong", 1, seed=3)[0]
    user = task["messages"][0]["content"]
    fact = [m for m in babilong.FACT.finditer(user) if m["person"] == task["meta"]["person"]][-1]
    # The fact is unique; the end marker is the character after it (it must follow the start marker).
    hide_fact = fold_before_the_answer({"start_marker": fact[0], "end_marker": user[fact.end()]})
    assert rollout(task).score == 1.0
    assert rollout(task, hide_fact).score == 0.0


def test_registry():
    assert all(callable(teacher_for(family)) for family in family_names())  # every family has its teacher
    with pytest.raises(ValueError, match="no scripted teacher"):
        teacher_for("chess")
