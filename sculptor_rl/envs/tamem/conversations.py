"""LoCoMo-style conversations and their questions (the `tamem` task family), generated with exact gold answers.

A conversation (the shape `locomo.load` gives imported ones too):

    {"id": ..., "speakers": [A, B],
     "sessions": [{"date_time": "1:56 pm on 8 May, 2023",
                   "turns": [{"speaker": A, "dia_id": "D1:1", "text": ...}, ...]}, ...],
     "segments": [...]}   # generated ones only: the oracle's metadata, one per topic block (memory.oracle_notes)

Two speakers talk over `sessions` sessions a few days apart. Each session opens with small talk, then 2-3 topics:
a speaker's job (which changes once: an update), pet, hobbies (mentioned in different sessions: topics recur),
a relative, a trip, a hometown, a race. Events are told with relative times ("yesterday", "last Saturday") that
the session date resolves. Questions come in LoCoMo's four scored categories, each with one exact gold answer:
single-hop (a pet's name, the current job, a relative's name), multi-hop (all hobbies, all jobs: comma lists
gathered over sessions), temporal (when an event happened: a date like "7 May 2023") and open-domain (the country
of a city named in the conversation: world knowledge on top of the memory).

A record is one question (the record format of `sculptor_rl.records`): its user message is
`intro \\n\\n transcript \\n\\n question`, so the no-tool baselines and the ACM env run on it unchanged
(`meta.context` spans the transcript); the tamem env shows only the question and serves the memory through its
tools. The id ends with the category, so any env's trajectories group by it (`metrics.category_of`).
A record holds the conversation's text once, in its message: `meta.conversation` keeps the structure (speakers,
dates, dia_ids, segments) with each turn's `span` in that message instead of its text (`conversation_of`
rebuilds it), so LoCoMo's 1,540 questions do not carry every conversation twice.
"""

from __future__ import annotations

import datetime as dt
import random

from .metrics import CATEGORIES, answer_f1

NAME = "tamem"

__all__ = ["COUNTRIES", "NAME", "conversation_of", "fact_text", "generate", "question_records", "render_answer",
           "render_record", "score", "transcript"]

SPEAKERS = "Alice Bruno Carmen Devon Elena Farid Greta Hassan Irene Jonas Kira Leo Maya Nico Olga Pablo".split()
RELATIVES = "Ana Ben Clara Diego Emma Felix Hana Ivan Julia Karl Lena Marco Nora Omar".split()
JOBS = ("nurse teacher chef librarian architect pharmacist photographer accountant electrician journalist "
        "dentist carpenter").split()
ANIMALS = "dog cat parrot rabbit hamster turtle".split()
PET_NAMES = "Biscuit Pepper Mango Luna Oliver Ziggy Nugget Clover Waffles Pickle".split()
HOBBIES = "pottery painting camping swimming chess gardening photography baking hiking knitting".split()
COUNTRIES = {"Kyoto": "Japan", "Lisbon": "Portugal", "Toronto": "Canada", "Nairobi": "Kenya", "Cusco": "Peru",
             "Marrakech": "Morocco", "Hanoi": "Vietnam", "Krakow": "Poland", "Melbourne": "Australia",
             "Seville": "Spain", "Munich": "Germany", "Istanbul": "Turkey", "Oslo": "Norway", "Dublin": "Ireland"}
RELATIONS = ("sister", "brother", "cousin")
# (phrase, days back from the session date, or None for "the last <weekday>")
REFS = (("yesterday", 1), ("two days ago", 2), ("three days ago", 3), ("last Saturday", None), ("last Sunday", None))
_WEEKDAYS = {"Saturday": 5, "Sunday": 6}

