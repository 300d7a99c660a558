"""The published benchmarks: small records written here in each release format are imported (`data import`),
keep their prompt text, metadata and context spans, and are scored by each benchmark's own rule."""

from __future__ import annotations

import csv
import json

import pytest

from sculptor_rl.envs import tasks
from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.cli import UserError, main
from sculptor_rl.longcontext import benchmark_scoring as bs
from sculptor_rl.longcontext import pi_llm
from sculptor_rl.records import context_spans
from sculptor_rl.longcontext.importers import FORMATS, import_benchmark

# ---- one small row per format, as the benchmark releases it ----

PI_KEYS = {"Asian place": ["Tokyo", "Beirut"], "condiment": ["soy sauce", "habanero sauce"],
           "café drink": ["flat white", "café crème"]}
PI_STREAM = "".join(f"{k}: {v}; " for values in zip(*PI_KEYS.values()) for k, v in zip(PI_KEYS, values)) * 400
PI_PROMPT = ("As my secretary, I need you to carefully read a text stream where the values of multiple keys are "
             f"being continuously updated. The keys to track include {', '.join(PI_KEYS)}.\n\n"
             f"The text stream starts on the next line.\n {PI_STREAM}\n\nWhat are the current value of each key "
             f"({', '.join(PI_KEYS)}) you are tracking? End your response with: "
             "'The current value of <key> is <value>.'")
HAYSTACK = "Paul Graham wrote essays. " * 50 + "\nJasmine Lane is James Hill's father.\n" + "Ünïcödé filler. " * 50
NEEDLE_PROMPT = ("This is a test of long-text capability.\nThe content of the long document is as follows\n\n"
                 f"<Document>\n{HAYSTACK}\n</Document>\n\nBased on the information in the document, now please "
                 "answer: who is the eldest relative that 'James Hill' can trace back to in the context?\n"
                 "At the end of your response, remember to put your final answer within \\boxed{}.")
POEMS = ["Tapirs roam the misty wood, quiet, shy and gentle, good.",
         "Rocks are patient, rocks are old, rocks hold stories never told.",
         "Tapirs wade in rivers wide, noses long and hearts of pride."]
MRCR_CHAT = [{"role": "user", "content": "write a poem about tapirs"}, {"role": "assistant", "content": POEMS[0]},
             {"role": "user", "content": "write a poem about rocks"}, {"role": "assistant", "content": POEMS[1]},
             {"role": "user", "content": "write a poem about tapirs"}, {"role": "assistant", "content": POEMS[2]},
             {"role": "user", "content": "Prepend aYooSG8CQg to the 2nd (1 indexed) poem about tapirs. Do not "
                                         "include any other text in your response."}]


def rows() -> dict[str, dict]:
    return {
        "pi_llm": {"prompt": json.dumps([{"role": "user", "content": PI_PROMPT}], ensure_ascii=False),
                   "answer_formatted": json.dumps({k: v[-1] for k, v in PI_KEYS.items()}, ensure_ascii=False),
                   "experiment": "exp_updates", "n_updates": 800, "n_keys": 3},
        "needlebench": {"prompt": NEEDLE_PROMPT, "answer": "Jasmine Lane", "length": "2k", "depth": 40,
                        "num_needles": 2},
        "mrcr": {"prompt": json.dumps(MRCR_CHAT), "answer": "aYooSG8CQg" + POEMS[2],
                 "random_string_to_prepend": "aYooSG8CQg", "n_needles": 2, "desired_msg_index": 5,
                 "total_messages": 7, "n_chars": 300},
        "babilong": {"input": "The sky was grey. Mary moved to the kitchen. Dogs bark. Mary went to the garden. "
                              "Filler text.", "question": "Where is Mary?", "target": "garden"},
        "longbench_v2": {"_id": "66f36490821e116aacb2cc22", "domain": "Single-Document QA", "sub_domain": "Legal",
                         "difficulty": "hard", "length": "long", "question": "Which court decided the case?",
                         "choice_A": "The district court", "choice_B": "The Oberlandesgericht München",
                         "choice_C": "The appeals court", "choice_D": "None of them",
                         "answer": "B", "context": "§ 1 Der Fall … " * 3000},
        "frames": {"Unnamed: 0": 0, "Prompt": "Which tower, finished in 1889, is in the city where Curie died?",
                   "Answer": "The Eiffel Tower",
                   "wiki_links": "['https://en.wikipedia.org/wiki/Eiffel_Tower', "
                                 "'https://en.wikipedia.org/wiki/Marie_Curie']",
                   "wikipedia_link_1": "https://en.wikipedia.org/wiki/Eiffel_Tower",
                   "reasoning_types": "Multiple constraints | Temporal reasoning"},
        "gsm_infinite": {"problem": "The number of adult owl in Pine Ridge equals 3. The number of adult crow in Oak "
                                    "Marsh equals 2 plus the number of adult owl in Pine Ridge. ",
                         "question": "How many adult crow does Oak Marsh have?",
                         "solution": "Define adult owl in Pine Ridge as B; so B = 3. Define adult crow in Oak Marsh as "
                                     "C; so C = 2 + B = 2 + 3 = 5. Answer: 5.",
                         "op": 2, "id": 7, "template": "crazy_zootopia", "mode": "normalforward", "length": "0",
                         "d": 2},
    }


