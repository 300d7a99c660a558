"""What the other context-management paradigms share on the long-context families: the record's long context as a
document read in chunks, one token budget, and the notes their scripted teachers keep.

Context-Folding, MemAct, ReSum and MEM1 were built for agents that search and open pages; MemAgent reads a document
chunk by chunk. On a long-context record (`longcontext`: the context lies where `meta.context` says) each of them
gets the same document: the context cut into chunks of whole paragraphs, lines, sentences or words (in that order of
preference) of at most `chunk_tokens` tokens, the chunks joined giving back the context exactly. `ReadingEnv` shows
the record with its context replaced by a note saying how many chunks there are, and answers `read_chunk(index)`;
each paradigm's package says how big a chunk is for its `context_budget` and what it does to the conversation.
`original()` is the record with its whole context, so a trajectory's context reduction is measured against it.

Tokens are the policy's where the run gives its tokenizer, else 4-character estimates (`longcontext.common`).

The teachers' notes (`update_notes`, `answer_from_notes`): what a reader keeps of the text it has read for the
question asked (`task["meta"]`, never the answer), one line or statement per fact, and the answer read back from the
notes alone with the family's own parser, which proves the notes kept what the question needs.
- pi_llm: the last `key: value` update of each asked key;
- needlebench: every kinship statement (the filler shares no word with them);
- mrcr: the exchanges of the asked request, up to its asked occurrence;
- babilong: the asked person's last move;
- gsm_infinite: the statements defining the quantities the asked one depends on. Which those are is read from the
  whole record's statements (a reader going once through the text cannot know yet whether a quantity defined early
  is used later): the one place a teacher sees more than it has read; the answer is still evaluated from its notes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..longcontext import babilong, gsm_infinite, mrcr, needlebench, pi_llm, render_answer
from ..longcontext.common import approx_tokens
from ..records import context_spans
from ..toolcalls import ToolResult, json_object
from .base import Env

__all__ = ["BudgetParams", "Document", "PARADIGM_MODES", "READ_CHUNK", "ReadingEnv", "ShownEnv", "answer_from_notes",
           "chunk_text", "count_tokens", "document", "message_tokens", "paradigm_modes", "read_index", "update_notes"]

_SEPARATORS = ("\n\n", "\n", ". ", " ")  # where a chunk may end, best first
# `eval --environment <paradigm>`: every paradigm, ACM and the no-tool baselines on the same tasks (the registry's
# names), each reading the eval's one `context_budget` where it takes one; the report pairs them task by task
PARADIGM_MODES = ("fold", "memact", "resum", "mem1", "memagent", "acm", "full", "truncate", "bm25")


def paradigm_modes() -> dict[str, tuple[str, dict]]:
    return {mode: (mode, {}) for mode in PARADIGM_MODES}

READ_CHUNK = {"type": "function", "function": {
    "name": "read_chunk",
    "description": "Read one chunk of the text the question is about (the chunks are numbered from 1, in order).",
    "parameters": {"type": "object", "properties": {
        "index": {"type": "integer", "description": "The chunk's number, from 1."}},
        "required": ["index"]}}}


@dataclass
class BudgetParams:
    """A paradigm's parameters: the context budget its own rules read (tokens)."""

    context_budget: int = 1024

    def __post_init__(self):
        if not isinstance(self.context_budget, int) or isinstance(self.context_budget, bool) \
                or self.context_budget < 128:
            raise ValueError(f"context_budget must be an integer >= 128 (tokens), got {self.context_budget!r}")


def count_tokens(text: str, tokenizer=None) -> int:
    """`text`'s tokens: the policy's tokenizer where given, else the 4-characters estimate."""
    if tokenizer is None:
        return approx_tokens(text)
    return len(tokenizer.encode(text, add_special_tokens=False))


def message_tokens(messages: list[dict], tokenizer=None) -> int:
    """The tokens of what messages say (contents and calls), without the chat template's own tokens."""
    total = 0
    for m in messages:
        total += count_tokens(m.get("content") or "", tokenizer)
        for call in m.get("tool_calls") or []:
            args = call["function"]["arguments"]
            total += count_tokens(call["function"]["name"] + (args if isinstance(args, str) else json.dumps(args)),
                                  tokenizer)
    return total


