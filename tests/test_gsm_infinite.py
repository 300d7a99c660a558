"""GSM-Infinite (sculptor_rl.longcontext.gsm_infinite): the generator, the release format's importer, the evaluator's rule
and the scripted ACM teacher."""

from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import mean

import pytest
from test_teachers import MAX_CALLS, fold_before_the_answer, rollout

from sculptor_rl.envs import tasks
from sculptor_rl.cli import main
from sculptor_rl.envs.acm.teacher import GSM_CALLS, SEARCH_ARGS
from sculptor_rl.longcontext import gsm_infinite as gi
from sculptor_rl.longcontext.common import approx_tokens
from sculptor_rl.records import context_spans
from sculptor_rl.longcontext.importers import import_benchmark

REAL = Path(__file__).parent / "data" / "real" / "gsm_infinite" / "rows.jsonl"


def context(record: dict) -> str:
    ((i, start, end),) = context_spans(record)
    return record["messages"][i]["content"][start:end]


# ---- the generator ----


def test_deterministic_by_seed():
    batch = gi.generate(6, seed=3, ops=5, context_tokens=1500)
    assert batch == gi.generate(6, seed=3, ops=5, context_tokens=1500)
    assert gi.generate(2, seed=3, ops=5, context_tokens=1500) == batch[:2]  # each record on its own
    assert all(a["messages"] != b["messages"] for a, b in zip(batch, gi.generate(6, seed=4, ops=5,
                                                                                  context_tokens=1500)))


@pytest.mark.parametrize("ops,context_tokens", [(1, 300), (4, 2000), (9, 6000), (20, 1000)])
def test_ops_and_length_are_what_the_parameters_ask(ops, context_tokens):
    for r in gi.generate(10, seed=1, ops=ops, context_tokens=context_tokens):
        text, meta = context(r), r["meta"]
        defs = gi.parse_statements(text)
        assert len(defs) == len(gi.STATEMENT.findall(text)) == len(re.findall(r"\. ?", text))  # each once, all read
        assert all(q in defs for d in defs.values() for q in d[2])  # everything used is defined
        needs = gi.needed(defs, meta["quantity"])
        assert len(needs) == ops and gi.evaluate(defs, meta["quantity"]) == r["answer"]
        assert gi.solution(defs, meta["quantity"]).count("Define ") == ops
        assert all(0 <= gi.evaluate(defs, q) <= gi.MAX_VALUE for q in defs)
        assert context_tokens <= approx_tokens(text) < context_tokens + 50
        assert meta["bucket"] == f"{context_tokens / 1000:g}k/{ops}" if context_tokens >= 1000 else f"300/{ops}"
        assert {"ops": ops, "context_tokens": context_tokens}.items() <= meta.items()
        assert r["meta"]["question"].startswith(gi.ask(meta["quantity"]))
        # a definition fits the window a search hit shows after its query ("<quantity> equals")
        assert max(len(m["expr"]) + 2 for m in gi.STATEMENT.finditer(text)) <= SEARCH_ARGS["context_size"]


def test_every_needed_statement_is_needed():
    r = gi.generate(1, seed=2, ops=6)[0]
    defs = gi.parse_statements(context(r))
    for q in gi.needed(defs, r["meta"]["quantity"]):
        assert gi.evaluate({k: v for k, v in defs.items() if k != q}, r["meta"]["quantity"]) is None


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="ops must be an integer in"):
        gi.generate(1, ops=0)
    with pytest.raises(ValueError, match="context_tokens must be an integer in"):
        gi.generate(1, context_tokens=gi.MAX_CONTEXT_TOKENS + 1)
    (big,) = gi.generate(1, ops=20, context_tokens=gi.MAX_CONTEXT_TOKENS)  # the name lists hold the largest
    assert approx_tokens(context(big)) >= gi.MAX_CONTEXT_TOKENS


def test_the_cli_generates_it(tmp_path):
    out = tmp_path / "gsm.jsonl"
    main(["data", "generate", "--task", "gsm_infinite", "--num", "3", "--param", "ops=3", "--out", str(out)])
    assert tasks.load_tasks(out) == tasks.generate("gsm_infinite", 3, ops=3)


