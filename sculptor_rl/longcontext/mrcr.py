"""MRCR style multi-round co-reference: an earlier user/assistant conversation, rendered as a transcript
inside the user message, holds many similar requests ("Write a riddle about tapirs.") with unique replies;
one request appears `needles` times and the question asks for the reply to its i-th occurrence.

Scored like OpenAI's MRCR: difflib SequenceMatcher ratio between the reply text (after the last `Answer:`
label, else the whole response; whitespace collapsed, surrounding quotes and punctuation stripped) and
the true reply. 1.0 only for the exact reply; a similar reply to another occurrence scores well below 1.
"""

from __future__ import annotations

from difflib import SequenceMatcher

from .common import (ADJECTIVES, NOUNS, VERBS, answer_text, check_range, clean, filler_sentence, make_record,
                     ordinal, size_label, task_rng)
from .common import render_value as render_answer  # noqa: F401 (the family API)

NAME = "mrcr"

TOPICS = (
    "tapirs lighthouses volcanoes submarines bicycles octopuses libraries thunderstorms chess coffee deserts "
    "kites penguins trains umbrellas bees lemons robots pirates islands"
).split()
# request -> the opening of a reply; the rest of a reply is filler, which makes every reply unique.
FORMATS = {
    "Write a short poem about {topic}.": "O {topic}, {a} and {a2}, you {v} the {n} like a {n2}.",
    "Write a riddle about {topic}.": "I am {a} yet never {a2}; I {v} the {n} but never the {n2}. What am I?",
    "Write a haiku about {topic}.": "{A} {topic} rest / beneath the {a2} {n} / the {n2} listens.",
    "Write a slogan for {topic}.": "{Topic}: {a} as a {n}, {a2} as a {n2}!",
    "Tell me a short story about {topic}.": "Once upon a time, the {a} {topic} {v} a {a2} {n}.",
}


def _reply(rng, request: str, topic: str, length: int) -> str:
    a, a2 = rng.sample(ADJECTIVES, 2)
    n, n2 = rng.sample(NOUNS, 2)
    reply = FORMATS[request].format(topic=topic, Topic=topic.capitalize(), a=a, A=a.capitalize(), a2=a2, n=n,
                                    n2=n2, v=rng.choice(VERBS))
    while len(reply) < length:
        reply += " " + filler_sentence(rng)
    return reply


def generate(num: int, seed: int = 0, turns: int = 20, needles: int = 2, context_tokens: int = 2000) -> list[dict]:
    """`num` transcripts of `turns` exchanges (`needles` of them the asked request) of about
    `context_tokens` tokens in total: the length goes into the replies."""
    check_range("needles", needles, 1)
    check_range("turns", turns, needles)
    check_range("context_tokens", context_tokens, 100)
    params = {"turns": turns, "needles": needles, "context_tokens": context_tokens}
    reply_chars = max(1, 4 * context_tokens // turns - 60)  # ~60 characters go to the request line
    requests = [(form.format(topic=topic), form, topic) for form in FORMATS for topic in TOPICS]
    records = []
    for index in range(num):
        rng = task_rng(NAME, seed, index)
        target, *others = rng.sample(requests, len(requests))
        slots = set(rng.sample(range(turns), needles))
        exchanges, replies = [], set()
        for turn in range(turns):
            text, form, topic = target if turn in slots else rng.choice(others)
            reply = _reply(rng, form, topic, reply_chars)
            while reply in replies:  # unique replies: the question must have exactly one right answer
                reply = _reply(rng, form, topic, reply_chars)
            replies.add(reply)
            exchanges.append((text, reply))
        answers = [reply for text, reply in exchanges if text == target[0]]
        nth = rng.randint(1, needles)
        intro = "Below is the transcript of an earlier conversation between a user and an assistant."
        times = "once" if needles == 1 else f"{needles} times"
        question = (f'In that conversation the user asked "{target[0]}" {times}. Return the assistant\'s reply '
                    f"to the {ordinal(nth)} of these requests, exactly as written, in the form `Answer: REPLY`.")
        context = "\n\n".join(f"User: {text}\nAssistant: {reply}" for text, reply in exchanges)
        records.append(make_record(NAME, seed, index, intro, context, question, answers[nth - 1],
                                   bucket=f"{size_label(context_tokens)}/{needles}", params=params,
                                   request=target[0], occurrence=nth))
    return records


def score(record: dict, response: str) -> float:
    got, gold = clean(answer_text(response, multiline=True)), clean(record["answer"])
    return SequenceMatcher(None, got, gold, autojunk=False).ratio()  # autojunk would ignore common letters
