"""The LLM memory extractor (paper §III.A, eq. 1): one-shot, multi-task prompting, one call per input context.

The input contexts C_n are the conversation's sessions: the extractor gets one session's messages, numbered
conversation-wide, with the session's date, and returns in one reply the notes of its topic segments (chunked
where the topic shifts, neighbours overlapping by a message) with summary, keywords, people, facts, events with
dates resolved against the session date, and a tag (eq. 2). The reply is parsed (the JSON object in it, code
fences allowed) and validated (`memory.validate_notes`, and every note inside its session); a malformed reply
is sent back with the error for a corrected one, up to `retries` times, and then reported: the session has no
notes and the cache file lists the failure.

`run(conversations, complete, out_dir)` extracts every conversation not yet cached and writes
`out_dir/<conversation id>.json` ({"conversation_sha256", "notes", "failures"}); `load(out_dir, conversation)`
reads one back and checks it is of that conversation. `complete(batch of message lists) -> texts` is any
model: `sculptor_rl.envs.tamem.env.extract_notes` asks the run's LLM (`envs.llm`) through it.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Callable

from .memory import NoteError, messages, validate_notes

__all__ = ["EXTRACT_PROMPT", "load", "parse", "prompt", "run"]

EXTRACT_PROMPT = """You build the memory of a conversation. Below are the messages of one session, numbered, with the session's date.
1. Split them into segments where the topic shifts; a segment may repeat the last message of the one before it (a small overlap).
2. For each segment write a note: "start" and "end" (its first and last message number), "summary" (one sentence), "keywords" (important words that appear in the messages), "people" (everyone involved or mentioned), "facts" (lasting facts about a person: {{"person", "fact"}}), "events" (things that happened: {{"person", "event", "time"}}, the time a date resolved from the session date, e.g. "yesterday" on 8 May 2023 is "7 May 2023"), "tag" (a short topic tag).
Reply with one JSON object {{"notes": [...]}} and nothing else.

Example.
Session date: 3:10 pm on 8 May, 2023
[40] Maya: Hi Leo! How was your weekend?
[41] Leo: Great! I ran a half marathon yesterday.
[42] Maya: Wow, congratulations!
[43] Leo: Thanks! By the way, my sister Ana works as a nurse now.
Reply:
{{"notes": [{{"start": 40, "end": 42, "summary": "Leo tells Maya he ran a half marathon.", "keywords": ["weekend", "half marathon"], "people": ["Maya", "Leo"], "facts": [], "events": [{{"person": "Leo", "event": "Leo ran a half marathon", "time": "7 May 2023"}}], "tag": "sports"}}, {{"start": 42, "end": 43, "summary": "Leo says his sister Ana is a nurse.", "keywords": ["sister", "nurse"], "people": ["Leo", "Ana"], "facts": [{{"person": "Ana", "fact": "Ana works as a nurse"}}, {{"person": "Leo", "fact": "Leo's sister is Ana"}}], "events": [], "tag": "family"}}]}}

Session date: {date}
{lines}
Reply:"""
RETRY = "That reply is not valid: {error}. Reply with the corrected JSON object only."


def prompt(convo: dict, session: int) -> tuple[list[dict], range]:
    """The extractor's messages for one session, and the message numbers the session holds."""
    msgs = messages(convo)
    numbers = [i for i, (s, _, _) in enumerate(msgs) if s == session]
    lines = "\n".join(f"[{i}] {msgs[i][1]}: {msgs[i][2]}" for i in numbers)
    text = EXTRACT_PROMPT.format(date=convo["sessions"][session]["date_time"], lines=lines)
    return [{"role": "user", "content": text}], range(numbers[0], numbers[-1] + 1)


def parse(reply: str, numbers: range) -> list[dict]:
    """The notes in an extractor's reply, validated, each inside `numbers` (NoteError says what is wrong)."""
    text = re.sub(r"```(?:json)?", "", reply)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise NoteError("no JSON object in the reply")
    try:
        data = json.loads(text[start:end + 1])
    except (ValueError, RecursionError) as e:
        raise NoteError(f"the JSON does not parse ({' '.join(str(e).split())[:120]})") from None
    notes = validate_notes(data, numbers.stop)
    for i, n in enumerate(notes):
        if n["start"] not in numbers or n["end"] not in numbers:
            raise NoteError(f"note {i}: messages {n['start']}..{n['end']} are not within this session's "
                            f"{numbers.start}..{numbers.stop - 1}")
    return notes


def _digest(convo: dict) -> str:
    return hashlib.sha256(json.dumps(convo["sessions"], sort_keys=True).encode()).hexdigest()


def _path(out_dir: Path, convo: dict) -> Path:
    return out_dir / (re.sub(r"[^\w.-]+", "_", str(convo["id"])) + ".json")


def load(out_dir: Path, convo: dict) -> list[dict]:
    """The cached notes of `convo` (ValueError when there are none, or they belong to another conversation)."""
    path = _path(out_dir, convo)
    if not path.exists():
        raise ValueError(f"no extracted notes for conversation {convo['id']!r} in {out_dir}: run the extractor "
                         "(sculptor_rl.envs.tamem.extract_notes) first")
    saved = json.loads(path.read_text())
    if saved.get("conversation_sha256") != _digest(convo):
        raise ValueError(f"{path} holds the notes of another version of conversation {convo['id']!r}")
    return saved["notes"]


def run(convos: list[dict], complete: Callable[[list[list[dict]]], list[str]], out_dir: Path,
        retries: int = 1) -> dict:
    """Extract and cache the notes of every conversation not cached yet; all sessions go to `complete` in one batch
    per attempt. Returns counts: conversations extracted and reused, sessions, sessions retried and failed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    todo, reused = [], 0
    for convo in convos:
        try:
            load(out_dir, convo)
            reused += 1
        except ValueError:
            todo.append(convo)
    jobs = [{"convo": c, "session": s, "prompt": prompt(c, s)} for c in todo for s in range(len(c["sessions"]))]
    for job in jobs:
        job["messages"] = job["prompt"][0]
    pending, retried = list(jobs), 0
    for attempt in range(retries + 1):
        if not pending:
            break
        replies = complete([job["messages"] for job in pending])
        still = []
        for job, reply in zip(pending, replies):
            try:
                job["notes"] = parse(reply, job["prompt"][1])
            except NoteError as e:
                job["error"], job["reply"] = str(e), reply
                job["messages"] = [*job["messages"], {"role": "assistant", "content": reply},
                                   {"role": "user", "content": RETRY.format(error=e)}]
                still.append(job)
        retried += len(still) if attempt < retries else 0
        pending = still
    for convo in todo:
        done = [j for j in jobs if j["convo"] is convo]
        notes = [n for j in done for n in j.get("notes", [])]
        failures = [{"session": j["session"], "error": j["error"], "reply": j["reply"][:2000]}
                    for j in done if "notes" not in j]
        _path(out_dir, convo).write_text(json.dumps({"conversation_sha256": _digest(convo), "notes": notes,
                                                     "failures": failures}, indent=1))
    return {"conversations": len(convos), "extracted": len(todo), "reused": reused, "sessions": len(jobs),
            "retried": retried, "failed": len(pending)}
