"""ToolMem: experiences with exact feedback, the BiGGen Bench importer, the memory's update rule, validation and
retry of the induction answers, the rules induction (offline), retrieval per category, the metrics, the `toolmem`
family and environment (the paper's A/B order of pairs; choosing a context strategy, then solving the task through
its view), the scripted teacher reading a rules memory."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from types import SimpleNamespace

import pytest

from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.engines.base import Completion
from sculptor_rl.envs import make_env_factory, params_of
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.envs.toolmem.env import EXPERIENCES_FILE, MEMORY_FILE, ToolMemEnv, build_memory
from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.longcontext import babilong
from sculptor_rl.envs.tasks import generate, load_tasks
from sculptor_rl.envs.tasks import score as score_task
from sculptor_rl.envs.toolmem import family
from sculptor_rl.envs.toolmem.biggen import import_biggen
from sculptor_rl.envs.toolmem.experiences import (CAPABILITY, FAMILY_MODULES, TOOLS, Tool, experience,
                                                  generate_experiences, likert, shown_with)
from sculptor_rl.envs.toolmem.memory import (ToolMem, category_of, check_entry, features, in_band, induce, mirror,
                                             model_induction, parse_induction, rules_induction)
from sculptor_rl.envs.toolmem.metrics import (choice_metrics, choices_from_predictions, prediction_metrics,
                                              selection_metrics)


# ---- experiences ----

def test_experiences_are_deterministic_split_and_vary_by_task():
    train, test = generate_experiences(8, 0, "train"), generate_experiences(8, 0, "test")
    assert train == generate_experiences(8, 0, "train") and len(train) == 8 * len(TOOLS)
    assert not {e["task_id"] for e in train} & {e["task_id"] for e in test}
    assert {e["family"] for e in train} == set(FAMILY_MODULES)
    for e in train:
        assert e["score"] == likert(e["raw"]) and e["tool"] in e["feedback"] and "the long context" in e["prompt"]
    # the tools differ in what they are good at: truncate keeps pi_llm's last updates, not an early needle
    scores: dict = {}
    for e in generate_experiences(40, 0, "train"):
        scores.setdefault((e["family"], e["tool"]), []).append(e["score"])
    mean = {k: sum(v) / len(v) for k, v in scores.items()}
    assert mean[("pi_llm", "truncate-256")] > mean[("needlebench", "truncate-256")] + 2


def test_experiences_are_scored_exactly():
    for module in FAMILY_MODULES.values():
        for record in module.generate(2, 3):
            for tool in TOOLS.values():
                e = experience(record, tool)
                assert e["raw"] == score_task(record, e["solution"]) and e["task_id"] == record["id"]


@pytest.mark.parametrize("name", sorted(FAMILY_MODULES))
def test_a_tool_that_shows_everything_is_always_right(name):
    """The readers: with the whole context visible every family's answer is exact (score 5)."""
    whole = Tool("truncate-all", "truncate", 10**6)
    for record in FAMILY_MODULES[name].generate(3, 7):
        e = experience(record, whole)
        assert (e["raw"], e["score"]) == (1.0, 5) and "showed 100%" in e["feedback"]


def test_truncate_shows_the_end_of_the_context_at_a_line():
    (record,) = FAMILY_MODULES["pi_llm"].generate(1, 0, keys=2, updates=48)
    context = record["messages"][0]["content"].split("\n\n")[1]
    view = TOOLS["truncate-256"].view(context, "")
    assert context.endswith(view) and len(view) <= 4 * 256 and context[-len(view) - 1] == "\n"


# ---- BiGGen Bench ----

def _biggen_row(instance: str, model: str, score, feedback="Clear and correct.", **extra) -> dict:
    rubric = {"criteria": "Is the answer correct?", **{f"score{n}_description": f"level {n}" for n in range(1, 6)}}
    return {"id": instance, "capability": "reasoning", "task": "math", "instance_idx": 0,
            "system_prompt": "You are a helpful assistant.", "input": f"Question {instance}?",
            "reference_answer": "42", "score_rubric": rubric, "response": f"{model} says 42", "uuid": "u",
            "model_name": model, "used_for_training": False, "human_score": -1, "language": "English",
            "gpt4_score": 3, "gpt4_feedback": "g4", "gpt4_04_turbo_score": score, "gpt4_04_turbo_feedback": feedback,
            "claude_score": 2, "claude_feedback": "c", "prometheus_8x7b_score": [4, 5, None, 4, 4],
            "prometheus_8x7b_feedback": "p", "prometheus_8x7b_bgb_score": [1, 1, 1, 1, 1],
            "prometheus_8x7b_bgb_feedback": "pb", **extra}


def test_biggen_importer(tmp_path):
    path = tmp_path / "biggen.jsonl"
    write_jsonl([_biggen_row("reasoning_math_0", "gpt-3.5", 4), _biggen_row("reasoning_math_0", "qwen-0.5b", 1),
                 _biggen_row("reasoning_math_1", "gpt-3.5", None)], path)
    exps = import_biggen(path)
    assert [(e["tool"], e["score"], e["raw"]) for e in exps] == [("gpt-3.5", 4, 0.75), ("qwen-0.5b", 1, 0.0)]
    e = exps[0]
    assert e["prompt"] == "You are a helpful assistant.\n\nQuestion reasoning_math_0?"
    assert e["solution"] == "gpt-3.5 says 42" and e["feedback"] == "Clear and correct."
    assert e["rubric"].splitlines() == ["Is the answer correct?", *(f"{n}: level {n}" for n in range(1, 6))]
    assert e["family"] == "reasoning" and e["id"] == "reasoning_math_0/gpt-3.5"
    assert e["meta"]["judge"] == "gpt4_04_turbo" and e["meta"]["uuid"] == "u"  # every other column kept
    assert e["meta"]["prometheus_8x7b_score"] == [4, 5, None, 4, 4]
    # a judge with five ratings: their mean (None left out); a model filter
    assert [x["score"] for x in import_biggen(path, judge="prometheus_8x7b", models=["qwen-0.5b"])] == [4]
    row = _biggen_row("x", "m", 3)
    del row["response"]
    write_jsonl([row], tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="bad.jsonl line 1: missing column 'response'"):
        import_biggen(tmp_path / "bad.jsonl")


