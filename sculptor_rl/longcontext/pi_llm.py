"""PI-LLM style proactive interference: K keys updated U times each in one randomly interleaved stream of
`key: value` lines; the question asks for the current (last) value of every key, or of one key.

Values of one key are all distinct, so every line of the stream is unique and a stale value is always
recognisably wrong. Scored per key: the fraction of asked keys whose last value is reported exactly
(case-insensitive; accepted forms `The current value of key is value`, `key: value`, `key = value`,
`... key is value`; see `reported_value`).
"""

from __future__ import annotations

import re

from .common import check_range, drop_reasoning, make_record, task_rng

NAME = "pi_llm"
ANSWER = dict  # key -> its current value: the gold answer's type, checked when tasks load

KEY_HEADS = (
    "blood visual heart lung bone muscle liver kidney sleep grip reaction hearing skin joint nerve spine retina "
    "thyroid vocal balance"
).split()
KEY_TAILS = "pressure field rate capacity density tone score level volume index count reflex range strength".split()
VALUES = (
    "amber azure crimson ivory jade olive scarlet teal violet indigo coral maroon ochre cobalt "
    "falcon otter badger heron lynx panda raven walrus beaver gecko mantis osprey "
    "apple cherry lemon mango peach plum quince fig melon papaya "
    "basalt quartz granite marble cinnamon ginger saffron nutmeg clove thyme "
    "anchor bucket candle dagger helmet kettle ladder mirror needle pillow saddle trumpet "
    "tundra delta prairie lagoon steppe savanna fjord atoll mesa bayou "
    "nickel copper bronze pewter cobble velvet denim satin tweed canvas"
).split()


def _value_pool(size: int) -> list[str]:
    """At least `size` distinct values: the word list, then numbered variants ("amber2") when it runs out."""
    pool, n = list(VALUES), 2
    while len(pool) < size:
        pool += [f"{word}{n}" for word in VALUES]
        n += 1
    return pool


def generate(num: int, seed: int = 0, keys: int = 4, updates: int = 64, query: str = "all") -> list[dict]:
    """`num` records with `keys` keys (1..len(KEY_HEADS)*len(KEY_TAILS)) of `updates` updates each."""
    check_range("keys", keys, 1, len(KEY_HEADS) * len(KEY_TAILS))
    check_range("updates", updates, 1)
    if query not in ("all", "one"):
        raise ValueError(f'query must be "all" or "one", got {query!r}')
    params = {"keys": keys, "updates": updates, "query": query}
    records = []
    for index in range(num):
        rng = task_rng(NAME, seed, index)
        names = [f"{head}_{tail}" for head, tail in
                 rng.sample([(h, t) for h in KEY_HEADS for t in KEY_TAILS], keys)]
        history = {name: rng.sample(_value_pool(updates), updates) for name in names}
        order = [name for name in names for _ in range(updates)]
        rng.shuffle(order)
        seen = dict.fromkeys(names, 0)
        lines = []
        for name in order:
            lines.append(f"{name}: {history[name][seen[name]]}")
            seen[name] += 1
        asked = names if query == "all" else [rng.choice(names)]
        intro = ("Below is a stream of updates, one `key: value` line each. "
                 "A later update of a key replaces its earlier value.")
        if query == "all":
            question = (f"What is the current (last) value of each key: {', '.join(asked)}? "
                        "Answer with exactly one line per key, in the form `key: value`.")
        else:
            question = (f"What is the current (last) value of {asked[0]}? "
                        f"Answer with one line, in the form `{asked[0]}: value`.")
        answer = {name: history[name][-1] for name in asked}
        records.append(make_record(NAME, seed, index, intro, "\n".join(lines), question, answer,
                                   bucket=f"{keys}/{updates}", params=params, asked_keys=asked))
    return records


_WRAP = r"[\s*`'\"\[\]<>]*"  # markdown, quotes and brackets around a key or a value
_VALUE = rf"(?P<value>[^\n.,;!?]+?)[*`'\"\]>]*\s*(?=$|[\n.,;!?])"  # a value runs to the end of its clause


def reported_value(response: str, key: str) -> str | None:
    """The value the response gives for `key` (case-insensitive), or None. Keys and values may have several
    words: a value runs to the end of its clause. The answer form `The current value of KEY is VALUE` wins over
    `KEY: VALUE`, `KEY = VALUE` and `KEY is VALUE`; of several, the last counts (a later correction).
    """
    name = r"\s+".join(map(re.escape, key.split()))
    verbal = (rf"\b(?:current|last|latest|final|most recent)\s+value\s+(?:of|for)\s+(?:the\s+)?(?:key\s+)?"
              rf"{_WRAP}{name}{_WRAP}\s(?:is|was)\b\s*:?{_WRAP}{_VALUE}")
    plain = rf"(?<![\w]){name}(?![\w]){_WRAP}(?::|=|\bis\b){_WRAP}{_VALUE}"
    for pattern in (verbal, plain):
        found = [m["value"].strip() for m in re.finditer(pattern, response, re.IGNORECASE)]
        if found:
            return found[-1]
    return None


def score(record: dict, response: str) -> float:
    answer, response = record["answer"], drop_reasoning(response)
    right = sum((reported_value(response, key) or "").casefold() == value.casefold()
                for key, value in answer.items())
    return right / len(answer)


def render_answer(answer: dict) -> str:
    """The ideal response."""
    return "\n".join(f"{key}: {value}" for key, value in answer.items())