def write(path, fmt_rows: list[dict]):
    """`fmt_rows` in the file type of `path`'s suffix."""
    suffix = path.suffix
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in fmt_rows), encoding="utf-8")
    elif suffix == ".json":
        path.write_text(json.dumps(fmt_rows, ensure_ascii=False), encoding="utf-8")
    elif suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(fmt_rows), path)
    else:
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(fmt_rows[0]), delimiter="\t" if suffix == ".tsv" else ",")
            writer.writeheader()
            writer.writerows(fmt_rows)
    return path


FILE_TYPES = {"pi_llm": ".parquet", "needlebench": ".jsonl", "mrcr": ".json", "babilong": ".jsonl",
              "longbench_v2": ".csv", "frames": ".tsv", "gsm_infinite": ".parquet"}


def imported(tmp_path, fmt: str, **options) -> dict:
    name = "qa1_4k" if fmt == "babilong" else fmt  # BABILong's task and length come from the file name here
    (record,) = import_benchmark(fmt, write(tmp_path / f"{name}{FILE_TYPES[fmt]}", [rows()[fmt]]), **options)
    return record


def context_text(record: dict) -> str:
    return "".join(record["messages"][i]["content"][s:e] for i, s, e in context_spans(record))


# ---- importing ----


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_cli_imports_every_format_to_loadable_records_scored_by_their_rule(tmp_path, fmt, capsys):
    second = {**rows()[fmt], **({"_id": "another"} if fmt == "longbench_v2" else {"id": 8} if fmt == "gsm_infinite"
                                else {"Unnamed: 0": 1} if fmt == "frames" else {})}
    source = write(tmp_path / f"{'qa1_4k' if fmt == 'babilong' else fmt}{FILE_TYPES[fmt]}", [rows()[fmt], second])
    out = tmp_path / "tasks.jsonl"
    main(["data", "import", "--format", fmt, "--in", str(source), "--out", str(out)])
    assert f"wrote 2 {fmt} tasks" in capsys.readouterr().out
    records = tasks.load_tasks(out)  # validated, ids unique
    assert [r["task"] for r in records] == [fmt, fmt] and records[0]["meta"]["benchmark"] == fmt
    for r in records:
        assert all(m["role"] != "system" for m in r["messages"])
        assert tasks.score(r, tasks.render_answer(r)) == 1.0
        assert tasks.score(r, "I do not know.") == 0.0


def test_a_repeated_id_is_an_error(tmp_path):
    source = write(tmp_path / "lb.csv", [rows()["longbench_v2"]] * 2)
    with pytest.raises(ValueError, match="line 3: duplicate id '66f36490821e116aacb2cc22'"):
        import_benchmark("longbench_v2", source)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_missing_column_is_one_error_naming_the_file_and_the_column(tmp_path, fmt):
    required = FORMATS[fmt][1]
    row = {k: v for k, v in rows()[fmt].items() if k != required[-1]}
    source = write(tmp_path / f"qa1_{fmt}{FILE_TYPES[fmt]}", [row])
    with pytest.raises(ValueError, match=rf"{source.name}.*missing column '{required[-1]}'"):
        import_benchmark(fmt, source)
    with pytest.raises(UserError, match=f"missing column '{required[-1]}'"):  # and one line from the CLI
        main(["data", "import", "--format", fmt, "--in", str(source), "--out", str(tmp_path / "o.jsonl")])


