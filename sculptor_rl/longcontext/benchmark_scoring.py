"""Scorers of the published benchmarks, each following that benchmark's own rule (its source named below).

A record imported by `sculptor_rl.longcontext.importers` has `meta.benchmark` set to one of `BENCHMARKS`;
`sculptor_rl.envs.tasks.score` sends it here. Every scorer first drops the response's `<think>` blocks (a reasoning
model's thoughts are not its answer) and returns a float in [0, 1].
"""

from __future__ import annotations

import re
import string
from difflib import SequenceMatcher

from . import gsm_infinite, pi_llm
from .common import LABEL, answer_text, drop_reasoning

BENCHMARKS = ("pi_llm", "needlebench", "mrcr", "babilong", "longbench_v2", "frames", "gsm_infinite")


def benchmark(record: dict) -> str | None:
    """The benchmark whose rule scores `record`, or None for a generated record."""
    return (record.get("meta") or {}).get("benchmark")


def score(record: dict, response: str) -> float:
    name = benchmark(record)
    if name not in SCORERS:
        raise ValueError(f"record {record.get('id')!r}: unknown benchmark {name!r} (known: {', '.join(BENCHMARKS)})")
    return SCORERS[name](record, drop_reasoning(response))


def render_answer(record: dict) -> str:
    """The ideal response in the benchmark's own answer form (scores 1.0)."""
    answer = record["answer"]
    return {
        "pi_llm": lambda: " ".join(f"The current value of {k} is {v}." for k, v in answer.items()),
        "needlebench": lambda: f"The eldest relative is \\boxed{{{answer}}}.",
        "mrcr": lambda: answer,
        "babilong": lambda: f"{answer}.",
        "longbench_v2": lambda: f"The correct answer is ({answer})",
        "frames": lambda: f"Answer: {answer}",
        "gsm_infinite": lambda: f"Answer: {answer}.",
    }[benchmark(record)]()


def score_pi_llm(record: dict, response: str) -> float:
    """PI-LLM: the fraction of keys whose reported value is exactly the last one.

    Rule of the benchmark's evaluator (open-compass/opencompass,
    opencompass/openicl/icl_evaluator/pi_llm_evaluator.py, `grade_pi_response`; data giantfish-fly/pi-llm):
    an error reply scores 0 (empty, starting with "error", naming an "error code", or under 680 characters with
    the word "error" in it); backslashes and asterisks are dropped; the answer form is
    `The current value of <key> is <value>.`, `<key>: <value>` lines are accepted too and the verbal form wins
    over them; a value is right when it equals `answer_formatted[key]` after quotes and brackets are stripped
    (case-sensitive). Two differences, both lenient: the reference extractor reads keys and values of at most
    two words, here each known key is looked up (`pi_llm.reported_value`), so keys and values of any number of
    words are read whole; and a key written in another case still counts (the value's case does not).
    """
    if _error_reply(response):
        return 0.0
    response = re.sub(r"\\(?!n)|\*", "", response)
    answer = record["answer"]
    right = sum(_squash(pi_llm.reported_value(response, key) or "") == _squash(value) for key, value in answer.items())
    return right / len(answer)


def _error_reply(response: str) -> bool:
    """What PI-LLM's evaluator takes for an API error rather than an answer (`extract_pieces_response_to_dict`)."""
    return (not response or response.startswith(("error", "Error")) or "error code" in response.lower()
            or (len(response) < 680 and re.search(r"\berror\b", response, re.IGNORECASE) is not None))


