"""Task generators, scorers and dataset IO (sculptor_rl.longcontext, sculptor_rl.records, sculptor_rl.envs.tasks)."""

from __future__ import annotations

import json
import re

import pytest

from sculptor_rl.envs import tasks
from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.records import write_parquet
from sculptor_rl.longcontext import FAMILIES as LONG_CONTEXT
from sculptor_rl.longcontext import babilong, common, mrcr, needlebench, pi_llm
from sculptor_rl.records import context_spans


def context_bounds(record: dict) -> tuple[int, int]:
    """A generated record's long context: one span of its one user message (`meta.context`)."""
    ((message, lo, hi),) = context_spans(record)
    assert message == 0
    return lo, hi

FAMILIES = sorted(LONG_CONTEXT)


def records(task: str, num: int = 8, seed: int = 0, **params) -> list[dict]:
    return tasks.generate(task, num, seed, **params)


# ---- generation ----

@pytest.mark.parametrize("task", FAMILIES)
def test_deterministic_by_seed(task):
    assert records(task) == records(task)
    assert records(task, num=3) == records(task)[:3]  # each record depends only on (task, seed, index)
    other = records(task, seed=1)
    assert all(a["messages"] != b["messages"] for a, b in zip(records(task), other))


@pytest.mark.parametrize("task", FAMILIES)
def test_record_format(task):
    batch = records(task, num=20)
    assert len({r["id"] for r in batch}) == 20
    for r in batch:
        assert json.loads(json.dumps(r)) == r
        assert r["task"] == task and re.fullmatch(rf"{task}-s0-\d{{5}}", r["id"])
        (user,) = r["messages"]  # no system message: the environment gives it
        assert user["role"] == "user"
        lo, hi = context_bounds(r)
        question = user["content"][hi:]
        assert question.strip() == r["meta"]["question"] and user["content"][:lo].strip()  # intro, context, question
        assert "Answer" in question or "key: value" in question  # the format comes with the question, last
        assert hi - lo > 0.6 * len(user["content"])  # the long context dominates the message
        meta = r["meta"]
        assert {"bucket", "approx_tokens"} <= meta.keys()
        assert meta["approx_tokens"] == common.approx_tokens(user["content"])


def test_buckets_and_params_in_meta():
    meta = records("pi_llm", 1, keys=3, updates=5)[0]["meta"]
    assert {"bucket": "3/5", "keys": 3, "updates": 5, "query": "all"}.items() <= meta.items()
    assert records("needlebench", 1, needles=4, context_tokens=1500)[0]["meta"]["bucket"] == "1.5k/4"
    assert records("mrcr", 1, needles=3, context_tokens=4000)[0]["meta"]["bucket"] == "4k/3"
    assert records("babilong", 1, facts=2, context_tokens=512)[0]["meta"]["bucket"] == "512/2"


@pytest.mark.parametrize("task,small,large", [
    ("pi_llm", {"keys": 2, "updates": 8}, {"keys": 8, "updates": 32}),
    ("needlebench", {"context_tokens": 500}, {"context_tokens": 4000}),
    ("mrcr", {"context_tokens": 500}, {"context_tokens": 4000}),
    ("babilong", {"context_tokens": 500}, {"context_tokens": 4000}),
])
def test_size_scales_with_params(task, small, large):
    small_tokens = records(task, 3, **small)[0]["meta"]["approx_tokens"]
    large_tokens = records(task, 3, **large)[0]["meta"]["approx_tokens"]
    assert large_tokens > 4 * small_tokens
    if "context_tokens" in large:  # the context itself is about the asked size
        r = records(task, 1, **large)[0]
        lo, hi = context_bounds(r)
        assert 0.9 * 4000 <= common.approx_tokens(r["messages"][0]["content"][lo:hi]) <= 1.15 * 4000


def test_pi_llm_stream():
    r = records("pi_llm", 1, keys=5, updates=7)[0]
    user = r["messages"][0]["content"]
    lines = user[slice(*context_bounds(r))].splitlines()
    assert len(lines) == 35 and len(set(lines)) == 35  # every line unique: distinct values per key
    last = {}
    for line in lines:
        key, value = line.split(": ")
        last[key] = value
    assert r["answer"] == {k: last[k] for k in r["meta"]["asked_keys"]}
    one = records("pi_llm", 4, query="one")
    assert all(len(x["answer"]) == 1 and list(x["answer"]) == x["meta"]["asked_keys"] for x in one)
    big = records("pi_llm", 1, keys=2, updates=300)[0]  # more updates than value words: numbered variants
    assert len(set(big["messages"][0]["content"].splitlines())) > 600