# ---- the memory ----

def entry(category: str, text: str, tool: str = "truncate-256") -> dict:
    return {"tool": tool, "category": category, "text": text}


def test_parse_induction_reads_categories_and_rejects_malformed_answers():
    answer = ("Updated memory:\n- The tool is proficient at reading the last lines of a stream.\n"
              "2. Good at short contexts. Poor at needles hidden early in long texts.\n"
              "* It is not good at multi-hop chains.\n- good at short contexts.\nBad at mrcr transcripts.")
    assert parse_induction(answer, "t") == [
        entry("proficient", "Proficient at reading the last lines of a stream.", "t"),
        entry("good", "Good at short contexts.", "t"),
        entry("weak", "Poor at needles hidden early in long texts.", "t"),
        entry("bad", "Bad at mrcr transcripts.", "t")]
    with pytest.raises(ValueError, match="no sentence"):
        parse_induction("The tool is a context strategy. It reads text.", "t")
    with pytest.raises(ValueError, match="no sentence"):  # the embedded model's one accepted answer, before
        parse_induction('Good at" and.\nIt is bad at.', "t")
    with pytest.raises(ValueError, match="runaway"):
        parse_induction(" ".join(f"Good at case {i}." for i in range(40)), "t")


def test_update_rule_adds_merges_and_removes_redundant():
    """M <- (M \\ M_context) ∪ M_updated on a hand-made memory."""
    mem = ToolMem()
    a, b = entry("good", "Good at pi_llm streams."), entry("good", "Good at short pi_llm streams.")
    c, d = entry("bad", "Bad at needles."), entry("weak", "Weak at mrcr.", tool="bm25-256")
    for e in (a, b, c, d):
        mem.store.add(e)
    merged = entry("proficient", "Proficient at pi_llm streams of any length.")
    new = entry("weak", "Weak at long needlebench.")
    mem.apply([a, b, c], [merged, c, new])  # a and b merged, c kept, a new insight added
    assert mem.store.entries == [d, merged, c, new]
    mem.apply([merged, c], [merged])  # c redundant: removed; d (another tool, not in the context) untouched
    assert mem.store.entries == [d, new, merged]


def test_retrieval_per_category():
    mem = ToolMem()
    for i in range(8):
        mem.store.add(entry("good", f"Good at topic{i} tasks."))
        mem.store.add(entry("bad", f"Bad at topic{i} tasks."))
    mem.store.add(entry("good", "Good at topic3 tasks.", tool="other"))
    found = mem.retrieve("truncate-256", "topic3 topic5", 6)
    assert [len(found[c]) for c in ("proficient", "good", "bad", "weak")] == [0, 6, 6, 0]
    assert [e["text"] for e in found["good"][:2]] == ["Good at topic3 tasks.", "Good at topic5 tasks."]
    assert all(e["tool"] == "truncate-256" for e in mem.recall("truncate-256", "topic3", 12))
    assert len(mem.recall("truncate-256", "topic3", 12)) == 16


def test_induction_retries_malformed_answers_then_reports(tmp_path):
    """The update loop on given model answers: retrieved context in the prompt, a malformed answer asked again,
    a tool whose answers stay malformed reported with its memory unchanged; saved and loaded whole."""
    mem = ToolMem()
    for i in range(8):
        mem.store.add(entry("good", f"Good at pi_llm stream number{i}."))
    exps = [e for e in generate_experiences(1, 0, "train") if e["tool"] in ("truncate-256", "bm25-256")]
    answers = iter([
        ["Good at pi_llm streams of updates.", "I cannot tell."],  # truncate: fine; bm25: malformed
        ["Still nothing useful."],  # bm25's retry 1
        ["no."],  # bm25's retry 2: given up
    ])
    prompts = []

    def generate(batch, attempt):
        prompts.append((attempt, batch))
        return next(answers)

    report = induce(mem, exps, model_induction(generate, retries=2))
    assert (report.updates, report.retries, [f["id"] for f in report.failed]) == (1, 2, [exps[1]["id"]])
    assert report.failed[0]["answer"] == "no."
    # the first prompt showed the top 6 of truncate's 8 good entries, which the answer replaced; bm25 had none
    first = prompts[0][1]
    assert sum(f"number{i}." in first[0] for i in range(8)) == 6 and "No entries yet." in first[1]
    assert prompts[1:] == [(1, [first[1]]), (2, [first[1]])]  # a retry asks the same prompt again
    assert len(mem.entries("truncate-256")) == 3 and mem.entries("bm25-256") == []
    mem.save(tmp_path / "m.jsonl")
    assert ToolMem.load(tmp_path / "m.jsonl").store.entries == mem.store.entries


# ---- the rules induction ----

def rules_exp(score: int, family_: str = "pi_llm", bucket: str = "2/16", tokens: int = 238,
              tool: str = "truncate-256") -> dict:
    """A hand-made experience: the fields the rules read (the prompt states family, size and length)."""
    prompt = f"[{family_} task, size {bucket}, about {tokens} tokens of context]\nWhat is the value?"
    return {"id": f"{family_}-{bucket}-{score}/{tool}", "task_id": "t", "family": family_, "bucket": bucket,
            "tool": tool, "prompt": prompt, "solution": "x", "raw": (score - 1) / 4, "score": score,
            "rubric": "1-5", "feedback": f"{tool} answered x. Exact score {(score - 1) / 4:.2f}, so {score}/5."}


def by_feature(mem: ToolMem, tool: str = "truncate-256") -> dict[str, dict]:
    found = [e for e in mem.entries(tool) if "feature" in e]
    assert len(found) == len({e["feature"] for e in found})  # one entry per (tool, feature)
    return {e["feature"]: e for e in found}