def _squash(text: str) -> str:
    return " ".join(text.split())


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (nested braces kept; `\\boxed{{x}}` gives x), or None when the last
    `\\boxed` opens no brace or its brace is never closed (opencompass `extract_boxed_answer`)."""
    start = text.rfind("\\boxed")
    if start < 0 or not text.startswith("{", start + len("\\boxed")):
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            inner = text[i + 1:j]
            return inner[1:-1] if re.fullmatch(r"\{.*\}", inner, re.DOTALL) else inner
    return None


def clean_boxed(text: str) -> str:
    """NeedleBench's cleaning of a boxed name: `\\text{}` and `\\boxed{}` unwrapped, `\\[`/`\\]` and backslashes
    dropped, whitespace collapsed, quotes removed, tildes made spaces, stripped."""
    text = re.sub(r"\\(?:text|boxed)\{([^}]+)\}", r"\1", text)
    text = re.sub(r"\\[\[\]]", "", text).replace("\\", "")
    text = re.sub(r"\s+", " ", text).strip().replace('"', "").replace("'", "")
    return text.replace("~", " ").strip()


def score_needlebench(record: dict, response: str) -> float:
    """NeedleBench v2 multi-needle reasoning: 1.0 if the last `\\boxed{}` holds exactly the eldest ancestor.

    Rule of open-compass/opencompass, opencompass/datasets/needlebench_v2/atc_elder_only.py
    (`needlebench_atc_postprocess_v2`: `extract_boxed_answer(..., strip_double_curly_brace=True)`, then
    `clean_atc_answer`; `NeedleBenchATCEvaluator`: stripped, case-sensitive equality). No box: wrong.
    """
    boxed = last_boxed(response)
    return float(boxed is not None and clean_boxed(boxed) == record["answer"].strip())


def score_mrcr(record: dict, response: str) -> float:
    """OpenAI MRCR: difflib SequenceMatcher ratio between response and answer, 0 without the random prefix.

    Rule of the dataset card's `grade()` (huggingface.co/datasets/openai/mrcr, README "Implementation
    details"): a response that does not start with `random_string_to_prepend` scores 0; else the prefix is
    removed from both response and answer and their `SequenceMatcher(None, a, b).ratio()` is the score.
    Leading whitespace (left where a `<think>` block was dropped) is ignored.
    """
    prefix = record["meta"]["random_string_to_prepend"]
    response = response.lstrip()
    if not response.startswith(prefix):
        return 0.0
    got, gold = response.removeprefix(prefix), record["answer"].removeprefix(prefix)
    return SequenceMatcher(None, got, gold).ratio()


# The answer vocabulary of each bAbI task, as booydar/babilong babilong/metrics.py `TASK_LABELS` lists it.
_ROOMS = ("bathroom", "bedroom", "garden", "hallway", "kitchen", "office")
BABILONG_LABELS = {
    **dict.fromkeys(("qa1", "qa2", "qa3", "qa4", "qa11", "qa12", "qa13"), _ROOMS),
    "qa5": ("Bill", "Fred", "Jeff", "Mary", "apple", "football", "milk"),
    **dict.fromkeys(("qa6", "qa9", "qa17", "qa18"), ("no", "yes")),
    "qa7": ("none", "one", "three", "two"),
    "qa8": ("apple", "football", "milk", "nothing"),
    "qa10": ("maybe", "no", "yes"),
    "qa14": ("bedroom", "cinema", "kitchen", "office", "park", "school"),
    "qa15": ("cat", "mouse", "sheep", "wolf"),
    "qa16": ("gray", "green", "white", "yellow"),
    "qa19": ("e,e", "e,n", "e,s", "n,e", "n,n", "n,w", "s,e", "s,s", "s,w", "w,n", "w,s", "w,w"),
    "qa20": ("bedroom", "bored", "garden", "hungry", "kitchen", "thirsty", "tired"),
}


def babilong_correct(target: str, output: str, question: str, labels) -> bool:
    """booydar/babilong babilong/metrics.py `compare_answers`, rule for rule (its tests reproduce the official
    function's verdicts): the output lower-cased and cut at the first `.`, `<context>` and `<example>`; the labels
    it contains as substrings (so "none" also contains "one"), minus those the question contains, must be exactly
    the target; a target with a comma and over 3 characters (qa8's "apple,milk") must be exactly its parts.
    The official cut at "Question" comes after lower-casing and never cuts, so none is made here; and no response
    is right for qa7's target "none" (it always names "one" too): `data check` counts those golds."""
    first = output.lower().split(".")[0].split("<context>")[0].split("<example>")[0]
    target, labels = target.lower(), {label.lower() for label in labels}
    named = {label for label in labels if label in first} - {label for label in labels if label in question.lower()}
    if "," in target and len(target) > 3:
        parts = target.split(",")
        return all(t in named for t in parts) and len(named) == len(parts)
    return named == {target}


def score_babilong(record: dict, response: str) -> float:
    """BABILong: `babilong_correct` with the task's labels (`meta.babilong_task`, qa1-qa20)."""
    task = record["meta"].get("babilong_task", "")
    if task not in BABILONG_LABELS:
        raise ValueError(f"record {record.get('id')!r}: BABILong task {task!r} has no label set (qa1-qa20)")
    return float(babilong_correct(record["answer"], response, record["meta"]["question"], BABILONG_LABELS[task]))


def longbench_v2_choice(response: str) -> str | None:
    """The choice letter of `The correct answer is (X)` (or `... is X`), asterisks ignored; else None."""
    response = response.replace("*", "")
    match = re.search(r"The correct answer is \(([A-D])\)", response) or re.search(
        r"The correct answer is ([A-D])", response)
    return match.group(1) if match else None


def score_longbench_v2(record: dict, response: str) -> float:
    """LongBench v2: 1.0 if the extracted choice letter is the answer letter.

    Rule of THUDM/LongBench, pred.py (`extract_answer`, prompts/0shot.txt answer form): the first
    `The correct answer is (X)`, else the first `The correct answer is X`, X in A-D; no letter is wrong.
    """
    return float(longbench_v2_choice(response) == record["answer"])


def normalize_answer(text: str) -> str:
    """Lower case, punctuation and articles (a, an, the) removed, whitespace collapsed (SQuAD's normalization)."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def score_frames(record: dict, response: str) -> float:
    """FRAMES by normalized match: 1.0 if the normalized gold answer occurs, as whole words, in the normalized
    answer line (a gold of punctuation alone: as written, case and spacing aside): the first line after the last
    `Answer:` label, which the imported prompt asks for. A response without the label scores 0, as NeedleBench's
    without `\\boxed{}`: otherwise a model that repeats the articles back would be credited with every answer they
    contain (seen with the embedded model).

    FRAMES (google/frames-benchmark; Krishna et al. 2025) reports accuracy judged by an LLM against the gold
    `Answer`; this offline rule is the strict, reproducible stand-in (the judged accuracy the Sculptor paper
    reports needs a judge model, which no run here has).
    """
    if not LABEL.search(drop_reasoning(response)):
        return 0.0
    gold, got = normalize_answer(record["answer"]), normalize_answer(answer_text(response))
    if not gold:  # punctuation alone (one release answer is Morse code, "....-"): matched as written
        gold, got = (" ".join(text.lower().split()) for text in (record["answer"], answer_text(response)))
    return float(bool(gold) and f" {gold} " in f" {got} ")


SCORERS = {"pi_llm": score_pi_llm, "needlebench": score_needlebench, "mrcr": score_mrcr, "babilong": score_babilong,
           "longbench_v2": score_longbench_v2, "frames": score_frames, "gsm_infinite": gsm_infinite.score_official}