def test_needles_are_recoverable():
    """What each parser finds in the context is exactly what the generator hid there."""
    for r in records("needlebench", 10, needles=5):
        user = r["messages"][0]["content"]
        parents = needlebench.parse_relations(user[slice(*context_bounds(r))])
        assert len(parents) == 5
        assert needlebench.eldest_ancestor(parents, r["meta"]["person"]) == r["answer"]
    for r in records("babilong", 10, facts=12):
        user = r["messages"][0]["content"]
        assert len(babilong.FACT.findall(user)) == 12
        assert babilong.last_place(user, r["meta"]["person"]) == r["answer"]
    for r in records("mrcr", 10, needles=4):
        user = r["messages"][0]["content"]
        replies = re.findall(rf"^User: {re.escape(r['meta']['request'])}\nAssistant: (.*)$", user, re.M)
        assert len(replies) == 4 and replies[r["meta"]["occurrence"] - 1] == r["answer"]
        assert len(set(re.findall(r"^Assistant: (.*)$", user, re.M))) == 20  # all replies unique


def test_vocabularies_do_not_collide():
    """A case-insensitive search for a name, a key or a place must only hit needles (the teachers rely on it)."""
    prose = " ".join([*common.ADJECTIVES, *common.NOUNS, *common.VERBS, *common.TIMES, *common.FILLER_TEMPLATES,
                      *mrcr.TOPICS, *mrcr.FORMATS, *mrcr.FORMATS.values(), *needlebench.RELATIONS,
                      *needlebench.TEMPLATES, *babilong.PLACES, *babilong.MOVES]).casefold()
    for name in common.NAMES:
        assert name.casefold() not in prose, name
        assert not [other for other in common.NAMES if other != name and name.casefold() in other.casefold()]
    filler = " ".join([*common.ADJECTIVES, *common.NOUNS, *common.VERBS, *common.TIMES, *common.FILLER_TEMPLATES])
    assert not [p for p in babilong.PLACES if p in filler]
    keys = [f"{h}_{t}:" for h in pi_llm.KEY_HEADS for t in pi_llm.KEY_TAILS]
    assert not [(a, b) for a in keys for b in keys if a != b and a in b]


@pytest.mark.parametrize("task,params", [
    ("pi_llm", {"keys": 0}), ("pi_llm", {"updates": 0}), ("pi_llm", {"query": "some"}),
    ("needlebench", {"needles": 0}), ("needlebench", {"context_tokens": 10}),
    ("mrcr", {"needles": 5, "turns": 4}), ("babilong", {"facts": 0}),
])
def test_bad_params(task, params):
    with pytest.raises(ValueError):
        records(task, 1, **params)
    with pytest.raises(ValueError, match="unknown task"):
        tasks.generate("nope", 1)


# ---- scoring ----

def wrong_answer(r: dict, other: dict):
    """A wrong answer of the right shape for record `r` (`other` is another record of its family)."""
    if r["task"] == "pi_llm":
        return {k: f"not{v}" for k, v in r["answer"].items()}
    if r["task"] == "needlebench":
        return r["meta"]["person"]  # the asked person is never their own ancestor
    if r["task"] == "babilong":
        return next(p for p in babilong.PLACES if p != r["answer"])
    return other["answer"]


@pytest.mark.parametrize("task", FAMILIES)
def test_ideal_response_scores_one_and_wrong_less(task):
    batch = records(task, 10)
    for r, other in zip(batch, batch[1:] + batch[:1]):
        assert tasks.score(r, tasks.render_answer(r)) == 1.0
        assert 0.0 <= tasks.score(r, LONG_CONTEXT[task].render_answer(wrong_answer(r, other))) < 1.0
        assert tasks.score(r, "") == 0.0


def test_pi_llm_partial_credit():
    r = records("pi_llm", 1, keys=4)[0]
    items = list(r["answer"].items())
    half = "\n".join(f"{k}: {v if i % 2 else 'wrong'}" for i, (k, v) in enumerate(items))
    assert tasks.score(r, half) == 0.5
    assert tasks.score(r, "\n".join(f"{k}: {v}" for k, v in items[:1])) == 0.25


def test_pi_llm_tolerant_extraction():
    r = {"task": "pi_llm", "answer": {"blood_pressure": "amber", "visual_field": "otter2"}}
    assert tasks.score(r, "- **blood_pressure**: Amber.\n- `visual_field` = otter2") == 1.0
    assert tasks.score(r, "The current value of blood_pressure is amber, and visual_field is OTTER2.") == 1.0
    assert tasks.score(r, "blood_pressure: lemon\nvisual_field: otter2\n\nCorrection:\nblood_pressure: amber") == 1.0
    assert tasks.score(r, "<think>blood_pressure: amber</think>\nblood_pressure: lemon\nvisual_field: otter") == 0.0
    assert tasks.score(r, "high_blood_pressure: amber\nvisual_field: otter2") == 0.5  # the key must match whole