def test_native_scoring():
    r = gi.generate(1, seed=5)[0]
    assert tasks.score(r, tasks.render_answer(r)) == 1.0
    assert tasks.score(r, f"Adding them up, the answer is {r['answer']}.") == 1.0
    assert tasks.score(r, f"Answer: {r['answer'] + 1}") == 0.0 and tasks.score(r, "") == 0.0


# ---- the release format ----


def real_rows() -> list[dict]:
    return [json.loads(line) for line in REAL.read_text().splitlines()]


def test_cli_imports_release_rows(tmp_path, capsys):
    out = tmp_path / "tasks.jsonl"
    main(["data", "import", "--format", "gsm_infinite", "--in", str(REAL), "--out", str(out)])
    assert "wrote 3 gsm_infinite tasks" in capsys.readouterr().out
    records = tasks.load_tasks(out)
    for row, r in zip(real_rows(), records):
        assert r["task"] == "gsm_infinite" and r["meta"]["benchmark"] == "gsm_infinite"
        assert re.fullmatch(rf"gsm_infinite-0-op{row['op']}-{row['template']}-{row['mode']}-{row['id']}-[0-9a-f]{{8}}",
                            r["id"])
        assert context(r) == row["problem"].strip()  # the problem is the long context
        assert r["messages"][0]["content"].endswith(f"Question: {row['question']}")
        assert r["meta"]["question"] == row["question"] and r["meta"]["bucket"] == f"0/{row['op']}"
        kept = {k: row[k] for k in ("op", "template", "mode", "length", "d", "solution")}
        assert kept.items() <= r["meta"].items() and r["meta"]["release_id"] == row["id"]
        assert tasks.score(r, tasks.render_answer(r)) == 1.0 and tasks.score(r, "Answer: 1000.") == 0.0
    assert [r["answer"] for r in records] == [22, 20, 5]