def test_pi_llm_keeps_the_prompt_and_finds_its_stream_line(tmp_path):
    r = imported(tmp_path, "pi_llm")
    assert r["messages"] == [{"role": "user", "content": PI_PROMPT}]
    assert context_text(r) == PI_STREAM.strip() and len(PI_STREAM) > 20_000  # one very long line
    assert r["answer"] == {"Asian place": "Beirut", "condiment": "habanero sauce", "café drink": "café crème"}
    assert r["meta"]["experiment"] == "exp_updates" and r["meta"]["n_updates"] == 800
    assert r["meta"]["bucket"] == "800 updates" and "current value of each key" in r["meta"]["question"]
    with_system = {**rows()["pi_llm"], "prompt": [{"role": "system", "content": "You track keys."},
                                                  {"role": "user", "content": PI_PROMPT}]}
    (r,) = import_benchmark("pi_llm", write(tmp_path / "sys.jsonl", [with_system]))
    assert r["messages"] == [{"role": "user", "content": PI_PROMPT}]
    assert r["meta"]["system_prompt"] == "You track keys."


def test_needlebench_context_is_the_document_block(tmp_path):
    r = imported(tmp_path, "needlebench")
    assert context_text(r) == HAYSTACK and r["meta"]["bucket"] == "2k/2" and r["meta"]["depth"] == 40
    chinese = {"prompt": "长文档的内容如下\n\n<文档>\n张强的父亲是马克。\n</文档>\n\n问题", "answer": "马克"}
    (r,) = import_benchmark("needlebench", write(tmp_path / "zh.jsonl", [chinese]))
    assert context_text(r) == "张强的父亲是马克。"
    with pytest.raises(ValueError, match="no <Document>"):
        import_benchmark("needlebench", write(tmp_path / "bad.jsonl", [{"prompt": "no document", "answer": "x"}]))


def test_mrcr_stays_a_chat_whose_earlier_turns_are_the_context(tmp_path):
    r = imported(tmp_path, "mrcr")
    assert r["messages"] == MRCR_CHAT
    assert context_spans(r) == [(i, 0, len(m["content"])) for i, m in enumerate(MRCR_CHAT[:-1])]
    assert r["meta"]["random_string_to_prepend"] == "aYooSG8CQg" and r["meta"]["desired_msg_index"] == 5
    assert r["meta"]["bucket"] == "<1k/2"
    from sculptor_rl.longcontext.importers import _mrcr_bin

    assert [_mrcr_bin(n) for n in (500, 1500, 4096, 8191, 200_000)] == ["<1k", "1k-2k", "4k-8k", "4k-8k", "128k-256k"]


def test_babilong_from_a_datasets_directory_takes_the_task_from_each_split(tmp_path):
    import datasets

    qa5 = {"input": "Mary gave the apple to Fred. Bill went home.", "question": "Who did Mary give the apple to?",
           "target": "Fred"}
    path = tmp_path / "babilong_8k"
    datasets.DatasetDict({"qa1": datasets.Dataset.from_list([rows()["babilong"]]),
                          "qa5": datasets.Dataset.from_list([qa5])}).save_to_disk(str(path))
    r1, r5 = import_benchmark("babilong", path)
    assert (r1["meta"]["babilong_task"], r5["meta"]["babilong_task"]) == ("qa1", "qa5")
    assert r1["meta"]["bucket"] == "8k/qa1" and (r1["id"], r5["id"]) == ("babilong-babilong_8k-qa1-00000",
                                                                          "babilong-babilong_8k-qa5-00001")
    assert context_text(r1) == rows()["babilong"]["input"] and r1["messages"][0]["content"].endswith(
        "Question: Where is Mary?")
    with pytest.raises(ValueError, match="cannot tell the bAbI task"):
        import_benchmark("babilong", write(tmp_path / "plain.jsonl", [rows()["babilong"]]))
    (r,) = import_benchmark("babilong", write(tmp_path / "plain.jsonl", [rows()["babilong"]]), task="qa2",
                            length="16k")
    assert r["meta"]["bucket"] == "16k/qa2"
    (r,) = import_benchmark("babilong", write(tmp_path / "qa3_2.5k.jsonl", [rows()["babilong"]]))
    assert r["meta"]["bucket"] == "2.5k/qa3"