def test_rules_features_and_categories():
    assert features(rules_exp(5)) == [("family=pi_llm", "pi_llm tasks"),
                                      ("bucket=pi_llm/2/16", "pi_llm tasks (size 2/16)"),
                                      ("length=under 250 tokens of context", "tasks with under 250 tokens of context")]
    biggen = {**rules_exp(5, "reasoning", "math"), "prompt": "You are a helpful assistant.\n\nWhat is 6 x 7?"}
    assert features(biggen) == [("family=reasoning", "reasoning tasks"),
                                ("bucket=reasoning/math", "reasoning tasks (math)")]
    assert features(rules_exp(1, tokens=1000))[2][1] == "tasks with 1000 to 2000 tokens of context"
    assert features(rules_exp(1, tokens=5000))[2][1] == "tasks with over 4000 tokens of context"
    # the nearest category value to mean - 3 (+2, +1, -1, -2); a mean of 3 leans to good
    assert [category_of(m) for m in (5, 4.5, 4.4, 3, 2.9, 1.6, 1.5, 1)] == \
        ["proficient", "proficient", "good", "good", "bad", "bad", "weak", "weak"]
    assert [in_band("Good at tasks with 500 to 1000 tokens of context: ...", n) for n in (499, 500, 999, 1000)] == \
        [False, True, True, False]
    assert in_band("Weak at tasks with over 4000 tokens of context.", 4000) and in_band("Good at pi_llm.", 9) is None


def test_rules_induction_adds_merges_in_place_and_moves_between_categories():
    """Through the paper's update path: the first experience adds one entry per feature; one of the same family
    updates the family's entry in place (no duplicate) and adds its new size and length; a bad score on the first
    task's features moves their entries from proficient to good (the old ones gone). An entry written by the model
    induction that the update retrieves is kept, and another tool's memory is untouched."""
    mem = ToolMem()
    model_written = entry("good", "Good at short pi_llm streams.")
    other = entry("weak", "Weak at pi_llm tasks: mean score 1.0/5 over 1 experience.", tool="bm25-256")
    mem.store.add(model_written)
    mem.store.add(other)
    induce(mem, [rules_exp(5)], rules_induction)
    first = by_feature(mem)
    assert set(first) == {"family=pi_llm", "bucket=pi_llm/2/16", "length=under 250 tokens of context"}
    assert first["family=pi_llm"] == {"tool": "truncate-256", "category": "proficient", "feature": "family=pi_llm",
                                      "text": "Proficient at pi_llm tasks: mean score 5.0/5 over 1 experience.",
                                      "n": 1, "sum": 5}
    induce(mem, [rules_exp(4, bucket="4/48", tokens=1022)], rules_induction)
    second = by_feature(mem)
    assert len(second) == 5 and (second["family=pi_llm"]["n"], second["family=pi_llm"]["sum"]) == (2, 9)
    assert second["family=pi_llm"]["text"] == "Proficient at pi_llm tasks: mean score 4.5/5 over 2 experiences."
    assert second["bucket=pi_llm/4/48"]["category"] == "good"  # 4: good
    induce(mem, [rules_exp(1)], rules_induction)  # 2/16 again: means 10/3, 6/2, 6/2
    third = by_feature(mem)
    assert {k: (e["category"], e["n"]) for k, e in third.items()} == {
        "family=pi_llm": ("good", 3), "bucket=pi_llm/2/16": ("good", 2),
        "length=under 250 tokens of context": ("good", 2), "bucket=pi_llm/4/48": ("good", 1),
        "length=1000 to 2000 tokens of context": ("good", 1)}
    assert third["family=pi_llm"]["text"] == "Good at pi_llm tasks: mean score 3.3/5 over 3 experiences."
    assert mem.entries("truncate-256", "proficient") == []  # the moved entries left their old category
    assert model_written in mem.store.entries and mem.entries("bm25-256") == [other]


def test_a_feature_entry_replaces_its_own_even_when_not_retrieved():
    """`apply`: an updated entry that names its feature replaces that feature's entry outside M_context too, so a
    retrieval that missed it cannot leave two entries (one stale) for one feature."""
    mem = ToolMem()
    old = {"tool": "t", "category": "good", "text": "Good at x tasks: mean score 4.0/5 over 1 experience.",
           "feature": "family=x", "n": 1, "sum": 4}
    kept = {**old, "feature": "family=y", "text": "Good at y tasks: mean score 4.0/5 over 1 experience."}
    mem.store.add(old)
    mem.store.add(kept)
    new = {**old, "category": "bad", "text": "Bad at x tasks: mean score 2.5/5 over 2 experiences.", "n": 2, "sum": 5}
    mem.apply([], [new])
    assert mem.store.entries == [kept, new]


def test_rules_memory_round_trips_and_goes_on_after_loading(tmp_path):
    """The statistics live in the entries: a memory saved and loaded goes on counting as if it had never left."""
    first, rest = generate_experiences(3, 0, "train"), generate_experiences(2, 5, "train")
    whole = ToolMem()
    induce(whole, first + rest, rules_induction)
    part = ToolMem()
    induce(part, first, rules_induction)
    part.save(tmp_path / "m.jsonl")
    loaded = ToolMem.load(tmp_path / "m.jsonl")
    assert loaded.store.entries == part.store.entries
    induce(loaded, rest, rules_induction)
    assert sorted(map(json.dumps, loaded.store.entries)) == sorted(map(json.dumps, whole.store.entries))
    for bad in ({"n": 0}, {"n": 1.5}, {"sum": 9}):
        with pytest.raises(ValueError):
            check_entry({**whole.store.entries[0], **bad})


def test_build_memory_with_the_rules_needs_no_engine(tmp_path):
    train = generate_experiences(4, 0, "train")
    summary = build_memory(train, tmp_path, induction="rules")
    assert (summary["induction"], summary["updates"], summary["failed"]) == ("rules", len(train), [])
    assert json.loads((tmp_path / "induction.json").read_text())["entries"] == summary["entries"] > 0
    with pytest.raises(ValueError, match="needs an LLM"):
        build_memory(train, tmp_path)
    with pytest.raises(ValueError, match="unknown induction"):
        build_memory(train, tmp_path, induction="oracle")