def chunk_text(text: str, chunk_tokens: int, tokenizer=None) -> list[str]:
    """`text` cut into chunks of at most `chunk_tokens` tokens, each ending at a paragraph, line, sentence or word
    boundary where one fits (a word longer than a chunk is cut by characters); "".join(chunks) == text."""
    def pieces(part: str, level: int) -> list[str]:
        if count_tokens(part, tokenizer) <= chunk_tokens:
            return [part]
        if level == len(_SEPARATORS):  # one word longer than a chunk
            size = max(1, len(part) * chunk_tokens // count_tokens(part, tokenizer))
            return [part[i:i + size] for i in range(0, len(part), size)]
        sep = _SEPARATORS[level]
        units = [u + sep for u in part.split(sep)]
        units[-1] = units[-1][: -len(sep)]
        return [p for u in units if u for p in pieces(u, level + 1)]

    chunks: list[str] = []
    for piece in pieces(text, 0):
        if chunks and count_tokens(chunks[-1] + piece, tokenizer) <= chunk_tokens:
            chunks[-1] += piece
        else:
            chunks.append(piece)
    return chunks or [""]


@dataclass
class Document:
    """A record split around its long context: the text before it, the chunks, the text after it (the question)."""

    message: int  # the index of the record's message holding the context
    before: str
    chunks: list[str]
    after: str


def document(task: dict, chunk_tokens: int, tokenizer=None) -> Document:
    """The record's long context (one span of one message, `meta.context`) as chunks."""
    spans = context_spans(task)
    if len(spans) != 1:
        raise ValueError(f"task {task.get('id')!r}: the reading environments read a long context of one span; its "
                         f"meta.context has {len(spans)} spans (a chat such as MRCR's official format)")
    i, a, b = spans[0]
    text = task["messages"][i]["content"]
    return Document(i, text[:a].rstrip(), chunk_text(text[a:b], chunk_tokens, tokenizer), text[b:].lstrip())


def read_index(arguments, count: int) -> int:
    """`read_chunk`'s index (ValueError saying what is wrong)."""
    args = json_object(arguments)
    index = args.get("index")
    if set(args) != {"index"} or not isinstance(index, int) or isinstance(index, bool):
        raise ValueError("read_chunk takes one argument, index (an integer)")
    if not 1 <= index <= count:
        raise ValueError(f"index {index} is out of range: the chunks are 1 to {count}")
    return index


class ShownEnv(Env):
    """An environment whose model sees `shown`, its own view of the conversation, while `messages` keeps everything
    (`original()`); what the loop appends goes to both."""

    shown: list[dict]

    def render(self) -> list[dict]:
        return [dict(m) for m in self.shown]

    def original(self) -> list[dict]:
        return [dict(m) for m in self.messages]

    def append(self, message: dict) -> None:
        self.messages.append(dict(message))
        self.shown.append(dict(message))


class ReadingEnv(ShownEnv):
    """A long-context record whose context is read through `read_chunk` (see the module docstring). A subclass sets
    `chunk_tokens()` from its budget and what it does to the conversation; `shown` is what the model sees."""

    Params = BudgetParams
    tools = [READ_CHUNK]
    task_families = (pi_llm.NAME, needlebench.NAME, mrcr.NAME, babilong.NAME, gsm_infinite.NAME)

    @classmethod
    def eval_modes(cls) -> dict[str, tuple[str, dict]]:
        return paradigm_modes()

    def __init__(self, task: dict, params=None, **kwargs):
        super().__init__(task, params, **kwargs)
        self.doc = document(task, self.chunk_tokens(), self.tokenizer)
        shift = len(self.messages) - len(task["messages"])  # the system prompt put before the record's messages
        self.shown = [dict(m) for m in self.messages]
        self.shown[self.doc.message + shift]["content"] = self.pointer()
        self.head = len(self.shown)  # the system prompt and the record's messages
        self.reads = 0

    def chunk_tokens(self) -> int:
        raise NotImplementedError

    def pointer(self) -> str:
        """The record's message with its context replaced by where to read it."""
        n = len(self.doc.chunks)
        note = (f"[The text is not shown here. It is split into {n} chunk{'s' if n > 1 else ''} of at most "
                f"{self.chunk_tokens()} tokens; read chunk i with read_chunk(index=i), from 1 to {n}.]")
        return "\n\n".join(p for p in (self.doc.before, note, self.doc.after) if p)

    def read(self, arguments) -> ToolResult:
        """`read_chunk`: the chunk's text under a header naming it."""
        try:
            index = read_index(arguments, len(self.doc.chunks))
        except ValueError as e:
            return ToolResult(f"Error: {e}.", ok=False, modified=False)
        self.reads += 1
        return ToolResult(f"Chunk {index} of {len(self.doc.chunks)}:\n{self.doc.chunks[index - 1]}", ok=True,
                          modified=False)

    def execute(self, name, arguments) -> ToolResult:
        if name == "read_chunk":
            return self.read(arguments)
        known = ", ".join(t["function"]["name"] for t in self.tools)
        return ToolResult(f"Error: unknown tool {name!r}. The tools are: {known}.", ok=False, modified=False)

    def info(self) -> dict:
        return {"chunks": len(self.doc.chunks), "chunk_tokens": self.chunk_tokens(), "reads": self.reads,
                "context_budget": self.params.context_budget}


# ---- the teachers' notes ----

def _pi_line(key: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(key)}: (\S[^\n]*)$", re.M)


def _mrcr_exchange(request: str) -> re.Pattern:
    return re.compile(rf"^User: {re.escape(request)}\nAssistant: (.*)$", re.M)


def update_notes(task: dict, notes: list[str], text: str) -> list[str]:
    """The notes after reading `text` (the next piece of the context, in order), for the question `task` asks."""
    meta, family = task["meta"], task["task"]
    if family == pi_llm.NAME:
        last = {k: v for k, v in (line.split(": ", 1) for line in notes)}
        for key in meta["asked_keys"]:
            found = _pi_line(key).findall(text)
            if found:
                last[key] = found[-1]
        return [f"{k}: {last[k]}" for k in meta["asked_keys"] if k in last]
    if family == needlebench.NAME:
        found = sorted((m.start(), m.group(0)) for p in needlebench.PATTERNS for m in p.finditer(text))
        return notes + [s for _, s in found if s not in notes]
    if family == mrcr.NAME:
        found = [m.group(0) for m in _mrcr_exchange(meta["request"]).finditer(text)]
        return (notes + found)[: meta["occurrence"]]
    if family == babilong.NAME:
        found = [m.group(0) for m in babilong.FACT.finditer(text) if m["person"] == meta["person"]]
        return found[-1:] or notes
    if family == gsm_infinite.NAME:
        whole = "\n".join(task["messages"][i]["content"][a:b] for i, a, b in context_spans(task))
        needs = set(gsm_infinite.needed(gsm_infinite.parse_statements(whole), meta["quantity"]))
        return notes + [m.group(0) for m in gsm_infinite.STATEMENT.finditer(text) if m["q"] in needs]
    raise ValueError(f"no notes for task family {family!r}")


def answer_from_notes(task: dict, notes: list[str]) -> str:
    """The final answer read from the notes alone, in the record's answer form."""
    meta, family, text = task["meta"], task["task"], "\n".join(notes)
    if family == pi_llm.NAME:
        answer = {k: found[-1] for k in meta["asked_keys"] if (found := _pi_line(k).findall(text))}
    elif family == needlebench.NAME:
        answer = needlebench.eldest_ancestor(needlebench.parse_relations(text), meta["person"])
    elif family == mrcr.NAME:
        found = _mrcr_exchange(meta["request"]).findall(text)
        answer = found[meta["occurrence"] - 1] if len(found) >= meta["occurrence"] else "unknown"
    elif family == babilong.NAME:
        answer = babilong.last_place(text, meta["person"]) or "unknown"
    elif family == gsm_infinite.NAME:
        value = gsm_infinite.evaluate(gsm_infinite.parse_statements(text), meta["quantity"])
        answer = "unknown" if value is None else value
    else:
        raise ValueError(f"no notes for task family {family!r}")
    return render_answer({**task, "answer": answer})