def test_babilong_prompts_come_from_a_prompts_file_in_its_template(tmp_path):
    """babilong/prompts.py's DEFAULT_TEMPLATE with the per-task parts a user gives (its DEFAULT_PROMPTS as JSON)."""
    prompts = tmp_path / "prompts.json"
    parts = {"instruction": "Find Mary.", "examples": "<example>\nJohn went home. Where is John?\nAnswer: home\n"
                                                     "</example>", "post_prompt": "Answer: The most recent location…"}
    prompts.write_text(json.dumps({"qa1": parts}, ensure_ascii=False), encoding="utf-8")
    r = imported(tmp_path, "babilong", prompts=str(prompts))
    row = rows()["babilong"]
    assert r["messages"][0]["content"] == (f"Find Mary.\n\n{parts['examples']}\n\n{parts['post_prompt']}\n\n"
                                           f"<context>\n{row['input']}\n</context>\n\nQuestion: Where is Mary?")
    assert context_text(r) == row["input"] and tasks.score(r, "Mary is in the garden.") == 1.0
    prompts.write_text(json.dumps({"qa2": parts}))
    with pytest.raises(ValueError, match="no prompt for qa1"):
        imported(tmp_path, "babilong", prompts=str(prompts))
    prompts.write_text(json.dumps({"qa1": {"instructions": "x"}}))
    with pytest.raises(ValueError, match="prompts must be one JSON object"):
        imported(tmp_path, "babilong", prompts=str(prompts))


def test_longbench_v2_fills_its_zero_shot_prompt(tmp_path):
    r = imported(tmp_path, "longbench_v2")
    text = r["messages"][0]["content"]
    assert r["id"] == "66f36490821e116aacb2cc22" and r["answer"] == "B"
    assert context_text(r) == rows()["longbench_v2"]["context"].strip()
    assert "(B) The Oberlandesgericht München\n" in text
    assert text.endswith('Format your response as follows: "The correct answer is (insert answer here)".')
    assert (r["meta"]["domain"], r["meta"]["difficulty"], r["meta"]["bucket"]) == ("Single-Document QA", "hard",
                                                                                     "long/hard")


def test_frames_articles_become_the_context_and_without_them_there_is_none(tmp_path):
    articles = tmp_path / "articles.jsonl"
    texts = {"https://en.wikipedia.org/wiki/Eiffel_Tower": "The Eiffel Tower was finished in 1889 in Paris.",
             "https://en.wikipedia.org/wiki/Marie_Curie": "Marie Curie died in Passy, near Paris."}
    articles.write_text("".join(json.dumps({"url": u, "text": t}) + "\n" for u, t in texts.items()))
    r = imported(tmp_path, "frames", articles=str(articles))
    assert all(t in context_text(r) for t in texts.values()) and r["meta"]["links"] == list(texts)
    assert r["meta"]["reasoning_types"] == ["Multiple constraints", "Temporal reasoning"]
    assert "wikipedia_link_1" not in r["meta"] and "Prompt" not in r["meta"]
    bare = imported(tmp_path, "frames")
    assert context_spans(bare) == [] and bare["messages"][0]["content"].startswith("Question: Which tower")
    (url,) = [u for u in texts if "Curie" in u]
    articles.write_text(json.dumps({"url": url, "text": texts[url]}) + "\n")
    with pytest.raises(ValueError, match="no text for article .*Eiffel_Tower"):
        imported(tmp_path, "frames", articles=str(articles))


def test_a_record_without_its_context_span_is_a_clear_error():
    (generated,) = tasks.generate("pi_llm", 1, keys=2, updates=2)
    user = generated["messages"][0]["content"]
    ((_, lo, hi),) = context_spans(generated)
    assert (lo, hi) == (user.index("\n\n") + 2, user.rindex("\n\n"))  # generated records have it too
    with pytest.raises(ValueError, match="task 'mine': no meta.context"):
        context_spans({**generated, "id": "mine", "meta": {}})
    bad = {**generated, "meta": {"context": [{"message": 0, "start": 5, "end": 10**9}]}}
    with pytest.raises(ValueError, match="not inside its messages"):
        context_spans(bad)


