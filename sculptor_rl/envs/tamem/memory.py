"""TA-Mem's memory: notes and pages (paper eq. 2-3), their validation, the oracle extractor, and the
multi-indexed database with its queries (eq. 4-6).

A note (eq. 2, N_i = {m, n, S_i, K_i, P_i, F_i, (E_i, t_i), T_i}) is plain JSON:

    {"start": m, "end": n,                      # the messages it covers (conversation-wide 0-based indices)
     "summary": S, "keywords": [K...], "people": [P...],
     "facts": [{"person": ..., "fact": ...}], "events": [{"person": ..., "event": ..., "time": ...}], "tag": T}

A page (eq. 3, M_i = {c_mn, N_i, t}) is the note with the original dialogue of messages m..n and the timestamp of
the session m lies in. `oracle_notes` builds the notes of a generated conversation from its own metadata (one
per topic block, each reaching `overlap` messages into the next block of its session: the paper's smoothing
overlap), so the retrieval policy trains and tests without an extractor model; `validate_notes` checks an
extractor's notes (the LLM's, `extract`) and says exactly what is wrong.

The database indexes pages by keyword, person and tag (key match, eq. 4: case and spacing ignored), ranks events
and facts against a query (top-k, eq. 5: BM25, `sculptor_rl.memory.bm25_scores`, offline, where the paper embeds with
all-MiniLM-L6-v2), collects each person's events (with times) and facts (eq. 6), and lists its keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...memory import bm25_scores, top_k

__all__ = ["MemoryDB", "NoteError", "Page", "messages", "oracle_notes", "pages", "validate_notes"]

NOTE_FIELDS = ("start", "end", "summary", "keywords", "people", "facts", "events", "tag")


class NoteError(ValueError):
    """Notes that do not follow the note format: the message says which note and field."""


def messages(convo: dict) -> list[tuple[int, str, str]]:
    """Every message of the conversation in order: (session index, speaker, text)."""
    return [(s, t["speaker"], t["text"]) for s, session in enumerate(convo["sessions"]) for t in session["turns"]]


def oracle_notes(convo: dict, overlap: int = 1) -> list[dict]:
    """The notes of a generated conversation, from its topic blocks (`convo["segments"]`)."""
    if "segments" not in convo:
        raise ValueError(f"conversation {convo.get('id')!r} has no generator metadata (segments): oracle notes "
                         "exist only for generated conversations; extract notes with an LLM (`extract`)")
    sessions = [s for s, _, _ in messages(convo)]
    notes = []
    for seg in convo["segments"]:
        end = seg["end"]
        while end + 1 < len(sessions) and end < seg["end"] + overlap and sessions[end + 1] == seg["session"]:
            end += 1
        notes.append({"start": seg["start"], "end": end, **{k: seg[k] for k in NOTE_FIELDS[2:]}})
    return notes


def _strings(value, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise NoteError(f"{where} must be a list of strings")
    return [v.strip() for v in value if v.strip()]


def validate_notes(data, num_messages: int) -> list[dict]:
    """`data` (a list of notes, or {"notes": [...]}) checked and cleaned: every field present with its type,
    0 <= start <= end < num_messages, facts and events as objects with their string fields."""
    if isinstance(data, dict) and "notes" in data:
        data = data["notes"]
    if not isinstance(data, list) or not data:
        raise NoteError('expected a non-empty list of notes (or {"notes": [...]})')
    out = []
    for i, note in enumerate(data):
        where = f"note {i}"
        if not isinstance(note, dict):
            raise NoteError(f"{where} is not an object")
        missing = [k for k in NOTE_FIELDS if k not in note]
        if missing:
            raise NoteError(f"{where} lacks {', '.join(missing)}")
        start, end = note["start"], note["end"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            raise NoteError(f"{where}: start and end must be integers")
        if not 0 <= start <= end < num_messages:
            raise NoteError(f"{where}: messages {start}..{end} are not within 0..{num_messages - 1}")
        for key in ("summary", "tag"):
            if not isinstance(note[key], str) or not note[key].strip():
                raise NoteError(f"{where}: {key} must be a non-empty string")
        clean = {"start": start, "end": end, "summary": note["summary"].strip(), "tag": note["tag"].strip(),
                 "keywords": _strings(note["keywords"], f"{where}: keywords"),
                 "people": _strings(note["people"], f"{where}: people")}
        for key, fields in (("facts", ("person", "fact")), ("events", ("person", "event", "time"))):
            records = note[key]
            if not isinstance(records, list):
                raise NoteError(f"{where}: {key} must be a list")
            for j, r in enumerate(records):
                if not isinstance(r, dict) or not all(isinstance(r.get(f), str) for f in fields):
                    raise NoteError(f"{where}: {key}[{j}] must be an object with string fields {', '.join(fields)}")
            clean[key] = [{f: r[f].strip() for f in fields} for r in records if r[fields[1]].strip()]
        out.append(clean)
    return out


@dataclass(frozen=True)
class Page:
    id: str  # p1, p2, ... in conversation order
    session: int  # 0-based
    timestamp: str  # the session's date_time
    dialogue: tuple[str, ...]  # "Speaker: text" of messages start..end
    note: dict

    def render(self) -> str:
        n = self.note
        lines = [f"Page {self.id} | session {self.session + 1}, {self.timestamp} | messages {n['start']}-{n['end']} "
                 f"| tag: {n['tag']} | people: {', '.join(n['people'])} | keywords: {', '.join(n['keywords'])}",
                 f"Summary: {n['summary']}"]
        if n["facts"]:
            lines.append("Facts: " + "; ".join(f["fact"] for f in n["facts"]))
        if n["events"]:
            lines.append("Events: " + "; ".join(f"{e['event']} ({e['time']})" for e in n["events"]))
        return "\n".join([*lines, "Dialogue:", *self.dialogue])


def pages(convo: dict, notes: list[dict]) -> list[Page]:
    """The memory pages of a conversation's notes (eq. 3)."""
    msgs = messages(convo)
    return [Page(f"p{i + 1}", msgs[n["start"]][0], convo["sessions"][msgs[n["start"]][0]]["date_time"],
                 tuple(f"{speaker}: {text}" for _, speaker, text in msgs[n["start"]:n["end"] + 1]), n)
            for i, n in enumerate(notes)]