def test_hub_rows_in_parquet_with_their_messages(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = real_rows()[0]
    prompt = f"Problem: {row['problem']} Question: {row['question']} Solution: "
    chat = [{"role": "system", "content": "Answer the questions below."}, {"role": "user", "content": prompt}]
    # a split holds the problems of several generator runs, whose ids repeat
    again = {**row, "problem": row["problem"].replace("equals 4.", "equals 5."), "solution": "... Answer: 23."}
    source = tmp_path / "ops_6-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist([{**row, "messages": chat}, {**again, "messages": chat}]), source)
    with pytest.raises(ValueError, match="row 1: the last user message of column 'messages' does not hold"):
        import_benchmark("gsm_infinite", source)
    pq.write_table(pa.Table.from_pylist([{**row, "messages": chat},
                                         {**again, "messages": [{"role": "user", "content": again["problem"]}]}]),
                   source)
    first, second = import_benchmark("gsm_infinite", source)
    assert first["messages"] == [{"role": "user", "content": prompt}]  # the hub's prompt, kept
    assert first["meta"]["system_prompt"] == "Answer the questions below." and context(first) == row["problem"].strip()
    assert first["id"] != second["id"] and (first["answer"], second["answer"]) == (22, 23)
    with pytest.raises(ValueError, match="line 2: duplicate id"):  # the same problem twice
        import_benchmark("gsm_infinite", rows_file(tmp_path, [row, row]))
    with pytest.raises(ValueError, match="line 1: column 'solution' has no integer after 'Answer: '"):
        import_benchmark("gsm_infinite", rows_file(tmp_path, [{**row, "solution": "Answer: unknown."}]))


def rows_file(tmp_path, rows: list[dict]) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# ---- the evaluator's rule ----

# (response, the integer GSM-Infinite's evaluator reads) for each of its keywords and its edge cases
OFFICIAL = [
    ("Answer: 22.", 22), ("The total is 22 owls, so... Answer: 22", 22), ("answer: 22\nmore text", 22),
    ("$\\boxed{22}$", 22), ("$\x08oxed{22}$", 22),  # a "\b" read as a backspace is restored
    ("**Answer:** 22.", 22), ("**Answer: 22**", 22), ("\\text{answer: } 17 owls", 17), ("Solution: 9.", 9),
    ("So the number is 22.", 22), ("It is 3, or maybe it is 22", 22),  # "is " from the last one
    ("Answer: -4.", -4), ("Answer: 3.\nWait.\nAnswer: 5.", 3),  # the first "answer: " counts
    ("Answer: 22 adult owls.", None), ("Answer: 1,234.", None), ("The answer is 5 and not 3.", None), ("", None),
]


@pytest.mark.parametrize("response,expected", OFFICIAL)
def test_official_answer_extraction(response, expected):
    assert gi.official_answer(response) == expected


def test_official_scoring_reads_the_solutions_answer():
    record = import_benchmark("gsm_infinite", REAL)[0]
    assert record["answer"] == gi.solution_answer(real_rows()[0]["solution"]) == 22
    assert gi.solution_answer("Define B; so B = 2. Answer: 192.") == 192 and gi.solution_answer("no key") is None
    assert tasks.score(record, "<think>Answer: 3.</think>\nAnswer: 22.") == 1.0  # reasoning dropped first
    assert tasks.score(record, "Answer: 22 owls.") == 0.0  # strict where the rule is: no integer read


# ---- format=official and the teacher ----


def test_official_format_round_trips_through_the_release_row():
    native = gi.generate(4, seed=7, ops=5, context_tokens=1500)
    official = tasks.generate("gsm_infinite", 4, seed=7, format="official", ops=5, context_tokens=1500)
    for n, r in zip(native, official):
        assert r["id"] == n["id"] and r["answer"] == n["answer"] and r["meta"]["quantity"] == n["meta"]["quantity"]
        assert "\n" not in context(r) and gi.parse_statements(context(r)) == gi.parse_statements(context(n))
        assert r["meta"]["solution"].endswith(f"Answer: {n['answer']}.") and r["meta"]["op"] == 5
        assert tasks.score(r, tasks.render_answer(r)) == 1.0


def test_teacher_solves_the_default_tasks_and_reports_its_reduction(capsys):
    results = [rollout(r) for r in tasks.generate("gsm_infinite", 50, seed=1)]
    accuracy, reduction = mean(r.score for r in results), mean(r.reduction for r in results)
    with capsys.disabled():
        print(f"\ngsm_infinite teacher, 50 tasks (ops 4, 2k tokens): accuracy {accuracy:.1%}, "
              f"context reduction {reduction:.1%}, calls {mean(r.calls for r in results):.1f}")
    assert not [f for r in results for f in r.failed]
    assert accuracy >= 0.95 and reduction >= 0.8
    assert max(r.calls for r in results) <= GSM_CALLS < MAX_CALLS


@pytest.mark.parametrize("params,reduction", [
    ({"ops": 1, "context_tokens": 300}, 0.5),
    ({"ops": 8, "context_tokens": 4000}, 0.6),
    ({"ops": 12, "context_tokens": 2000}, 0.2),  # 12 searches leave 3 folds
    ({"ops": 6, "context_tokens": 8000, "format": "official"}, 0.6),  # one line of statements, the rule's answer
])
def test_teacher_on_other_sizes(params, reduction):
    results = [rollout(r) for r in tasks.generate("gsm_infinite", 10, seed=2, **params)]
    assert not [f for r in results for f in r.failed]
    assert mean(r.score for r in results) == 1.0 and mean(r.reduction for r in results) >= reduction
    assert max(r.calls for r in results) <= GSM_CALLS


def test_teacher_answers_from_the_visible_context():
    """Folding the asked quantity's statement just before the teacher answers leaves it nothing to compute."""
    (task,) = gi.generate(1, seed=3)
    user = task["messages"][0]["content"]
    asked = next(m for m in gi.STATEMENT.finditer(user) if m["q"] == task["meta"]["quantity"])
    hide = fold_before_the_answer({"start_marker": asked[0], "end_marker": user[asked.end()]})
    assert rollout(task).score == 1.0
    hidden = rollout(task, hide)
    assert hidden.score == 0.0 and hidden.transcript[-1]["content"] == "Answer: unknown"
