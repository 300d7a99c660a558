"""NeedleBench multi-needle reasoning (ancestral trace): a chain of kinship statements ("Ada is the mother
of Bob.", "Bob's father is Cid.", ...) hidden at shuffled places in filler text; the question asks for the
eldest ancestor of the chain's youngest person. Exact match on the name (case-insensitive, see
`common.score_value`).
"""

from __future__ import annotations

import re
from itertools import pairwise

from .common import NAMES, check_range, make_record, size_label, task_rng, weave
from .common import render_value as render_answer, score_value as score  # noqa: F401 (the family API)

NAME = "needlebench"

RELATIONS = ("father", "mother", "grandfather", "grandmother")
TEMPLATES = (
    "{elder} is the {rel} of {younger}.",
    "{younger}'s {rel} is {elder}.",
    "As the {rel} of {younger}, {elder} keeps the family records.",
    "{elder}, the {rel} of {younger}, lives nearby.",
)


def _pattern(template: str) -> re.Pattern:
    groups = {"elder": r"(?P<elder>[A-Z][a-z]+)", "younger": r"(?P<younger>[A-Z][a-z]+)",
              "rel": f"(?:{'|'.join(RELATIONS)})"}
    parts = re.split(r"\{(\w+)\}", template)  # literal, field, literal, ...
    return re.compile("".join(groups[p] if i % 2 else re.escape(p) for i, p in enumerate(parts)))


PATTERNS = tuple(_pattern(t) for t in TEMPLATES)


def parse_relations(text: str) -> dict[str, str]:
    """{younger: elder} for every kinship statement in `text`."""
    return {m["younger"]: m["elder"] for p in PATTERNS for m in p.finditer(text)}


def eldest_ancestor(parents: dict[str, str], person: str) -> str:
    seen = {person}
    while parents.get(person) and parents[person] not in seen:
        person = parents[person]
        seen.add(person)
    return person


def generate(num: int, seed: int = 0, needles: int = 3, context_tokens: int = 2000) -> list[dict]:
    """`num` records, each a chain of `needles` statements in about `context_tokens` tokens of filler."""
    check_range("needles", needles, 1, len(NAMES) - 1)
    check_range("context_tokens", context_tokens, 100)
    params = {"needles": needles, "context_tokens": context_tokens}
    records = []
    for index in range(num):
        rng = task_rng(NAME, seed, index)
        chain = rng.sample(NAMES, needles + 1)  # eldest first
        statements = [rng.choice(TEMPLATES).format(elder=elder, younger=younger, rel=rng.choice(RELATIONS))
                      for elder, younger in pairwise(chain)]
        context = weave(rng, statements, context_tokens, shuffle=True)
        intro = "Read the following text carefully; a few of its sentences state family relations."
        question = (f"Following only the family relations stated in the text, who is the eldest ancestor of "
                    f"{chain[-1]} that can be traced? Answer with the name only, in the form `Answer: NAME`.")
        records.append(make_record(NAME, seed, index, intro, context, question, chain[0],
                                   bucket=f"{size_label(context_tokens)}/{needles}", params=params,
                                   person=chain[-1]))
    return records