def _key(text: str) -> str:
    return " ".join(text.lower().split())


class MemoryDB:
    """The pages of one conversation, indexed for the retrieval tools."""

    def __init__(self, pages: list[Page]):
        self.pages = {p.id: p for p in pages}
        self.keys: dict[str, dict[str, list[str]]] = {"keyword": {}, "person": {}, "tag": {}}
        self.names: dict[str, dict[str, str]] = {kind: {} for kind in self.keys}  # normalized -> as first written
        self.events = [(e, p.id) for p in pages for e in p.note["events"]]
        self.facts = [(f, p.id) for p in pages for f in p.note["facts"]]
        for p in pages:
            keys = (("keyword", p.note["keywords"]), ("person", p.note["people"]), ("tag", [p.note["tag"]]))
            for kind, values in keys:
                for v in values:
                    ids = self.keys[kind].setdefault(_key(v), [])
                    if p.id not in ids:
                        ids.append(p.id)
                    self.names[kind].setdefault(_key(v), v)

    def match(self, value: str, kind: str) -> list[Page]:
        """Eq. 4: the pages whose `kind` keys (keyword | person | tag) hold `value`."""
        return [self.pages[i] for i in self.keys[kind].get(_key(value), [])]

    def top_k(self, query: str, kind: str, k: int) -> list[tuple[dict, Page]]:
        """Eq. 5: the k events or facts (`kind` event | fact) ranked best for `query`, each with its page."""
        records = self.events if kind == "event" else self.facts
        texts = [f"{r['event']} {r['time']}" if kind == "event" else r["fact"] for r, _ in records]
        scores = bm25_scores(query, texts)
        return [(records[i][0], self.pages[records[i][1]]) for i in top_k(scores, k) if scores[i] > 0]

    def profile(self, person: str, kind: str) -> list[tuple[dict, Page]]:
        """Eq. 6: the person's events (E_p) or facts (F_p), in conversation order, each with its page."""
        records = self.events if kind == "event" else self.facts
        return [(r, self.pages[pid]) for r, pid in records if _key(r["person"]) == _key(person)]

    def available(self, kind: str) -> list[str]:
        """The keys of `kind` (keyword | person | tag), as first written, sorted."""
        return sorted(self.names[kind].values(), key=str.lower)