SMALL_TALK = (
    ("Hey {o}! It's been a while, how are you doing?", "Hi {s}! Pretty good, just a busy week. You?",
     "Same here, but it's nice to catch up."),
    ("Good to hear from you, {o}! How was your week?", "Long, but fine! The weather finally got better.",
     "Yes, I even had lunch outside today."),
    ("Hi {o}, do you have a minute to chat?", "Always, {s}! What's new with you?", "Quite a lot, actually."),
)
REACTIONS = ("That's wonderful, {s}!", "Wow, good for you!", "Oh nice, tell me more!", "That sounds amazing.",
             "I'm so happy for you!")
# the fact and event phrasings: the notes, the tool results and the teacher's patterns all come from these
FACTS = {"job": "{p} works as {job}", "pet": "{p}'s {animal} is named {pet}", "hobby": "{p} enjoys {hobby}",
         "relative": "{p}'s {relation} is {name}", "home": "{p} grew up in {city}"}
EVENTS = {"job": "{p} started a new job as {job}", "pet": "{p} adopted a {animal} named {pet}",
          "trip": "{p} traveled to {city}", "race": "{p} ran a half marathon"}


def article(noun: str) -> str:
    return f"{'an' if noun[:1] in tuple('aeiou') else 'a'} {noun}"


def fact_text(kind: str, **slots) -> str:
    return FACTS[kind].format(**slots)


def event_text(kind: str, **slots) -> str:
    return EVENTS[kind].format(**slots)


def resolve(date: dt.date, ref: str) -> dt.date:
    """The date a relative time phrase said on `date` refers to."""
    back = dict(REFS)[ref]
    if back is None:
        back = (date.weekday() - _WEEKDAYS[ref.split()[-1]] - 1) % 7 + 1
    return date - dt.timedelta(days=back)


def day(date: dt.date) -> str:
    """LoCoMo's answer form of a date: "7 May 2023"."""
    return f"{date.day} {date:%B %Y}"


def _topics(rng: random.Random, p: str) -> list[dict]:
    """One speaker's topic blocks (each: kind, its lines, facts, events, the questions it answers)."""
    job1, job2 = rng.sample(JOBS, 2)
    animal, pet = rng.choice(ANIMALS), rng.choice(PET_NAMES)
    hobbies = rng.sample(HOBBIES, rng.choice((2, 3)))
    relation, relative = rng.choice(RELATIONS), rng.choice(RELATIVES)
    trip, home = rng.sample(sorted(COUNTRIES), 2)
    refs = {k: rng.choice(REFS)[0] for k in ("job2", "pet", "trip", "race")}
    return [
        {"kind": "job", "tag": "work", "keywords": [job1, "work"],
         "line": f"Work has been busy. Being {article(job1)} is tiring, but I love helping people.",
         "follow": "Some days are long, but it's worth it.", "facts": [fact_text("job", p=p, job=article(job1))]},
        *({"kind": "hobby", "tag": "hobbies", "keywords": [hobby],
           "line": f"I've been getting into {hobby} lately. It's so relaxing after a long day.",
           "follow": "I'll show you some of it next time.", "facts": [fact_text("hobby", p=p, hobby=hobby)]}
          for hobby in hobbies),
        {"kind": "relative", "tag": "family", "keywords": [relation, relative], "people": [relative],
         "line": f"My {relation} {relative} is coming to stay with us for a few days.",
         "follow": f"{relative} and I have a lot of catching up to do.",
         "facts": [fact_text("relative", p=p, relation=relation, name=relative)]},
        {"kind": "home", "tag": "home", "keywords": [home, "home"],
         "line": f"This weather reminds me of {home}, where I grew up.",
         "follow": "I miss the old streets sometimes.", "facts": [fact_text("home", p=p, city=home)]},
        {"kind": "pet", "tag": "pets", "keywords": [animal, pet], "ref": refs["pet"],
         "line": f"We adopted a {animal} {refs['pet']}! We named it {pet}.",
         "follow": f"{pet} already follows me everywhere.", "facts": [fact_text("pet", p=p, animal=animal, pet=pet)],
         "event": event_text("pet", p=p, animal=animal, pet=pet)},
        {"kind": "trip", "tag": "travel", "keywords": [trip, "trip"], "ref": refs["trip"],
         "line": f"I got back from a trip to {trip} {refs['trip']}. The food was amazing.",
         "follow": "I took way too many pictures.", "facts": [], "event": event_text("trip", p=p, city=trip)},
        {"kind": "race", "tag": "sports", "keywords": ["half marathon", "race"], "ref": refs["race"],
         "line": f"I ran a half marathon {refs['race']}! My legs are still sore.",
         "follow": "I trained for months for it.", "facts": [], "event": event_text("race", p=p)},
        {"kind": "job2", "tag": "work", "keywords": [job2, "job"], "ref": refs["job2"],
         "line": f"Big news: I started a new job as {article(job2)} {refs['job2']}!",
         "follow": "It's a big change, but I was ready for it.", "facts": [fact_text("job", p=p, job=article(job2))],
         "event": event_text("job", p=p, job=article(job2))},
    ], {"job1": job1, "job2": job2, "animal": animal, "pet": pet, "hobbies": hobbies, "relation": relation,
        "relative": relative, "trip": trip, "home": home}


