"""Helpers shared by the task families: seeded randomness, the record format and where its long context lies,
filler text, answer extraction.

Every record says where its long context lies, in `meta.context` (read with `records.context_spans`): generated
records fill it, and so do the importers of the published benchmarks. The baselines and the scripted teachers
take the context from there, never from a layout convention.
"""

from __future__ import annotations

import json
import math
import random
import re

# Filler vocabulary. It shares no word with the needles (names, kinship terms, rooms, travel verbs, requests),
# so a case-insensitive search for a name or a room only ever hits a needle; tests/test_tasks.py checks this.
ADJECTIVES = (
    "quiet ancient narrow bright dusty gentle hollow crooked silver distant restless patient humble sturdy "
    "faded curious frozen golden tangled modest weathered hidden solemn vivid"
).split()
NOUNS = (
    "lantern river orchard engine compass meadow harbor violin glacier ledger windmill canyon telescope "
    "chapel forest bridge clock vineyard quarry ferry archive caravan meteor beacon mountain"
).split()
VERBS = (
    "crossed guarded measured outlasted echoed sheltered mirrored circled illuminated anchored surrounded "
    "overlooked framed dwarfed"
).split()
TIMES = (
    "at dawn", "after the storm", "for many decades", "during the long winter", "before the harvest",
    "in the evening", "over the centuries", "on clear nights",
)
FILLER_TEMPLATES = (
    "The {a} {n} {v} the {n2} {t}.",
    "{T}, the {n} near the {n2} seemed {a}.",
    "Visitors often said that the {n} was more {a} than the {n2}.",
    "Some believed the {a} {n} had {v} the {n2} long ago.",
    "Nobody could explain why the {n} looked so {a} {t}.",
    "A {a} {n} stood beside the {n2}, and it {v} the {a2} {n3}.",
    "Old records describe the {n} as {a} and the {n2} as {a2}.",
    "Few people noticed how the {n} {v} the {n2} {t}.",
)

# Person names for needles: at least 4 letters, none inside another name or any filler word.
NAMES = (
    "Mary John Sandra Daniel Olivia Marcus Priya Tobias Helena Rafael Ingrid Mateo Yusuf Beatrix Conrad "
    "Dalia Felix Greta Hugo Imogen Jasper Katya Lorenzo Mirela Nadia Oswin Petra Quentin Rosalind Silas "
    "Tamsin Ulrich Vesna Wilhelm Xenia Yvonne Zoltan Agnes Bruno Cecilia Dmitri Esther Fabian Gideon Hilda"
).split()


def task_rng(task: str, seed: int, index: int) -> random.Random:
    """One private RNG per record: records are reproducible one by one and never touch global random."""
    return random.Random(f"{task}:{seed}:{index}")