# ---- scoring: right, stale, partial, malformed ----


def test_pi_llm_scores_per_key_with_multi_word_keys_and_values(tmp_path):
    r = imported(tmp_path, "pi_llm")
    right = ("The current value of Asian place is Beirut. The current value of condiment is habanero sauce. "
             "The current value of café drink is café crème.")
    assert tasks.score(r, right) == 1.0
    assert tasks.score(r, right.replace("habanero sauce", "soy sauce")) == pytest.approx(2 / 3)  # stale
    assert tasks.score(r, right.replace("habanero sauce", "habanero")) == pytest.approx(2 / 3)  # first word only
    assert tasks.score(r, "The current value of condiment is habanero sauce.") == pytest.approx(1 / 3)  # partial
    assert tasks.score(r, "Asian place: Beirut\ncondiment: **habanero sauce**\ncafé drink: café crème") == 1.0
    # the answer form wins over a `key: value` line; case counts, as in the reference evaluator
    assert tasks.score(r, f"condiment: soy sauce\n{right}") == 1.0
    assert tasks.score(r, right.replace("Beirut", "beirut")) == pytest.approx(2 / 3)
    assert tasks.score(r, "<think>The current value of Asian place is Beirut.</think>I am not sure.") == 0.0
    assert tasks.score(r, right.replace("habanero sauce", "**habanero** sau\\ce")) == 1.0  # asterisks, backslashes
    # what the reference evaluator takes for an API error: a short reply with the word "error" in it
    assert tasks.score(r, f"No error here. {right}") == 0.0 and tasks.score(r, f"{right} {'.' * 700} error") == 1.0


def test_generated_pi_llm_reads_multi_word_values_whole():
    record = {"task": "pi_llm", "answer": {"condiment": "habanero sauce", "Asian place": "Beirut"}}
    assert pi_llm.score(record, "The current value of condiment is habanero sauce.\nAsian place: beirut") == 1.0
    assert pi_llm.score(record, "condiment: habanero\nAsian place: Beirut") == 0.5  # the first word is not the value
    assert pi_llm.score(record, "condiment: habanero sauce; Asian place: Tokyo; Asian place: Beirut;") == 1.0


def test_needlebench_reads_the_last_boxed_answer(tmp_path):
    r = imported(tmp_path, "needlebench")
    assert tasks.score(r, "James Hill's father is Jasmine Lane, so \\boxed{Jasmine Lane}.") == 1.0
    assert tasks.score(r, "\\boxed{James Hill} no wait: \\boxed{\\text{Jasmine Lane}}") == 1.0
    assert tasks.score(r, "\\boxed{James Hill}") == 0.0  # a person lower in the chain
    assert tasks.score(r, "\\boxed{Jasmine}") == 0.0  # partial
    assert tasks.score(r, "The answer is Jasmine Lane.") == 0.0  # no box
    assert tasks.score(r, "\\boxed{Jasmine Lane") == 0.0  # unclosed
    # opencompass's cleaning: double braces, \\text{}, \\[ \\], quotes and tildes; then stripped equality
    for same in ("\\boxed{{Jasmine Lane}}", "\\[\\boxed{\\text{Jasmine Lane}}\\]", "\\boxed{'Jasmine~Lane~'}"):
        assert tasks.score(r, same) == 1.0, same
    assert tasks.score(r, "\\boxed{Jasmine Lane}, not \\boxed Paul") == 0.0  # the last \\boxed opens no brace
    assert tasks.score(r, "\\boxed{jasmine lane}") == 0.0  # case counts


def test_mrcr_is_the_sequence_ratio_behind_the_random_prefix(tmp_path):
    r = imported(tmp_path, "mrcr")
    assert tasks.score(r, "aYooSG8CQg" + POEMS[2]) == 1.0
    assert tasks.score(r, "<think>the 2nd one</think>\naYooSG8CQg" + POEMS[2]) == 1.0
    assert tasks.score(r, POEMS[2]) == 0.0  # no prefix: 0 whatever follows
    stale = tasks.score(r, "aYooSG8CQg" + POEMS[0])  # the 1st poem about tapirs
    partial = tasks.score(r, "aYooSG8CQg" + POEMS[2][:30])
    assert 0.0 < stale < 0.9 and 0.5 < partial < 1.0