def test_teacher_predicts_better_from_a_rules_memory_than_from_none(tmp_path, fmt):
    """The scripted teacher on held-out predict records: reading a rules memory induced from 8 training tasks it
    errs less than on an empty memory (which gives it nothing: 3 every time, as GENERIC); reading the raw training
    examples (FEW-SHOT) it errs less too."""
    train = generate_experiences(8, 0, "train")
    build_memory(train, tmp_path / "rules", induction="rules")
    (tmp_path / "empty").mkdir()
    ToolMem().save(tmp_path / "empty" / MEMORY_FILE)
    write_jsonl(train, tmp_path / "empty" / EXPERIENCES_FILE)
    tasks = generate("toolmem", 24, 0, kind="predict")

    def mae(mode: str, memory: str) -> float:
        trajs = run_rollouts(tasks, ScriptedTeacher(tasks), fmt,
                             make_env_factory("toolmem", {"mode": mode, "memory": str(tmp_path / memory)}),
                             LoopConfig(max_tool_calls=0), progress=False)
        return ToolMemEnv.summarize(trajs, mode)["prediction"]["mae"]

    empty, rules = mae("toolmem", "empty"), mae("toolmem", "rules")
    assert empty == mae("generic", "empty") and rules < 1.0 < empty
    assert mae("few-shot", "rules") < empty


# ---- metrics ----

def test_prediction_metrics_by_hand():
    m = prediction_metrics([1, 3, None, 5], [2, 3, 4, 1])  # errors 1, 0, 4 (unparsed: worst), 4
    assert (m["mae"], m["parsed"]) == (2.25, 3)
    assert m["rmse"] == pytest.approx(math.sqrt(33 / 4))
    assert m["pearson"] == pytest.approx(-0.5)  # parsed (1,2) (3,3) (5,1): cov -2 / sqrt(8 * 2)
    assert m["mae_ci"][0] <= 2.25 <= m["mae_ci"][1]


def test_selection_metrics_by_hand():
    rows = [(1, 2, 1, 3), (3, 2, 1, 4), (2, 2, 5, 1), (4, 1, 5, 2), (1, 1, 3, 3), (None, 3, 2, 1)]
    m = selection_metrics(*zip(*rows))
    # D: 5 unequal pairs; P< 1, R< 2, TP< 1; P> 2, R> 3, TP> 1
    assert m["n"] == 5 and m["f1_lt"] == pytest.approx(2 / 3) and m["f1_gt"] == pytest.approx(0.4)
    assert m["accuracy"] == pytest.approx(0.4)


def test_choice_metrics_by_hand():
    tools = ["x", "y"]
    rows = [{"tools": tools, "raw": [1.0, 0.0], "predicted": "x"},
            {"tools": tools, "raw": [0.0, 0.5], "predicted": "x"},
            {"tools": tools, "raw": [0.0, 1.0], "predicted": None}]
    m = choice_metrics(rows)
    assert (m["chosen"], m["oracle"]) == (pytest.approx(1 / 3), pytest.approx(2.5 / 3))
    assert m["fixed"] == {"x": pytest.approx(1 / 3), "y": pytest.approx(0.5)}
    assert m["choices"] == {"x": 2, "y": 0, None: 1} and m["ties"] == 0
    tied = choice_metrics([*rows, {"tools": tools, "raw": [1.0, 0.25], "predicted": ["x", "y"]}])
    assert tied["chosen"] == pytest.approx((1 + 0 + 0 + 0.625) / 4) and tied["ties"] == 1
    assert tied["choices"] == m["choices"]  # a tie is no one tool's choice


def test_choices_from_predictions_by_hand():
    def row(task, tool, predicted, raw):
        return {"task_id": task, "tools": [tool], "predicted": predicted, "raw": [raw]}

    rows = [row("t1", "x", 5, 1.0), row("t1", "y", 5, 0.0), row("t1", "z", 1, 0.5),  # x and y tie at the top
            row("t2", "x", None, 1.0), row("t2", "y", None, 0.0),  # nothing parsed: no choice
            row("t3", "x", 4, 1.0),  # one tool: nothing to choose
            row("t4", "x", 2, 0.0), row("t4", "y", None, 1.0)]  # an unparsed prediction ranks below any score
    assert choices_from_predictions(rows) == [
        {"tools": ["x", "y", "z"], "raw": [1.0, 0.0, 0.5], "predicted": ["x", "y"]},
        {"tools": ["x", "y"], "raw": [1.0, 0.0], "predicted": None},
        {"tools": ["x", "y"], "raw": [0.0, 1.0], "predicted": ["x"]}]
    m = choice_metrics(choices_from_predictions(rows))
    assert (m["chosen"], m["oracle"], m["ties"]) == (pytest.approx(0.5 / 3), pytest.approx(1.0), 1)
    assert m["choices"] == {"x": 1, "y": 0, "z": 0, None: 1}


# ---- the family and the environment ----

def test_family_records(tmp_path):
    predict, select = generate("toolmem", 8, 0, kind="predict"), generate("toolmem", 8, 0, kind="select")
    assert all(1 <= r["answer"] <= 5 for r in predict)
    for r in select:
        a, b = r["meta"]["experiences"]
        assert a["task_id"] == b["task_id"] and a["score"] != b["score"]
        assert r["answer"] == ("A" if a["score"] > b["score"] else "B")
        assert family.capability(a["tool"]) < family.capability(b["tool"])  # paper §4: the more capable tool is A
    r = predict[0]
    assert family.score(r, f"Score: {r['answer']}") == 1.0 and family.score(r, "no idea") == 0.0
    assert family.score(r, str(6 - r["answer"])) == 1 - abs(6 - 2 * r["answer"]) / 4
    choose = generate("toolmem", 8, 0, kind="choose")
    for r in choose:
        raws = {e["tool"]: e["raw"] for e in r["meta"]["experiences"]}
        assert set(raws) == set(TOOLS) and len(set(raws.values())) > 1 and raws[r["answer"]] == max(raws.values())
        assert r["meta"]["source"]["id"] == r["meta"]["experiences"][0]["task_id"]  # the task the agent then solves
        worst = min(raws, key=raws.get)
        assert family.score(r, f"I pick {worst}, not {r['answer']}.") == raws[worst] and family.score(r, "A") == 0.0
    write_jsonl(predict + select + choose, tmp_path / "t.jsonl")
    assert load_tasks(str(tmp_path / "t.jsonl")) == predict + select + choose