def approx_tokens(text: str) -> int:
    """Token count estimate (4 characters a token): no tokenizer dependency."""
    return -(-len(text) // 4)


def size_label(tokens: int) -> str:
    """2000 -> "2k", 1500 -> "1.5k", 512 -> "512"."""
    return f"{tokens / 1000:g}k" if tokens >= 1000 else str(tokens)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def check_range(name: str, value: int, low: int, high: int | None = None) -> None:
    if not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")


def make_record(task: str, seed: int, index: int, intro: str, context: str, question: str, answer,
                bucket: str, params: dict, **meta) -> dict:
    """The record format shared by all families (see sculptor_rl/records.py)."""
    user = f"{intro}\n\n{context}\n\n{question}"
    start = len(intro) + 2
    return {
        "id": f"{task}-s{seed}-{index:05d}",
        "task": task,
        "messages": [{"role": "user", "content": user}],  # the environment gives the system prompt
        "answer": answer,
        "meta": {"bucket": bucket, "approx_tokens": approx_tokens(user), **params, **meta, "question": question,
                 "context": [{"message": 0, "start": start, "end": start + len(context)}]},
    }


def release_record(fmt: str, rid: str, messages: list[dict], answer, spans: list[tuple[int, int, int]],
                   question: str, bucket: str, row: dict, used: tuple[str, ...], system: str | None = None, **meta) -> dict:
    """A task record imported from a benchmark's release row; the row's other columns go to `meta` as they are
    (JSON-safe)."""
    kept = {k: json.loads(json.dumps(v, ensure_ascii=False, default=str)) for k, v in row.items()
            if k not in used and k not in ("_id", "id")}
    return {
        "id": rid, "task": fmt, "messages": messages, "answer": answer,
        "meta": {**kept, "benchmark": fmt, "bucket": bucket,
                 "approx_tokens": approx_tokens("".join(m["content"] for m in messages)), "question": question,
                 "context": [{"message": i, "start": s, "end": e} for i, s, e in spans],
                 **({"system_prompt": system} if system else {}), **meta},
    }


def length_bin(tokens: int) -> str:
    """A length bucket when the release names none: the nearest power of two, 1445 -> "1k", 3100 -> "4k"
    (records of about one length share a bucket, as in the benchmarks' tables)."""
    power = 1 << max(0, round(math.log2(max(tokens, 1))))
    return f"{power // 1024}k" if power >= 1024 else str(power)


def filler_sentence(rng: random.Random) -> str:
    a, a2 = rng.sample(ADJECTIVES, 2)
    n, n2, n3 = rng.sample(NOUNS, 3)
    t = rng.choice(TIMES)
    return rng.choice(FILLER_TEMPLATES).format(a=a, a2=a2, n=n, n2=n2, n3=n3, v=rng.choice(VERBS), t=t,
                                               T=t[0].upper() + t[1:])


def filler_sentences(rng: random.Random, num_chars: int) -> list[str]:
    """Filler sentences adding up to at least `num_chars` characters (with separating spaces)."""
    sentences, total = [], 0
    while total < num_chars:
        sentences.append(filler_sentence(rng))
        total += len(sentences[-1]) + 1
    return sentences


def weave(rng: random.Random, needles: list[str], context_tokens: int, shuffle: bool) -> str:
    """Hide `needles` (sentences) at random places in filler text of about `context_tokens` tokens.

    Needles keep their order unless `shuffle` (a story's facts must stay in time order). The text is cut
    into paragraphs of 3-6 sentences, one per line, so fragmenting has line and sentence boundaries.
    """
    needles = rng.sample(needles, len(needles)) if shuffle else list(needles)
    filler = filler_sentences(rng, 4 * context_tokens - sum(len(s) + 1 for s in needles))
    slots = sorted(rng.sample(range(len(filler) + 1), len(needles)))
    for offset, (slot, needle) in enumerate(zip(slots, needles)):
        filler.insert(slot + offset, needle)
    paragraphs, i = [], 0
    while i < len(filler):
        size = rng.randint(3, 6)
        paragraphs.append(" ".join(filler[i:i + size]))
        i += size
    return "\n".join(paragraphs)


# ---- answer extraction: tolerant about the surroundings, exact about the value ----

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
LABEL = re.compile(r"\banswer\b\s*(?:is\s*)?:", re.IGNORECASE)
_WRAPPERS = " \t\n\"'`*_.,;:!?()[]"


def drop_reasoning(response: str) -> str:
    """The response without its <think> blocks (an unterminated one runs to the end)."""
    return _THINK.sub("", response)


def answer_text(response: str, multiline: bool = False) -> str:
    """The part of a response that holds the answer.

    Reasoning inside <think> is dropped. After the last `Answer:` label: the rest of that text (`multiline`)
    or its first non-empty line; without a label: the whole text (`multiline`) or its last non-empty line.
    """
    text = drop_reasoning(response)
    labels = list(LABEL.finditer(text))
    text = text[labels[-1].end():] if labels else text
    if not multiline:
        lines = [line for line in text.splitlines() if line.strip()]
        text = (lines[0] if labels else lines[-1]) if lines else ""
    return text.strip()


def clean(text: str) -> str:
    """Whitespace collapsed; surrounding quotes, markdown and punctuation stripped."""
    return " ".join(text.split()).strip(_WRAPPERS)


def words(text: str) -> list[str]:
    return re.findall(r"[\w'-]+", text.casefold())


def score_value(record: dict, response: str) -> float:
    """Single-value answers: 1.0 if the answer line is the value or ends with it as whole words ("The
    answer is Alice."), else 0.0. Case-insensitive. Only the end of the answer line counts, so "Bob's
    ancestor is Alice" scores for Alice, not for Bob.
    """
    gold, got = words(record["answer"]), words(answer_text(response))
    return float(bool(gold) and got[-len(gold):] == gold)


def render_value(answer: str) -> str:
    """The ideal response for a single-value answer."""
    return f"Answer: {answer}"
