"""TA-Mem: the ten tools and the per-question cache on a hand-made memory, the notes' validation and the LLM
extractor's retry and cache, the LoCoMo importer, LoCoMo's F1 and BLEU-1 against hand-computed values, the
generator's gold answers, and the env with its teacher and turn limit through the real agent loop."""

from __future__ import annotations

import json
import math
import re

import pytest

from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.engines.base import Completion
from sculptor_rl.envs import make_env_factory, params_of
from sculptor_rl.envs.llm import policy_llm
from sculptor_rl.envs.tamem.env import TamemEnv, extract_notes
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.envs.tamem import conversations, extract, locomo, metrics
from sculptor_rl.envs.tamem.memory import MemoryDB, NoteError, messages, oracle_notes, pages, validate_notes
from sculptor_rl.envs.tamem.tools import TOOL_NAMES, TOOL_SCHEMAS, Retriever
from sculptor_rl.envs.tasks import generate, score
from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.toolcalls import format_tool_call

CONVO = {"id": "hand", "speakers": ["Ann", "Bo"], "sessions": [
    {"date_time": "10:00 am on 8 May, 2023", "turns": [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat named Tofu yesterday."},
        {"speaker": "Bo", "dia_id": "D1:2", "text": "Cute! I work as a baker now."}]},
    {"date_time": "9:00 pm on 20 May, 2023", "turns": [
        {"speaker": "Ann", "dia_id": "D2:1", "text": "My sister Eva visited Rome last week."},
        {"speaker": "Bo", "dia_id": "D2:2", "text": "Rome is lovely."}]}]}
NOTES = [
    {"start": 0, "end": 0, "summary": "Ann adopted a cat.", "keywords": ["cat", "Tofu"], "people": ["Ann"],
     "facts": [{"person": "Ann", "fact": "Ann's cat is named Tofu"}],
     "events": [{"person": "Ann", "event": "Ann adopted a cat", "time": "7 May 2023"}], "tag": "pets"},
    {"start": 1, "end": 1, "summary": "Bo is a baker.", "keywords": ["baker"], "people": ["Bo"],
     "facts": [{"person": "Bo", "fact": "Bo works as a baker"}], "events": [], "tag": "work"},
    {"start": 2, "end": 3, "summary": "Eva visited Rome.", "keywords": ["Rome"], "people": ["Ann", "Eva"],
     "facts": [{"person": "Ann", "fact": "Ann's sister is Eva"}],
     "events": [{"person": "Eva", "event": "Eva visited Rome", "time": "the week before 20 May 2023"}],
     "tag": "family"},
]


def retriever() -> Retriever:
    return Retriever(MemoryDB(pages(CONVO, NOTES)))


def test_key_queries_match_case_and_spacing_and_point_to_the_keys():
    r = retriever()
    text = r.execute("search_keyword", {"keyword": "  TOFU "}).text
    assert text.startswith('1 pages with the keyword "TOFU"') and "Page p1 | session 1, 10:00 am on 8 May, 2023" in text
    assert "Ann: I adopted a cat named Tofu yesterday." in text and "Bo: Cute!" not in text  # only messages 0..0
    person = r.execute("search_person", {"name": "ann"}).text  # p1 again: a reference to it only (the cache)
    assert "Page p1: already shown above." in person and "Page p1 |" not in person and "Page p3 |" in person
    assert "Page p2 | session 1" in r.execute("search_tag", {"tag": "work"}).text
    missing = r.execute("search_person", {"name": "Zed"})
    assert missing.ok and "Call get_person_names" in missing.text
    assert r.execute("get_person_names", {}).text == "3 person keys: Ann, Bo, Eva"
    assert r.execute("get_tags", "").text == "3 tag keys: family, pets, work"
    assert r.execute("get_keywords", "{}").text == "4 keyword keys: baker, cat, Rome, Tofu"