@pytest.fixture
def memory_dir(tmp_path):
    """A memory written by hand: truncate-256 good at pi_llm streams, weak at needlebench relations."""
    mem = ToolMem()
    mem.store.add(entry("good", "Good at a stream of updates where the last value of each key is asked."))
    mem.store.add(entry("weak", "Weak at family relations and the eldest ancestor in a long text."))
    mem.save(tmp_path / MEMORY_FILE)
    write_jsonl(generate_experiences(4, 0, "train"), tmp_path / EXPERIENCES_FILE)
    return tmp_path


def test_env_modes_rewards_and_summary(memory_dir, fmt):
    tasks = [r for r in generate("toolmem", 16, 0, kind="predict") if r["meta"]["experiences"][0]["tool"] ==
             "truncate-256"] + generate("toolmem", 4, 0, kind="select") + generate("toolmem", 4, 0, kind="choose")
    with pytest.raises(ValueError, match="needs `memory`"):
        ToolMemEnv(tasks[0], params_of("toolmem", {"mode": "toolmem", "memory": str(memory_dir / "none")}))
    generic = ToolMemEnv(tasks[0], params_of("toolmem", {"mode": "generic"}))
    few = ToolMemEnv(tasks[0], params_of("toolmem", {"mode": "few-shot", "memory": str(memory_dir)}))
    assert generic.render()[-1] == tasks[0]["messages"][-1]
    shots = few.render()[-1]["content"].split("Task Prompt: ")[1:]  # the tool's 4 training experiences, best first
    assert len(shots) == 4 and shots[0].startswith("[pi_llm task")
    trajs = run_rollouts(tasks, ScriptedTeacher(tasks), fmt,
                         make_env_factory("toolmem", {"mode": "toolmem", "memory": str(memory_dir)}),
                         LoopConfig(max_tool_calls=0), progress=False)
    by_family = {t.info["family"]: t for t in trajs if t.info["kind"] == "predict"}
    # the teacher reads the memory shown: the pi_llm entry is the relevant one (4), the needlebench one (1)
    assert by_family["pi_llm"].info["predicted"] == 4 and by_family["needlebench"].info["predicted"] == 1
    assert "Good at a stream of updates" in by_family["pi_llm"].messages[1]["content"]
    for t in trajs:
        if t.info["kind"] == "predict":
            assert t.reward == -abs(t.info["predicted"] - t.info["true"][0]) and isinstance(t.reward, float)
        elif t.info["kind"] == "choose":  # the teacher names a tool, then answers from its view as the tool's reader
            assert t.reward == t.score == t.info["raw"][t.info["tools"].index(t.info["predicted"])]
            assert len(t.steps) == 2 and t.info["solver"] == "agent"
        else:
            assert t.reward == t.score == float(t.info["predicted"] == ("A" if t.info["true"][0] > t.info["true"][1]
                                                                          else "B"))
    summary = json.loads(json.dumps(ToolMemEnv.summarize(trajs, "toolmem")))
    assert summary["prediction"]["n"] == 4 and summary["selection"]["n"] == 4 and summary["choice"]["n"] == 4
    assert summary["prediction"]["mae"] == pytest.approx(
        sum(-t.reward for t in trajs if t.info["kind"] == "predict") / 4)
    assert summary["choice"]["solved"] == pytest.approx(sum(t.score for t in trajs if t.info["kind"] == "choose") / 4)


def test_mirror_gives_the_opposite_record():
    memory = ToolMem()
    induce(memory, generate_experiences(4, 0, "train"), rules_induction)
    for e in memory.store.entries:
        m = mirror(e)
        check_entry(m)
        assert m["sum"] / m["n"] == pytest.approx(6 - e["sum"] / e["n"]) and m["feature"] == e["feature"]
        assert m["category"] == category_of(6 - e["sum"] / e["n"]) and mirror(m) == e
    weak = next(e for e in memory.store.entries if e["text"].startswith("Weak at") and e["n"] == 1)
    assert mirror(weak)["text"] == "Proficient at" + weak["text"][len("Weak at"):].replace("1.0/5", "5.0/5")
    written = entry("bad", "Bad at long contexts.")  # an induction's entry: the opposite phrase
    assert mirror(written) == entry("good", "Good at long contexts.")


def test_counterfactual_memories_vary_what_is_shown_and_the_teacher_follows_it(memory_dir, fmt):
    """SFT data whose answer is in the lines, not in the tool's name or the task: with `counterfactual_memories`
    each record shows a tool another tool's memory, mirrored or not (seeded by the record), and the teacher's
    prediction follows what is shown."""
    mem = ToolMem.load(memory_dir / MEMORY_FILE)
    mem.store.add(entry("weak", "Weak at a stream of updates where the last value of each key is asked.", "bm25-1024"))
    mem.save(memory_dir / MEMORY_FILE)
    tasks = [r for r in generate("toolmem", 320, 0, kind="predict") if r["meta"]["experiences"][0]["family"] ==
             "pi_llm" and r["meta"]["experiences"][0]["tool"] in ("truncate-256", "bm25-1024")]
    for bad in ("yes", True):
        with pytest.raises(ValueError, match="counterfactual_memories"):
            params_of("toolmem", {"mode": "toolmem", "memory": str(memory_dir), "counterfactual_memories": bad})
    with pytest.raises(ValueError, match="counterfactual_memories"):
        params_of("toolmem", {"mode": "few-shot", "memory": str(memory_dir), "counterfactual_memories": 1})

    def predictions(params):
        trajs = run_rollouts(tasks, ScriptedTeacher(tasks), fmt, make_env_factory("toolmem", params),
                             LoopConfig(max_tool_calls=0), progress=False)
        return [(t.info["tools"][0], t.info["predicted"],  # and the category of the line about pi_llm's streams
                 next(line[2:].split(" at ")[0] for line in t.messages[1]["content"].splitlines()
                      if line.startswith("- ") and "a stream" in line)) for t in trajs]

    value = {"Proficient": 5, "Good": 4, "Bad": 2, "Weak": 1}  # 3 + the category's value, as the teacher reads it
    own = {"truncate-256": "Good", "bm25-1024": "Weak"}
    assert all(shown == own[tool] and p == value[shown]
               for tool, p, shown in predictions({"mode": "toolmem", "memory": str(memory_dir)}))
    counterfactual = {"mode": "toolmem", "memory": str(memory_dir), "counterfactual_memories": 1}
    found = predictions(counterfactual)
    assert found == predictions(counterfactual)  # drawn from the seed and the record, the same on every run
    assert all(p == value[shown] for _, p, shown in found)  # the teacher reads what is shown, whatever the name
    for tool in own:  # each name shows all four: its own lines, the other tool's, and both mirrored
        assert {shown for t, _, shown in found if t == tool} == set(value)


