"""BABILong style (bAbI task 1, single supporting fact): facts such as "Mary moved to the kitchen." spread in
time order through filler text; the question "Where is Mary?" asks for the place of that person's last move.
Single-word answer, exact match (case-insensitive, see `common.score_value`).
"""

from __future__ import annotations

import re

from .common import NAMES, check_range, make_record, size_label, task_rng, weave
from .common import render_value as render_answer, score_value as score  # noqa: F401 (the family API)

NAME = "babilong"

PLACES = ("kitchen", "garden", "hallway", "bathroom", "bedroom", "office")
MOVES = ("moved to", "went to", "journeyed to", "travelled to", "went back to")
FACT = re.compile(rf"(?P<person>[A-Z][a-z]+) (?:{'|'.join(MOVES)}) the (?P<place>\w+)\.")


def last_place(text: str, person: str) -> str | None:
    """Where the last fact about `person` in `text` puts them."""
    places = [m["place"] for m in FACT.finditer(text) if m["person"] == person]
    return places[-1] if places else None


def generate(num: int, seed: int = 0, facts: int = 6, context_tokens: int = 2000) -> list[dict]:
    """`num` stories of `facts` moves by up to 4 people, in about `context_tokens` tokens of filler."""
    check_range("facts", facts, 1)
    check_range("context_tokens", context_tokens, 100)
    params = {"facts": facts, "context_tokens": context_tokens}
    records = []
    for index in range(num):
        rng = task_rng(NAME, seed, index)
        people = rng.sample(NAMES, min(facts, 4))
        where: dict[str, str] = {}
        sentences = []
        for _ in range(facts):
            person = rng.choice(people)
            where[person] = rng.choice([p for p in PLACES if p != where.get(person)])
            sentences.append(f"{person} {rng.choice(MOVES)} the {where[person]}.")
        person = rng.choice(sorted(where))
        context = weave(rng, sentences, context_tokens, shuffle=False)
        intro = "Read the following text carefully; some of its sentences tell where people go."
        question = f"Where is {person}? Answer with one word, in the form `Answer: PLACE`."
        records.append(make_record(NAME, seed, index, intro, context, question, where[person],
                                   bucket=f"{size_label(context_tokens)}/{facts}", params=params,
                                   person=person))
    return records