def test_top_k_and_profiles_and_the_cache():
    r = retriever()
    events = r.execute("match_events", {"query": "Eva Rome"}).text
    assert events.splitlines()[1] == "1. [p3] Eva visited Rome (time: the week before 20 May 2023)"
    assert "Top 1 events" in events and "Page p3 |" in events  # a record that shares no word is not ranked
    again = r.execute("match_facts", {"query": "sister Eva"}).text
    assert "1. [p3] Ann's sister is Eva" in again and "Page p3: already shown above." in again
    assert r.cache_hits == 1
    facts = r.execute("get_person_facts", {"name": "Ann"}).text
    assert facts.splitlines() == ['2 facts of "Ann":',
                                  "- [p1, session 1, 10:00 am on 8 May, 2023] Ann's cat is named Tofu",
                                  "- [p3, session 2, 9:00 pm on 20 May, 2023] Ann's sister is Eva"]
    assert r.execute("get_person_facts", {"name": " ann"}).text == 'The facts of "ann": already shown above.'
    assert "Ann adopted a cat (time: 7 May 2023)" in r.execute("get_person_events", {"name": "Ann"}).text
    assert r.cache_hits == 2
    assert "No fact matches" in r.execute("match_facts", {"query": "weather"}).text


@pytest.mark.parametrize("name, arguments, error", [
    ("remember", {}, "unknown tool"),
    ("search_tag", "{not json", "not valid JSON"),
    ("search_tag", [1], "must be a JSON object"),
    ("search_tag", {}, 'missing required argument "tag"'),
    ("search_tag", {"tag": "work", "k": 3}, 'unknown argument "k"'),
    ("match_events", {"query": 5}, '"query" must be a non-empty string'),
    ("get_person_events", {"name": "  "}, '"name" must be a non-empty string'),
    ("get_tags", {"tag": "x"}, 'unknown argument "tag"'),
])
def test_bad_calls_are_errors_and_change_nothing(name, arguments, error):
    r = retriever()
    result = r.execute(name, arguments)
    assert not result.ok and result.text.startswith("Error: ") and error in result.text
    assert not r.shown_pages and not r.shown_profiles
    assert TOOL_NAMES == tuple(t["function"]["name"] for t in TOOL_SCHEMAS) and len(TOOL_NAMES) == 10


def test_notes_validation():
    assert validate_notes({"notes": NOTES}, 4)[2]["people"] == ["Ann", "Eva"]
    bad = [({"notes": []}, "non-empty list"), ([{"start": 0}], "lacks end, summary"),
           ([{**NOTES[0], "end": 4}], "not within 0..3"), ([{**NOTES[0], "start": "0"}], "integers"),
           ([{**NOTES[0], "keywords": "cat"}], "keywords must be a list of strings"),
           ([{**NOTES[0], "events": [{"person": "Ann", "event": "x"}]}], "events[0] must be an object"),
           ([{**NOTES[0], "tag": " "}], "tag must be a non-empty string")]
    for data, message in bad:
        with pytest.raises(NoteError, match=message.replace("[", r"\[")):
            validate_notes(data, 4)


def test_llm_extractor_retries_a_malformed_reply_reports_a_failure_and_caches(tmp_path):
    good = {0: json.dumps({"notes": NOTES[:2]}), 1: "```json\n" + json.dumps({"notes": NOTES[2:]}) + "\n```"}
    calls = []

    def complete(batch):  # session 0: malformed, then right; session 1: right at once
        calls.append(len(batch))
        out = []
        for messages in batch:
            session = 0 if "[0] Ann:" in messages[0]["content"] else 1
            retry = len(messages) > 1
            assert not retry or "not valid: no JSON object" in messages[-1]["content"]
            out.append(good[session] if retry or session == 1 else "Sure! Here are the notes.")
        return out

    report = extract.run([CONVO], complete, tmp_path, retries=1)
    assert report == {"conversations": 1, "extracted": 1, "reused": 0, "sessions": 2, "retried": 1, "failed": 0}
    assert calls == [2, 1] and extract.load(tmp_path, CONVO) == validate_notes(NOTES, 4)
    assert extract.run([CONVO], complete, tmp_path)["reused"] == 1 and calls == [2, 1]  # cached: no model call
    other = {**CONVO, "sessions": CONVO["sessions"][:1]}
    with pytest.raises(ValueError, match="another version"):
        extract.load(tmp_path, other)
    report = extract.run([{**other, "id": "broken"}], lambda batch: ['{"notes": [{"start": 5}]}'] * len(batch),
                         tmp_path, retries=2)
    assert report["failed"] == 1 and report["retried"] == 2
    saved = json.loads((tmp_path / "broken.json").read_text())
    assert saved["notes"] == [] and "lacks end" in saved["failures"][0]["error"]
    with pytest.raises(NoteError, match="not within this session's 2..3"):
        extract.parse(json.dumps({"notes": [NOTES[0]]}), range(2, 4))