@pytest.mark.parametrize("task,gold,wrong", [("needlebench", "Conrad", "Felix"), ("babilong", "kitchen", "garden")])
def test_single_value_tolerant_extraction(task, gold, wrong):
    r = {"task": task, "answer": gold}
    for response in (gold, f"  {gold.upper()}  \n", f"Answer: **{gold.lower()}**.", f"The answer is {gold}.",
                     f"<think>It could be {wrong}.</think>\nAnswer: {gold}", f"It is not {wrong}.\nAnswer: `{gold}`",
                     f"{wrong} went somewhere; in the end it is {gold}."):
        assert tasks.score(r, response) == 1.0, response
    for response in (wrong, f"Answer: {wrong}", f"Answer: {gold} or {wrong}", f"Answer: {gold}x", "Answer:",
                     f"Answer: {wrong}\n{gold}"):
        assert tasks.score(r, response) == 0.0, response


def test_mrcr_tolerant_extraction():
    r = records("mrcr", 1)[0]
    reply = r["answer"]
    assert tasks.score(r, f"Sure, here it is.\nAnswer:\n  {reply.replace(' ', '   ')}\n") == 1.0
    assert tasks.score(r, f'Answer: "{reply}"') == 1.0
    assert tasks.score(r, reply) == 1.0
    assert 0.8 < tasks.score(r, f"Here is the reply you asked for: {reply}") < 1.0  # no label: partial credit
    assert tasks.score(r, f"Answer: {reply[: len(reply) // 2]}") < 0.8


# ---- official formats ----

@pytest.mark.parametrize("task", FAMILIES)
def test_official_format_is_what_import_makes_of_the_release_row(task, tmp_path):
    """format=official: the generated record as its benchmark releases it, imported by that benchmark's importer,
    scored by its rule; the generation's meta is kept (the teachers read what the question asks about)."""
    from sculptor_rl.longcontext.importers import import_benchmark
    from sculptor_rl.longcontext.official import official_row

    native, official = records(task, 4), records(task, 4, format="official")
    assert official == records(task, 4, format="official")  # deterministic by seed too
    source = tmp_path / "release.jsonl"
    source.write_text("".join(json.dumps(official_row(r)) + "\n" for r in native))
    for n, r, imported in zip(native, official, import_benchmark(task, source)):
        assert (r["id"], r["task"], r["meta"]["benchmark"]) == (n["id"], task, task)
        assert (r["messages"], r["answer"]) == (imported["messages"], imported["answer"])
        assert {k: r["meta"][k] for k in ("bucket", "context", "question")} == {
            k: imported["meta"][k] for k in ("bucket", "context", "question")}
        assert {k: v for k, v in n["meta"].items() if k not in r["meta"]} == {}  # generation meta kept
        assert tasks.score(r, tasks.render_answer(r)) == 1.0 and tasks.score(r, "") == 0.0
    pi, nb, mr, ba = (records(t, 1, format="official")[0] for t in ("pi_llm", "needlebench", "mrcr", "babilong"))
    if task == "pi_llm":  # one long line of `key: value; `, the answer form `The current value of <key> is <value>.`
        ((_, a, b),) = context_spans(pi)
        stream = pi["messages"][0]["content"][a:b]
        assert "\n" not in stream and stream.count("; ") == pi["meta"]["keys"] * pi["meta"]["updates"] - 1
        assert tasks.render_answer(pi).startswith("The current value of ")
    if task == "needlebench":
        assert f"'{nb['meta']['person']}'" in nb["messages"][0]["content"]
        assert tasks.score(nb, f"\\boxed{{{nb['meta']['person']}}}") == 0.0  # the asked person: wrong
    if task == "mrcr":  # a chat; the answer starts with the random prefix the last message asks for
        assert len(mr["messages"]) == 2 * mr["meta"]["turns"] + 1 and mr["messages"][1]["role"] == "assistant"
        prefix = mr["meta"]["random_string_to_prepend"]
        assert prefix in mr["messages"][-1]["content"] and tasks.score(mr, mr["answer"].removeprefix(prefix)) == 0
    if task == "babilong":
        assert ba["meta"]["babilong_task"] == "qa1" and ba["meta"]["bucket"] == "2k/qa1"