def test_capability_is_the_measured_order():
    """CAPABILITY as its comment says: the tools by mean exact score on 400 train-split tasks, most capable first."""
    raws = defaultdict(list)
    for e in generate_experiences(400, 0, "train"):
        raws[e["tool"]].append(e["raw"])
    assert CAPABILITY == tuple(sorted(raws, key=lambda t: -sum(raws[t]) / len(raws[t])))


def test_pairs_from_predictions_put_the_more_capable_tool_first():
    """Paper §4: in a pair the more capable tool is A, so F1< counts the tasks where it does worse. On one task
    truncate-1024 scored below bm25-256 and the predictions say so: a "worse" case (alphabetically bm25-256 would be
    A and it would count as "better"); accuracy does not depend on the order."""
    def predicted(tool, score):
        info = {"kind": "predict", "task_id": "t", "tools": [tool], "predicted": score, "true": [score],
                "raw": [score / 5]}
        return SimpleNamespace(info=info, score=1.0)

    pairs = ToolMemEnv.summarize([predicted("bm25-256", 4), predicted("truncate-1024", 2)], "toolmem")
    found = pairs["selection_from_predictions"]
    assert (found["f1_lt"], found["f1_gt"], found["accuracy"]) == (1.0, None, 1.0)
    chosen = pairs["choice_from_predictions"]  # the tool predicted best, here the better one
    assert (chosen["n"], chosen["chosen"], chosen["oracle"]) == (1, pytest.approx(0.8), pytest.approx(0.8))


class Replies:
    """An engine that gives the completions it is handed, in order: an episode driven by hand."""

    max_model_len = None

    def __init__(self, *texts: str):
        self.texts = iter(texts)

    def generate(self, requests):
        return [Completion(text=next(self.texts)) for _ in requests]


def _episode(task, fmt, *replies, **params):
    traj, = run_rollouts([task], Replies(*replies), fmt, make_env_factory("toolmem", {"mode": "generic", **params}),
                         LoopConfig(max_tool_calls=0), progress=False)
    return traj


def test_choose_then_solve_through_the_chosen_view(fmt):
    """Kind choose, agent solver (the default), by hand on a babilong task: the first completion names a context
    strategy, the next turn is the task with its context as that strategy shows it (the experiences' own view), and
    the second completion is scored by babilong's scorer: right where the view holds the person's last move, wrong
    where it does not."""
    task = next(r for r in generate("toolmem", 8, 0, kind="choose") if r["meta"]["source"]["task"] == "babilong")
    source = task["meta"]["source"]
    raws = {e["tool"]: e["raw"] for e in task["meta"]["experiences"]}
    sees, blind = max(raws, key=raws.get), min(raws, key=raws.get)
    assert (raws[sees], raws[blind]) == (1.0, 0.0)
    for tool, right in ((sees, True), (blind, False)):
        view = shown_with(source, TOOLS[tool])
        assert len(view) < len(source["messages"][0]["content"])
        read = babilong.last_place(view, source["meta"]["person"])  # what the agent can find in what it is shown
        assert (read == source["answer"]) == right
        traj = _episode(task, fmt, f"I choose {tool}.", f"Answer: {read}")
        assert traj.messages[-2]["role"] == "user" and traj.messages[-2]["content"].endswith(view)
        assert (len(traj.steps), traj.answer, traj.info["predicted"]) == (2, f"Answer: {read}", tool)
        assert traj.score == traj.reward == float(right)
    # naming no tool ends the episode unscored; the `tool` solver scores the choice by the tool's own answer
    none = _episode(task, fmt, "I cannot tell.")
    assert (len(none.steps), none.info["predicted"], none.score) == (1, None, 0.0)
    precomputed = _episode(task, fmt, f"I choose {sees}.", solver="tool")
    assert (len(precomputed.steps), precomputed.score) == (1, 1.0)
    with pytest.raises(ValueError, match="no meta.source"):
        ToolMemEnv({**task, "meta": {k: v for k, v in task["meta"].items() if k != "source"}},
                   params_of("toolmem", {"mode": "generic"}))
    with pytest.raises(ValueError, match="unknown toolmem solver"):
        params_of("toolmem", {"solver": "oracle"})


def test_test_time_shows_the_top_12(tmp_path):
    """Paper §2.3/§3.1 at the env's defaults: TOOLMEM shows the top 12 entries of each category, FEW-SHOT the
    top 12 training experiences of the tool (here 14 entries per category and 13 experiences are stored)."""
    mem = ToolMem()
    for i in range(14):
        mem.store.add(entry("good", f"Good at pi_llm case{i}."))
        mem.store.add(entry("weak", f"Weak at needlebench case{i}."))
    mem.save(tmp_path / MEMORY_FILE)
    write_jsonl(generate_experiences(13, 0, "train", tools=["truncate-256"]), tmp_path / EXPERIENCES_FILE)
    task = next(r for r in generate("toolmem", 8, 0, kind="predict")
                if r["meta"]["experiences"][0]["tool"] == "truncate-256")
    shown = ToolMemEnv(task, params_of("toolmem", {"mode": "toolmem", "memory": str(tmp_path)})).render()[-1]
    lines = [line for line in shown["content"].splitlines() if line.startswith("- ")]
    assert sum(line.startswith("- Good at") for line in lines) == 12
    assert sum(line.startswith("- Weak at") for line in lines) == 12 and len(lines) == 24
    few = ToolMemEnv(task, params_of("toolmem", {"mode": "few-shot", "memory": str(tmp_path)})).render()[-1]
    assert few["content"].count("Task Prompt: ") == 12