def test_babilong_needs_the_target_as_the_only_label_of_the_first_sentence(tmp_path):
    r = imported(tmp_path, "babilong")
    assert tasks.score(r, "The most recent location of Mary is garden.") == 1.0
    assert tasks.score(r, "The most recent location of Mary is kitchen.") == 0.0  # stale
    assert tasks.score(r, "Mary is in the garden or the kitchen.") == 0.0  # two labels
    assert tasks.score(r, "Mary was in the kitchen. Then the garden.") == 0.0  # only the first sentence counts
    qa5 = {"input": "Mary gave the apple to Fred.", "question": "Who did Mary give the apple to?", "target": "Fred"}
    (r5,) = import_benchmark("babilong", write(tmp_path / "qa5.jsonl", [qa5]))
    assert tasks.score(r5, "Mary gave it to Fred.") == 1.0  # labels named in the question never count


def test_longbench_v2_reads_its_choice_letter(tmp_path):
    r = imported(tmp_path, "longbench_v2")
    assert tasks.score(r, "Thinking... The correct answer is (B)") == 1.0
    assert tasks.score(r, "**The correct answer is B**") == 1.0
    assert tasks.score(r, "The correct answer is (A)") == 0.0
    assert tasks.score(r, "(B)") == 0.0  # not in the answer form
    assert bs.longbench_v2_choice("The correct answer is (E)") is None


def test_frames_normalized_match(tmp_path):
    r = imported(tmp_path, "frames")
    assert tasks.score(r, "It was finished in 1889.\nAnswer: the Eiffel tower!") == 1.0
    assert tasks.score(r, "Answer: Eiffel") == 0.0  # partial
    assert tasks.score(r, "Answer: The Louvre") == 0.0
    # the answer line the prompt asks for: the articles repeated back, or the gold after it, earn nothing
    assert tasks.score(r, "The Eiffel Tower is a wrought-iron lattice tower in Paris, finished in 1889. " * 3) == 0.0
    assert tasks.score(r, "Answer: The Louvre\nThe Eiffel Tower is in Paris.") == 0.0


MALFORMED = ["", " \n\t", "<think>The current value of Asian place is Beirut. \\boxed{Jasmine Lane}" + " …" * 3000,
             "\\boxed{Jasmine Lane", "The correct answer is (", "Answer:", "aYooSG8CQg"[:5] + POEMS[2],
             "ü" * 30_000, json.dumps({"answer": None}), "Asian place: ; condiment: ; café drink:"]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_scorer_gives_malformed_answers_nothing(tmp_path, fmt):
    """Empty, unterminated (`<think>`, `\\boxed{`), label-only, cut prefixes, huge single lines, JSON: all 0."""
    r = imported(tmp_path, fmt)
    assert tasks.score(r, tasks.render_answer(r)) == 1.0
    for response in MALFORMED:
        assert tasks.score(r, response) == 0.0, (fmt, response[:60])


@pytest.mark.parametrize("benchmark", list(FORMATS))
def test_truncate_and_bm25_shrink_only_the_context_of_every_format(tmp_path, benchmark, fmt):
    """The baselines take the context from meta.context: the prompt around it (question, choices, answer form)
    stays as the benchmark wrote it; the context keeps at most the budget (MRCR: over all earlier turns)."""
    from sculptor_rl.envs import make_env_factory

    r = imported(tmp_path, benchmark)
    spans = context_spans(r)
    for name in ("truncate", "bm25"):
        shown = make_env_factory(name, {"context_budget": 40, "chunk_tokens": 20}, tokenizer=fmt.tokenizer)(r, 0)
        messages = shown.render()[1:]  # after the baselines' system prompt
        assert len(messages) == len(r["messages"])
        kept = 0
        for i, (before, after) in enumerate(zip(r["messages"], messages)):
            mine = [(a, b) for j, a, b in spans if j == i]
            if not mine:
                assert after == before
                continue
            ((a, b),) = mine
            tail = len(before["content"]) - b
            assert after["content"][:a] == before["content"][:a]
            assert after["content"][len(after["content"]) - tail:] == before["content"][b:]
            piece = after["content"][a:len(after["content"]) - tail]
            if name == "truncate":  # its last tokens (bm25: its best chunks, in document order)
                assert before["content"][a:b].endswith(piece)
            kept += len(fmt.tokenizer.encode(piece, add_special_tokens=False))
        assert kept <= 40 + len(spans)  # (a piece encoded alone may take a token more at its start)