def test_locomo_importer(tmp_path):
    sample = {"sample_id": "conv-1", "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo", "session_2_date_time": "9:00 pm on 20 May, 2023",
        "session_1_date_time": "10:00 am on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "Look!", "blip_caption": "a photo of a cat"},
                      {"speaker": "Bo", "dia_id": "D1:2", "text": "So cute."}],
        "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "I ran 5k yesterday."}]},
        "qa": [{"question": "When did Ann run 5k?", "answer": "19 May 2023", "evidence": ["D2:1"], "category": 2},
               {"question": "What pets?", "answer": 2022, "evidence": [], "category": 1},
               {"question": "What did Bo adopt?", "adversarial_answer": "a dog", "evidence": [], "category": 5}]}
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps([sample]))
    recs = locomo.records(path)
    assert [r["id"] for r in recs] == ["locomo-conv-1-q000-temporal", "locomo-conv-1-q001-multi-hop"]
    assert recs[1]["answer"] == "2022" and recs[0]["meta"]["evidence"] == ["D2:1"]
    convo = conversations.conversation_of(recs[0])
    assert [s["date_time"] for s in convo["sessions"]] == ["10:00 am on 8 May, 2023", "9:00 pm on 20 May, 2023"]
    assert convo["sessions"][1]["turns"] == [{"speaker": "Ann", "dia_id": "D2:1", "text": "I ran 5k yesterday."}]
    assert "I ran 5k" not in json.dumps(recs[0]["meta"])  # the text lies once: in the message
    user = recs[0]["messages"][0]["content"]
    (span,) = recs[0]["meta"]["context"]
    assert user[span["start"]:span["end"]] == conversations.transcript(convo)
    assert 'Ann said, "Look! [shares a photo of a cat]"' in user and user.endswith("whenever possible.")
    assert score(recs[0], "19 May, 2023") == 1.0 and score(recs[0], "on 19 May 2023") == pytest.approx(6 / 7)
    path.write_text(json.dumps([{"sample_id": "x", "conversation": {}, "qa": []}]))
    with pytest.raises(ValueError, match="sample 0 .* lacks 'speaker_a'"):
        locomo.load(path)


def test_f1_and_bleu1_by_hand():
    assert metrics.normalize("The cat, and a Dog!") == "cat dog"
    # stems: running -> run, dogs -> dog; pred {run, dog, fast} vs gold {run, dog}: P 2/3, R 1 -> F1 0.8
    assert metrics.token_f1("Running dogs fast", "the dog runs") == pytest.approx(0.8)
    # multi-hop: gold items pottery | painting; best predicted item per gold item: 1 and 0 -> 0.5
    assert metrics.answer_f1("pottery, chess", "pottery, painting", "multi-hop") == pytest.approx(0.5)
    assert metrics.answer_f1("Japan", "Japan; because of Kyoto", "open-domain") == 1.0
    # BLEU-1: pred [cat, sat, mat] vs gold [cat, on, mat]: 2 clipped / 3, no brevity penalty (3 = 3)
    assert metrics.bleu1("the cat sat mat", "cat on the mat") == pytest.approx(2 / 3)
    # shorter prediction: [cat] vs 3 gold words: 1/1 * exp(1 - 3/1)
    assert metrics.bleu1("cat", "cat on mat") == pytest.approx(math.exp(-2))
    assert metrics.bleu1("", "cat") == 0.0 and metrics.token_f1("", "cat") == 0.0