@pytest.mark.slow
def test_induction_on_the_real_engine(tmp_path, fmt, vllm_engine):
    """The paper's induction on the embedded model: every experience is applied or reported, what is stored is
    valid, and the directory is what the env reads (its toolmem mode shows the stored entries)."""
    from sculptor_rl.envs.llm import policy_llm
    from sculptor_rl.envs.toolmem.env import build_memory, load_memory

    train = generate_experiences(1, 0, "train")
    summary = build_memory(train, tmp_path, policy_llm(vllm_engine, fmt), retries=1, max_new_tokens=96)
    assert summary["updates"] + len(summary["failed"]) == len(train)
    assert summary["retries"] >= len(summary["failed"])
    memory, experiences = load_memory(str(tmp_path))
    assert [dict(e) for e in experiences] == train and len(memory.store) == summary["entries"]
    assert json.loads((tmp_path / "induction.json").read_text())["entries"] == summary["entries"]
    for tool in memory.tools():
        task = next(r for r in generate("toolmem", 8, 0, kind="predict") if r["meta"]["experiences"][0]["tool"] == tool)
        shown = ToolMemEnv(task, params_of("toolmem", {"mode": "toolmem", "memory": str(tmp_path)})).render()[-1]
        assert all(e["text"] in shown["content"] for e in memory.recall(tool, task["meta"]["experiences"][0]["prompt"]))


# ---- tools that are models: saved eval runs ----

def _eval_run(root, model: str, mode: str, trajs: list) -> object:
    from sculptor_rl.trajectory import write_trajectories

    run = root / "runs" / model / mode
    write_trajectories(trajs, run / "trajectories.jsonl")
    (run / "summary.json").write_text("{}")
    return run


def _traj(record: dict, answer: str | None):
    from sculptor_rl.trajectory import Trajectory

    return Trajectory(task_id=record["id"], task=record["task"], steps=[], messages=[], answer=answer,
                      score=0.0 if answer is None else score_task(record, answer),
                      stop_reason="answer" if answer is not None else "max_tool_calls",
                      context_tokens_before=record["meta"]["approx_tokens"], context_tokens_after=100)


@pytest.fixture
def eval_runs(tmp_path):
    """Two models' saved eval runs on 8 pi_llm tasks: `strong/acm` answers every task right; `base/full` answers the
    2-key tasks right, one key of the first 4-key task, nothing on the other 4-key tasks (stopped by the cap)."""
    from sculptor_rl.longcontext import pi_llm

    tasks = generate("pi_llm", 4, 0, keys=2, updates=16) + generate("pi_llm", 4, 1, keys=4, updates=16)
    write_jsonl(tasks, tmp_path / "tasks.jsonl")
    strong = _eval_run(tmp_path, "strong", "acm", [_traj(r, pi_llm.render_answer(r["answer"])) for r in tasks])
    base = [_traj(r, pi_llm.render_answer(r["answer"]) if r["meta"]["keys"] == 2 else None) for r in tasks]
    first = tasks[4]
    key = next(iter(first["answer"]))
    base[4] = _traj(first, f"{key}: {first['answer'][key]}")
    return tasks, [strong, _eval_run(tmp_path, "base", "full", base)], tmp_path / "tasks.jsonl"


def test_eval_run_experiences(eval_runs):
    from sculptor_rl.envs.toolmem.eval_runs import eval_run_experiences

    tasks, runs, tasks_file = eval_runs
    exps = eval_run_experiences(runs, tasks_file)
    tools = ("strong/acm", "base/full")  # task by task, the runs in the order given
    assert [(e["task_id"], e["tool"]) for e in exps] == [(r["id"], t) for r in tasks for t in tools]
    strategy = {r["id"]: experience(r, TOOLS["truncate-256"]) for r in tasks}  # the strategies' experiences' shape
    for e in exps:
        record, own = next(r for r in tasks if r["id"] == e["task_id"]), strategy[e["task_id"]]
        assert list(e) == list(own) and e["id"] == f"{record['id']}/{e['tool']}"
        assert (e["family"], e["bucket"], e["prompt"], e["rubric"]) == \
            (own["family"], own["bucket"], own["prompt"], own["rubric"])
        assert e["score"] == likert(e["raw"]) and e["tool"] in e["feedback"]
        assert e["raw"] == (score_task(record, e["solution"]) if e["solution"] else 0.0)
        assert repr(FAMILY_MODULES["pi_llm"].render_answer(record["answer"])) in e["feedback"]
    raws = {(e["task_id"], e["tool"]): (e["raw"], e["score"]) for e in exps}
    assert raws[(tasks[0]["id"], "base/full")] == (1.0, 5) and raws[(tasks[4]["id"], "base/full")] == (0.25, 2)
    assert raws[(tasks[5]["id"], "base/full")] == (0.0, 1)
    assert "gave no answer (stopped: max_tool_calls)" in exps[11]["feedback"] and exps[11]["solution"] == ""
    assert family.capability_order(exps) == ["strong/acm", "base/full"]