# ---- eval on imported records ----


class GoldPolicy:
    """Answers each task at once with its ideal response in the benchmark's own answer form (what each scorer
    must accept), looking the task up by the request's rollout id as the scripted teachers do: eval's
    orchestration, environments and scorers run for real, no weights do."""

    max_model_len = None

    def __init__(self, records: list[dict]):
        self.records = {r["id"]: r for r in records}

    def generate(self, requests):
        from sculptor_rl.engines.base import Completion

        return [Completion(text=tasks.render_answer(self.records[r.rollout_id.rsplit("/", 1)[0]])) for r in requests]


def test_eval_reports_imported_records_of_every_format_per_benchmark_and_length_bucket(tmp_path, model_path):
    from sculptor_rl.eval.run import EvalConfig, evaluate

    short = {"pi_llm": {"prompt": PI_PROMPT.replace(PI_STREAM, PI_STREAM[:3000])},  # (speed)
             "longbench_v2": {"context": "§ 1 Der Fall … " * 200}}
    other = {"pi_llm": {"n_updates": 400}, "needlebench": {"length": "4k"}, "mrcr": {"n_needles": 4},
             "babilong": {"length": "8k"}, "longbench_v2": {"_id": "another", "difficulty": "easy"},
             "frames": {"Unnamed: 0": 1, "wiki_links": "['https://en.wikipedia.org/wiki/Paris']"},
             "gsm_infinite": {"id": 8, "length": "8k"}}
    first = {fmt: {**row, **short.get(fmt, {})} for fmt, row in rows().items()}
    records = [r for fmt in FORMATS for r in import_benchmark(fmt, write(
        tmp_path / f"qa1_4k_{fmt}{FILE_TYPES[fmt]}", [first[fmt], {**first[fmt], **other[fmt]}]))]
    write_jsonl(records, tmp_path / "tasks.jsonl")
    cfg = EvalConfig(data=str(tmp_path / "tasks.jsonl"), out=str(tmp_path / "out"), context_budget=40, chunk_tokens=20)
    results = evaluate(cfg, engine=GoldPolicy(records))
    assert results["tasks"] == list(FORMATS)  # LongBench v2 and FRAMES too: the families the data holds
    runs = {run["mode"]: run for run in results["runs"]}
    assert list(runs) == ["acm", "full", "truncate", "bm25"]
    for run in runs.values():
        assert {t: (s["n"], s["accuracy"]) for t, s in run["tasks"].items()} == {t: (2, 1.0) for t in FORMATS}
    assert runs["full"]["overall"]["context_reduction"] == 0.0
    assert runs["truncate"]["overall"]["context_reduction"] > 0.3 and runs["bm25"]["overall"]["context_reduction"] > 0.3
    assert runs["truncate"]["tasks"]["frames"]["context_reduction"] == 0.0  # no articles given: no context
    md = (tmp_path / "out" / "results.md").read_text()
    table = md.split("## Accuracy per length bucket (%)\n\n")[1].split("\n\n")[0].splitlines()
    assert table[0] == "| Task | Bucket | n | Ctx tokens | acm | full | truncate | bm25 |"
    assert len(table) == 2 + 2 * len(FORMATS)  # two buckets per benchmark
    assert {tuple(row.split(" | ")[:3]) for row in table[2:]} >= {
        ("| PI-LLM", "800 updates", "1"), ("| PI-LLM", "400 updates", "1"), ("| LongBench v2", "long/hard", "1"),
        ("| LongBench v2", "long/easy", "1"), ("| FRAMES", "1 docs", "1"), ("| FRAMES", "2 docs", "1")}
    assert all(row.endswith("| 100.0 [20.7, 100.0] | 100.0 [20.7, 100.0] | 100.0 [20.7, 100.0] | "
                            "100.0 [20.7, 100.0] |") for row in table[2:])  # 1 of 1 right: Wilson's interval