def _questions(p: str, facts: dict, dates: dict[str, str]) -> list[dict]:
    """Every question about speaker `p`: category, kind (what the teacher looks up), text, gold answer."""
    f = facts
    return [
        {"category": "single-hop", "kind": "pet", "about": f["animal"],
         "question": f"What is the name of {p}'s {f['animal']}?", "answer": f["pet"]},
        {"category": "single-hop", "kind": "job", "question": f"What is {p}'s job now?", "answer": f["job2"]},
        {"category": "single-hop", "kind": "relative", "about": f["relation"],
         "question": f"What is the name of {p}'s {f['relation']}?", "answer": f["relative"]},
        {"category": "multi-hop", "kind": "hobby", "question": f"What hobbies has {p} mentioned?",
         "answer": ", ".join(f["hobbies"])},
        {"category": "multi-hop", "kind": "jobs", "question": f"Which jobs has {p} had?",
         "answer": f"{f['job1']}, {f['job2']}"},
        {"category": "temporal", "kind": "pet", "about": f["pet"], "question": f"When did {p} adopt {f['pet']}?",
         "answer": dates["pet"]},
        {"category": "temporal", "kind": "trip", "about": f["trip"], "question": f"When did {p} travel to {f['trip']}?",
         "answer": dates["trip"]},
        {"category": "temporal", "kind": "race", "question": f"When did {p} run a half marathon?",
         "answer": dates["race"]},
        {"category": "temporal", "kind": "job2", "about": f["job2"],
         "question": f"When did {p} start the job as {article(f['job2'])}?", "answer": dates["job2"]},
        {"category": "open-domain", "kind": "trip", "question": f"Which country did {p} travel to?",
         "answer": COUNTRIES[f["trip"]]},
        {"category": "open-domain", "kind": "home", "question": f"In which country did {p} grow up?",
         "answer": COUNTRIES[f["home"]]},
    ]