def test_generator_is_deterministic_balanced_and_its_gold_answers_hold():
    recs = generate("tamem", 8, 3, sessions=6, questions_per_conversation=4)
    assert recs == generate("tamem", 8, 3, sessions=6, questions_per_conversation=4)
    assert [metrics.category_of(r["id"]) for r in recs] == list(metrics.CATEGORIES) * 2
    convo, questions = conversations.conversation(3, 0, sessions=6)
    text = conversations.transcript(convo)
    dates = [s["date_time"] for s in convo["sessions"]]
    assert len(convo["sessions"]) == 6 and dates == sorted(dates, key=lambda d: __import__("datetime").datetime
                                                           .strptime(d, "%I:%M %p on %d %B, %Y"))
    for q in questions:
        turns = {t["dia_id"]: (s, t["text"]) for s, session in enumerate(convo["sessions"]) for t in session["turns"]}
        said = [turns[e][1] for e in q["evidence"]]
        if q["category"] in ("single-hop", "multi-hop"):  # every gold item is said in its evidence
            assert all(any(item in s for s in said) for item in q["answer"].split(", ")), q
        if q["category"] == "temporal":  # the evidence's relative time, resolved from its session's date
            s, line = turns[q["evidence"][-1]]
            ref = next(r for r, _ in conversations.REFS if r in line)
            when = __import__("datetime").datetime.strptime(dates[s], "%I:%M %p on %d %B, %Y").date()
            assert conversations.day(conversations.resolve(when, ref)) == q["answer"]
        if q["category"] == "open-domain":
            assert q["answer"] in conversations.COUNTRIES.values() and q["answer"] not in text
    notes = oracle_notes(convo)
    session = [s for s, _, _ in messages(convo)]
    for a, b in zip(notes, notes[1:]):  # neighbours in a session overlap by one message, across sessions not
        assert b["start"] == a["end"] + (session[a["end"]] != session[b["start"]])
    assert validate_notes(notes, sum(len(s["turns"]) for s in convo["sessions"])) == notes


class _Extractor:
    """A text engine as the LLM extractor: one note per session, its keywords the session's speakers' words."""

    max_model_len = None

    def generate(self, requests):
        out = []
        for r in requests:
            assert r.prompt_ids and r.messages[0]["content"].endswith("Reply:")
            lines = re.findall(r"^\[(\d+)\] (\w+): (.*)$", r.messages[0]["content"].split("Example.")[1], re.M)[4:]
            numbers = [int(n) for n, _, _ in lines]
            note = {"start": min(numbers), "end": max(numbers), "summary": lines[0][2], "tag": "chat",
                    "keywords": [lines[0][2].split()[0]], "people": sorted({w for _, w, _ in lines}),
                    "facts": [{"person": lines[0][1], "fact": lines[0][2]}], "events": []}
            out.append(Completion(text=json.dumps({"notes": [note]})))
        return out


class _Caller:
    """A policy that never answers: it calls a memory tool at every turn."""

    max_model_len = None

    def generate(self, requests):
        return [Completion(text=format_tool_call("get_tags", {})) for _ in requests]


class _Late:
    """A policy that calls a memory tool in each of its first 7 turns, then gives `answer`."""

    max_model_len = None

    def __init__(self, answer: str):
        self.answer = answer

    def generate(self, requests):
        return [Completion(text=self.answer if sum(m["role"] == "assistant" for m in r.messages) >= 7
                           else format_tool_call("get_tags", {})) for r in requests]