def test_eval_run_experiences_errors(eval_runs, tmp_path):
    from sculptor_rl.envs.toolmem.eval_runs import eval_run_experiences

    tasks, (strong, base), tasks_file = eval_runs
    lines = (strong / "trajectories.jsonl").read_text().splitlines()

    def broken(name: str, *rows: str):
        run = tmp_path / "runs" / name / "acm"
        run.mkdir(parents=True)
        (run / "summary.json").write_text("{}")
        (run / "trajectories.jsonl").write_text("\n".join(rows) + "\n")
        return run

    other = generate("pi_llm", 1, 7, keys=2, updates=16)[0]
    unknown = json.dumps(_traj(other, "x").to_json())
    cases = [(broken("unknown", lines[0], unknown), rf"unknown/acm/trajectories.jsonl line 2: task "
                                                    rf"'{other['id']}' has no record in .*tasks.jsonl"),
             (broken("torn", lines[0], lines[1][:50]), r"torn/acm/trajectories.jsonl line 2: invalid JSON"),
             (broken("shape", '{"task_id": "x"}'), r"shape/acm/trajectories.jsonl line 1: not a trajectory record"),
             (broken("twice", lines[0], lines[0]), r"twice/acm/trajectories.jsonl line 2: task .* again \(first at "
                                                   r".*line 1\)"),
             (broken("score", lines[0].replace('"score": 1.0', '"score": 5.0')), r"line 1: score 5.0 is not"),
             (broken("empty"), "no trajectories in it")]
    for run, message in cases:
        with pytest.raises(ValueError, match=message):
            eval_run_experiences([strong, run], tasks_file)
    (base / "summary.json").unlink()
    with pytest.raises(ValueError, match="not a complete eval run"):
        eval_run_experiences([base], tasks_file)
    with pytest.raises(ValueError, match="no trajectories.jsonl"):
        eval_run_experiences([tmp_path / "runs" / "none" / "acm"], tasks_file)
    with pytest.raises(ValueError, match="a tool is given twice"):
        eval_run_experiences([strong, strong], tasks_file)


def test_split_by_task_is_disjoint_and_seeded(eval_runs):
    from sculptor_rl.envs.toolmem.eval_runs import eval_run_experiences, split_by_task

    _, runs, tasks_file = eval_runs
    exps = eval_run_experiences(runs, tasks_file)
    train, test = split_by_task(exps, 0.25, seed=0)
    ids = [{e["task_id"] for e in part} for part in (train, test)]
    assert not ids[0] & ids[1] and len(ids[1]) == 2 and len(ids[0]) == 6
    assert sorted(train + test, key=exps.index) == exps  # nothing lost, each part in the experiences' order
    assert train == [e for e in exps if e in train] and split_by_task(exps, 0.25, seed=0) == (train, test)
    assert {seed: frozenset(e["task_id"] for e in split_by_task(exps, 0.25, seed)[1]) for seed in range(6)} != \
        {seed: frozenset(ids[1]) for seed in range(6)}  # another seed draws other test tasks
    with pytest.raises(ValueError, match="test_fraction"):
        split_by_task(exps, 1.0)
    with pytest.raises(ValueError, match="both hold a task"):
        split_by_task(exps[:2], 0.5)


def test_eval_run_tools_memory_and_records(eval_runs, tmp_path, fmt):
    """The rules memory holds entries of both model tools; predict and select records (A the tool better on the
    training tasks), no choose; the scripted teacher reading the memory, through the env, and the env's summary
    pairs its predictions in that order."""
    from sculptor_rl.envs.toolmem.eval_runs import eval_run_experiences, split_by_task

    _, runs, tasks_file = eval_runs
    train, test = split_by_task(eval_run_experiences(runs, tasks_file), 0.5, seed=0)
    summary = build_memory(train, tmp_path / "memory", induction="rules")
    assert set(summary["per_tool"]) == {"strong/acm", "base/full"}
    memory = ToolMem.load(tmp_path / "memory" / MEMORY_FILE)
    texts = {e["tool"]: [x["text"] for x in memory.entries(e["tool"])] for e in memory.store.entries}
    assert "Proficient at pi_llm tasks: mean score 5.0/5 over 4 experiences." in texts["strong/acm"]
    assert {"Proficient at pi_llm tasks (size 2/16): mean score 5.0/5 over 2 experiences.",
            "Weak at pi_llm tasks (size 4/16): mean score 1.0/5 over 2 experiences."} < set(texts["base/full"])
    order = family.capability_order(train)
    assert order == ["strong/acm", "base/full"]
    predict, select = (family.from_experiences(test, kind, order, tag="evalruns") for kind in ("predict", "select"))
    assert [r["meta"]["experiences"] for r in predict] == [[e] for e in test]
    assert predict[0]["id"] == "toolmem-predict-evalruns-00000" and predict[0]["meta"]["capability"] == order
    assert select and all([e["tool"] for e in r["meta"]["experiences"]] == order for r in select)
    assert all(r["answer"] == "A" for r in select)  # strong/acm is never worse here
    with pytest.raises(ValueError, match="predict or select"):
        family.from_experiences(test, "choose", order)
    records = predict + select
    trajs = run_rollouts(records, ScriptedTeacher(records), fmt,
                         make_env_factory("toolmem", {"mode": "toolmem", "memory": str(tmp_path / "memory")}),
                         LoopConfig(max_tool_calls=0), progress=False)
    out = ToolMemEnv.summarize(trajs, "toolmem")
    assert out["prediction"]["n"] == len(predict) and out["selection"]["n"] == len(select)
    assert out["selection_from_predictions"]["n"] == len(select)  # the same unequal pairs, A by the records' order
    assert out["prediction"]["mae"] == 0.125  # one prediction off by 1: 1 for base/full's 0.25 (2/5)
    # both pairs right, and seen as "better" (A above B): A is the stronger tool, not the first by name
    assert [out[k][m] for k in ("selection", "selection_from_predictions") for m in ("accuracy", "f1_gt")] == [1.0] * 4


def test_memory_induce_command_writes_what_the_env_reads(tmp_path, capsys):
    from sculptor_rl.cli import main
    from sculptor_rl.envs.toolmem.env import load_memory

    main(["memory", "induce", "--induction", "rules", "--train-tasks", "2", "--out", str(tmp_path / "mem")])
    assert "memory=" in capsys.readouterr().out
    memory, experiences = load_memory(str(tmp_path / "mem"))
    assert [dict(e) for e in experiences] == generate_experiences(2, 0, "train") and len(memory.store) > 0
    task = generate("toolmem", 1, 0, kind="predict")[0]
    shown = ToolMemEnv(task, params_of("toolmem", {"mode": "toolmem", "memory": str(tmp_path / "mem")})).render()
    assert shown[-1]["content"]