def conversation(seed: int, index: int, sessions: int = 8) -> tuple[dict, list[dict]]:
    """Conversation `index` of `seed` and all its questions (each with person, kind and evidence dia ids)."""
    rng = random.Random(f"{NAME}:{seed}:{index}")
    a, b = rng.sample(SPEAKERS, 2)
    blocks, facts = [], {}
    for p in (a, b):
        topics, facts[p] = _topics(rng, p)
        blocks += [{**t, "person": p} for t in topics]
    rng.shuffle(blocks)
    for p in (a, b):  # the first job is told before the new one (the update)
        i, j = (next(k for k, t in enumerate(blocks) if t["person"] == p and t["kind"] == kind)
                for kind in ("job", "job2"))
        if i > j:
            blocks[i], blocks[j] = blocks[j], blocks[i]
    per = [len(blocks) // sessions + (k < len(blocks) % sessions) for k in range(sessions)]
    date = dt.datetime(2023, 1, 1) + dt.timedelta(days=rng.randrange(300), minutes=rng.randrange(9 * 60, 21 * 60))
    convo = {"id": f"{NAME}-s{seed}-{index:05d}", "speakers": [a, b], "sessions": [], "segments": []}
    dates, evidence, msg = {}, {}, 0
    for s in range(sessions):
        date += dt.timedelta(days=rng.randrange(3, 15), minutes=rng.randrange(-120, 120))
        stamp = f"{date:%-I:%M} {date:%p}".lower() + f" on {date.day} {date:%B}, {date.year}"
        turns: list[dict] = []
        opener = rng.choice((a, b))
        other = b if opener == a else a
        small = rng.choice(SMALL_TALK)
        topic_blocks = blocks[sum(per[:s]):sum(per[:s + 1])]
        greeting = {"kind": "small talk", "tag": "small talk", "keywords": ["catch up"], "person": opener, "facts": []}
        hello = [(opener, small[0].format(o=other, s=opener)), (other, small[1].format(o=other, s=opener)),
                 (opener, small[2])]
        segments = [(greeting, hello)]
        for t in topic_blocks:
            p = t["person"]
            o = b if p == a else a
            segments.append((t, [(p, t["line"]), (o, rng.choice(REACTIONS).format(s=p)), (p, t["follow"])]))
        for t, lines in segments:
            first = msg
            for speaker, text in lines:
                turns.append({"speaker": speaker, "dia_id": f"D{s + 1}:{len(turns) + 1}", "text": text})
                msg += 1
            when = day(resolve(date.date(), t["ref"])) if "ref" in t else None
            if when:
                dates.setdefault(t["person"], {})[t["kind"]] = when
            evidence.setdefault((t["person"], t["kind"]), []).append(turns[len(turns) - len(lines)]["dia_id"])
            people = [t["person"], *t.get("people", [])]
            convo["segments"].append({
                "session": s, "start": first, "end": msg - 1, "tag": t["tag"], "keywords": t["keywords"],
                "people": people, "summary": _summary(t, lines),
                "facts": [{"person": t["person"], "fact": f} for f in t["facts"]],
                "events": [{"person": t["person"], "event": t["event"], "time": when}] if "event" in t else []})
        convo["sessions"].append({"date_time": stamp, "turns": turns})
    questions = []
    for p in (a, b):
        for q in _questions(p, facts[p], dates[p]):
            kinds = {"hobby": ("hobby",), "jobs": ("job", "job2"), "job": ("job2",)}.get(q["kind"], (q["kind"],))
            questions.append({**q, "person": p, "evidence": [e for k in kinds for e in evidence[(p, k)]]})
    return convo, questions


def _summary(t: dict, lines: list[tuple[str, str]]) -> str:
    speaker, first = lines[0]
    if t["tag"] == "small talk":
        return f"{speaker} and {lines[1][0]} greet each other and catch up."
    return f"{speaker} tells {lines[1][0]}: {first}"


def _transcript(convo: dict) -> tuple[str, list[list[tuple[int, int]]]]:
    """The transcript and, per session, each turn's text span in it."""
    out, spans, pos = [], [], 0
    for k, session in enumerate(convo["sessions"]):
        head = ("\n\n" if k else "") + f"DATE: {session['date_time']}\nCONVERSATION:\n"
        out.append(head)
        pos += len(head)
        spans.append([])
        for i, t in enumerate(session["turns"]):
            line = ("\n" if i else "") + f'{t["speaker"]} said, "'
            out.append(f'{line}{t["text"]}"')
            spans[-1].append((pos + len(line), pos + len(line) + len(t["text"])))
            pos += len(line) + len(t["text"]) + 1
    return "".join(out), spans


def transcript(convo: dict) -> str:
    """The conversation as LoCoMo's own QA prompt shows it: per session its DATE, then `X said, "..."` lines."""
    return _transcript(convo)[0]


def conversation_of(record: dict) -> dict:
    """A record's conversation with its turns' text, cut from the record's message by each turn's span."""
    convo, text = record["meta"]["conversation"], record["messages"][0]["content"]
    return {**convo, "sessions": [{**s, "turns": [{**{k: v for k, v in t.items() if k != "span"},
                                                    "text": text[t["span"][0]:t["span"][1]]} for t in s["turns"]]}
                                  for s in convo["sessions"]]}


INTRO = "Below is a conversation between {a} and {b} over several sessions, each with its date."
QUESTION = "Question: {q} Answer with a short phrase, using exact words from the conversation whenever possible."


def question_records(convo: dict, qas: list[dict], **meta) -> list[dict]:
    """One record per question (`qas`: question, answer, category, evidence, and for generated ones person/kind/
    about). `meta.bucket` is the category (eval's per-bucket tables are then per category), `meta.conversation`
    holds the conversation's structure with each turn's span (`conversation_of`), `meta.context` spans its
    transcript."""
    intro = INTRO.format(a=convo["speakers"][0], b=convo["speakers"][1])
    context, spans = _transcript(convo)
    start = len(intro) + 2
    stored = {**convo, "sessions": [
        {**s, "turns": [{**{k: v for k, v in t.items() if k != "text"}, "span": [start + a, start + b]}
                        for t, (a, b) in zip(s["turns"], turn_spans)]}
        for s, turn_spans in zip(convo["sessions"], spans)]}
    records = []
    for k, qa in enumerate(qas):
        question = QUESTION.format(q=qa["question"])
        records.append({
            "id": f"{convo['id']}-q{k:03d}-{qa['category']}",
            "task": NAME,
            "messages": [{"role": "user", "content": f"{intro}\n\n{context}\n\n{question}"}],
            "answer": str(qa["answer"]),
            "meta": {"bucket": qa["category"], "category": qa["category"], "question": qa["question"],
                     **{key: qa[key] for key in ("evidence", "person", "kind", "about") if key in qa},
                     **meta, "conversation": stored,
                     "context": [{"message": 0, "start": start, "end": start + len(context)}]},
        })
    return records


def generate(num: int, seed: int = 0, sessions: int = 8, questions_per_conversation: int = 8) -> list[dict]:
    """`num` question records; each conversation gives `questions_per_conversation` of them, taken round-robin
    over the four categories (so they stay balanced), the speakers alternating."""
    for name, value, low in (("num", num, 0), ("sessions", sessions, 2), ("questions_per_conversation",
                                                                          questions_per_conversation, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    records, index = [], 0
    while len(records) < num:
        convo, questions = conversation(seed, index, sessions)
        rng = random.Random(f"{NAME}:questions:{seed}:{index}")
        pools = {c: rng.sample(qs, len(qs)) for c in CATEGORIES if (qs := [q for q in questions if q["category"] == c])}
        picked = []
        while len(picked) < min(questions_per_conversation, len(questions)):
            for c in CATEGORIES:
                if pools[c] and len(picked) < questions_per_conversation:
                    picked.append(pools[c].pop())
        records += question_records(convo, picked, sessions=sessions,
                                    questions_per_conversation=questions_per_conversation)
        index += 1
    return records[:num]


def score(record: dict, response: str) -> float:
    """LoCoMo's F1 of the response against the gold answer, by the question's category's rule."""
    return answer_f1(response, record["answer"], record["meta"]["category"])


def render_answer(answer) -> str:
    return str(answer)


def render_record(record: dict) -> str:
    """The ideal response to a record: LoCoMo scores an open-domain question against its gold cut at the first
    ";" (task_eval/evaluation.py), so that part is the answer there."""
    answer = str(record["answer"])
    return answer.split(";")[0].strip() if record["meta"]["category"] == "open-domain" else answer