def test_format_is_checked_and_the_cli_generates_official_records(tmp_path):
    from sculptor_rl.cli import main

    with pytest.raises(ValueError, match="format must be native or official"):
        records("pi_llm", 1, format="offical")
    with pytest.raises(ValueError, match="format must be native or official"):
        records("memtool", 1, format="official")
    out = tmp_path / "official.jsonl"
    main(["data", "generate", "--task", "needlebench", "--num", "2", "--param", "format=official", "--out", str(out)])
    assert [r["meta"]["benchmark"] for r in tasks.load_tasks(out)] == ["needlebench"] * 2


# ---- dataset IO ----

def mixed() -> list[dict]:
    return [r for task in FAMILIES for r in records(task, 3)]


def test_jsonl_round_trip(tmp_path):
    path = tmp_path / "sub" / "tasks.jsonl"
    write_jsonl(mixed(), path)
    assert tasks.load_tasks(path) == mixed()
    assert tasks.load_tasks(str(path), limit=5) == mixed()[:5]


def test_parquet_round_trip(tmp_path):
    path = tmp_path / "tasks.parquet"
    write_parquet(mixed(), path)  # answers of mixed types: a str or a dict
    assert tasks.load_tasks(path) == mixed()


def test_datasets_directory_round_trip(tmp_path):
    pytest.importorskip("datasets")
    write_parquet(mixed(), tmp_path / "data" / "train.parquet")
    assert tasks.load_tasks(str(tmp_path / "data"), split="train") == mixed()


def test_user_parquet_with_plain_columns(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [{"id": "q1", "task": "babilong", "messages": [{"role": "user", "content": "Where is Mary?"}],
             "answer": "kitchen"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "own.parquet")
    assert tasks.load_tasks(tmp_path / "own.parquet") == [{**rows[0], "meta": {}}]


def write_lines(path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("field", ["id", "task", "messages", "answer"])
def test_missing_field_is_named(tmp_path, field):
    good = records("babilong", 2)
    bad = {k: v for k, v in good[1].items() if k != field}
    path = write_lines(tmp_path / "t.jsonl", [json.dumps(good[0]), "", json.dumps(bad)])
    with pytest.raises(ValueError, match=rf"t\.jsonl line 3: missing required field '{field}'"):
        tasks.load_tasks(path)


@pytest.mark.parametrize("line,message", [
    ("{not json", r"line 1: invalid JSON"),
    ("[1, 2]", r"line 1: a record must be a JSON object"),
    ('{"id": 3, "task": "mrcr", "messages": [], "answer": "x"}', r"line 1: field 'id' must be a non-empty string"),
    ('{"id": "a", "task": "chess", "messages": [], "answer": "x"}', r"line 1: unknown task 'chess'"),
    ('{"id": "a", "task": "mrcr", "messages": [], "answer": "x"}', r"line 1: field 'messages' must be a non-empty"),
    ('{"id": "a", "task": "mrcr", "messages": [{"role": "user"}], "answer": "x"}', r"line 1: messages\[0\] must be"),
    ('{"id": "a", "task": "mrcr", "messages": [{"role": "boss", "content": ""}], "answer": "x"}', r"messages\[0\]"),
    ('{"id": "a", "task": "mrcr", "messages": [{"role": "user", "content": ""}], "answer": "x", "meta": 1}',
     r"line 1: field 'meta' must be an object"),
])
def test_malformed_jsonl(tmp_path, line, message):
    with pytest.raises(ValueError, match=message):
        tasks.load_tasks(write_lines(tmp_path / "t.jsonl", [line]))


def test_a_context_span_outside_its_messages_is_named_on_load(tmp_path):
    (r,) = records("babilong", 1)
    r["meta"]["context"] = [{"message": 1, "start": 0, "end": 5}]
    path = write_lines(tmp_path / "t.jsonl", [json.dumps(r)])
    with pytest.raises(ValueError, match=r"t.jsonl line 1: task 'babilong-s0-00000': meta.context span .* is not "
                                         r"inside its messages"):
        tasks.load_tasks(path)


def test_duplicate_ids_and_bad_parquet(tmp_path):
    r = records("mrcr", 1)[0]
    with pytest.raises(ValueError, match=r"line 2: duplicate id 'mrcr-s0-00000' \(first at .*line 1\)"):
        tasks.load_tasks(write_lines(tmp_path / "t.jsonl", [json.dumps(r)] * 2))
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist([{"id": "a", "task": "mrcr", "answer": "x"}]), tmp_path / "t.parquet")
    with pytest.raises(ValueError, match=r"t\.parquet row 0: missing required field 'messages'"):
        tasks.load_tasks(tmp_path / "t.parquet")