def test_env_teacher_and_turn_limit_through_the_loop(fmt, tmp_path):
    tasks = generate("tamem", 8, 5, sessions=6, questions_per_conversation=4)
    make_env = make_env_factory("tamem", tokenizer=fmt.tokenizer)
    trajs = run_rollouts(tasks, ScriptedTeacher(tasks), fmt, make_env, LoopConfig(max_new_tokens=64), progress=False)
    assert [t.score for t in trajs] == [1.0] * 8 and [t.reward for t in trajs] == [1.0] * 8
    assert all(len(t.steps) == 2 and t.info["bleu1"] == 1.0 for t in trajs)
    assert trajs[0].messages[1]["content"].endswith(f"Question: {tasks[0]['meta']['question']} Answer with a short "
                                                    "phrase.") and "DATE:" not in trajs[0].messages[1]["content"]
    summary = TamemEnv.summarize(trajs, "tamem")
    assert summary["all"]["n"] == 8 and summary["temporal"]["f1"] == 1.0 and summary["all"]["turns"] == 2.0
    assert sum(summary["all"]["tool_share"].values()) == pytest.approx(1.0)
    # a policy that never answers: the 7th turn's call is refused, the rollout ends at the loop's call cap
    (t,) = run_rollouts(tasks[:1], _Caller(), fmt, make_env, LoopConfig(max_tool_calls=8), progress=False)
    results = [c["result"] for s in t.steps for c in s.calls]
    assert "your next reply is your answer" in results[5] and results[6].startswith("Error: no tool calls in the last")
    assert t.stop_reason == "max_tool_calls" and t.reward == -1.0
    # the right answer, but in the 8th turn (after 7 tool-calling turns): past the paper's limit, it scores 0
    (t,) = run_rollouts(tasks[:1], _Late(tasks[0]["answer"]), fmt, make_env, LoopConfig(max_tool_calls=14),
                        progress=False)
    assert t.stop_reason == "answer" and t.answer == tasks[0]["answer"] and len(t.steps) == 8
    assert t.score == 0.0 and t.info["bleu1"] == 0.0 and t.reward == -1.0
    # the baselines run on the same records: bm25 keeps part of the transcript and the whole question
    bm25 = make_env_factory("bm25", {"context_budget": 100, "chunk_tokens": 40}, tokenizer=fmt.tokenizer)(tasks[0], 0)
    shown, whole = bm25.render()[-1]["content"], tasks[0]["messages"][0]["content"]
    assert len(shown) < len(whole) / 3 and shown.endswith(tasks[0]["messages"][0]["content"].split("\n\n")[-1])
    # LLM notes: extracted once per conversation through an engine, then the env's memory
    report = extract_notes(tasks, policy_llm(_Extractor(), fmt), tmp_path)
    assert report == {"conversations": 2, "extracted": 2, "reused": 0, "sessions": 12, "retried": 0, "failed": 0}
    llm = make_env_factory("tamem", {"notes": str(tmp_path)}, tokenizer=fmt.tokenizer)(tasks[0], 0)
    assert llm.info()["notes"] == "llm" and llm.execute("get_tags", {}).text == "1 tag keys: chat"
    with pytest.raises(ValueError, match="notes must be"):
        params_of("tamem", {"notes": "/no/such/dir"})
    with pytest.raises(ValueError, match="cannot serve"):
        TamemEnv.conversation([{"role": "user", "content": "hi"}])


@pytest.mark.slow
def test_memory_notes_command_on_the_policy(tmp_path, model_path, capsys):
    """`sculptor-rl memory notes` on the embedded model (HF engine): the conversation's sessions extracted or
    reported as failed, the cache the env reads written either way."""
    from sculptor_rl.cli import main

    write_jsonl(generate("tamem", 1, 0), tmp_path / "t.jsonl")
    main(["memory", "notes", "--data", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "notes"), "--engine", "hf",
          "--model", model_path, "--max-new-tokens", "32", "--retries", "0"])
    report = json.loads(capsys.readouterr().out.splitlines()[0])
    # 32 tokens are too few for a session's notes: each malformed one is reported, none invented
    assert report["conversations"] == report["extracted"] == 1 and 0 <= report["failed"] <= report["sessions"]
    (cache,) = (tmp_path / "notes").glob("*.json")
    assert len(json.loads(cache.read_text())["failures"]) == report["failed"]
