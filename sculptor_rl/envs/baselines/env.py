"""The no-tool baselines, as environments: how much of a task's context reaches the model without ACM.

- `full`: the whole context;
- `truncate`: the context cut to its last `context_budget` tokens (the question is kept);
- `bm25`: the paper's RAG baseline (Appendix D.4): the context in chunks of about `chunk_tokens` tokens, ranked
  by BM25 against the question, the best chunks up to `context_budget` tokens kept in document order.

None holds a tool, so the first completion is the answer (eval also allows no tool call). Their system prompt
announces no tools. `truncate` and `bm25` (which need the policy's tokenizer) shrink only the record's long
context: the spans its `meta.context` names (`tasks.common.context_spans`; generated and imported records have
them, a record without them is an error naming it). The rest of each message, the question with it, is kept.
A context in several spans (MRCR's chat: one per earlier turn) is shrunk as one text: `truncate` keeps its last
`context_budget` tokens, `bm25` ranks the chunks of all spans together. `original()` is the whole context, so a
trajectory's context reduction is measured against it.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

from ...memory.retrieval import bm25_scores
from ...records import context_spans
from ..base import Env
from ..reading import ShownEnv

__all__ = ["BASELINE_SYSTEM_PROMPT", "BaselineParams", "Bm25Env", "FullEnv", "TruncateEnv", "bm25_context", "chunks",
           "question_text", "truncate_context"]

BASELINE_SYSTEM_PROMPT = "Read the text the user gives you and answer the question at its end."
_SPACE = re.compile(r"\s")


@dataclass
class BaselineParams:
    context_budget: int = 1500  # tokens of context truncate and bm25 keep (paper D.4: ~1500)
    chunk_tokens: int = 200  # bm25 chunk size (paper D.4: 200)

    def __post_init__(self):
        for name in ("context_budget", "chunk_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


class FullEnv(Env):
    name = "full"
    system_prompt = BASELINE_SYSTEM_PROMPT


class _ShrunkEnv(ShownEnv, FullEnv):
    """The record's context spans shrunk by `shrink(pieces, question)`; `original()` keeps them whole."""

    Params = BaselineParams

    def __init__(self, task: dict, params: BaselineParams | None = None, **kwargs):
        super().__init__(task, params, **kwargs)
        if self.tokenizer is None:
            raise ValueError(f"the {self.name} environment needs the policy's tokenizer")
        spans, own = context_spans(task), task["messages"]
        shift = len(self.messages) - len(own)  # the system prompt put before the record's messages
        self.shown = [dict(m) for m in self.messages]
        kept = self.shrink([own[i]["content"][a:b] for i, a, b in spans], question_text(task))
        for (i, a, b), piece in sorted(zip(spans, kept), reverse=True):  # from the end: offsets stay valid
            head = len(self.messages[i + shift]["content"]) - len(own[i]["content"])  # the env's prompt before
            text = self.shown[i + shift]["content"]  # a record's own system text, when the span lies there
            self.shown[i + shift]["content"] = text[:head + a] + piece + text[head + b:]

    def shrink(self, pieces: list[str], question: str) -> list[str]:
        """What is kept of each context piece, in order."""
        raise NotImplementedError


class TruncateEnv(_ShrunkEnv):
    name = "truncate"

    def shrink(self, pieces: list[str], question: str) -> list[str]:
        """The last `context_budget` tokens of the pieces together: whole pieces from the last while they fit,
        the end of the one that does not, nothing of those before it."""
        budget, kept = self.params.context_budget, []
        for piece in reversed(pieces):
            cut = truncate_context(piece, budget, self.tokenizer) if budget > 0 else ""
            kept.append(cut)
            budget = budget - len(self.tokenizer.encode(piece, add_special_tokens=False)) if cut == piece else 0
        return kept[::-1]


class Bm25Env(_ShrunkEnv):
    name = "bm25"

    def shrink(self, pieces: list[str], question: str) -> list[str]:
        return bm25_context(pieces, question, self.params.context_budget, self.params.chunk_tokens, self.tokenizer)


def question_text(task: dict) -> str:
    """What the record asks (the bm25 query): `meta.question`, else its last user message outside the context."""
    question = (task.get("meta") or {}).get("question")
    if isinstance(question, str) and question.strip():
        return question
    i = max(j for j, m in enumerate(task["messages"]) if m["role"] == "user")
    text, pos, parts = task["messages"][i]["content"], 0, []
    for _, a, b in sorted(span for span in context_spans(task) if span[0] == i):
        parts.append(text[pos:a])
        pos = b
    return " ".join([*parts, text[pos:]]).strip()


def _token_starts(text: str, tokenizer) -> list[int]:
    """Character offset where each token of `text` starts (a fast tokenizer's offset mapping)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [start for start, _ in enc["offset_mapping"]]


def _word_start(text: str, pos: int) -> int:
    """`pos` if a word starts there, else the start of the next word (`pos` when there is none)."""
    if pos == 0 or text[pos - 1].isspace():
        return pos
    match = _SPACE.search(text, pos)
    return match.end() if match else pos


def truncate_context(context: str, budget: int, tokenizer) -> str:
    """The longest suffix of `context` of at most `budget` tokens (encoded alone) that starts at a word."""
    starts = _token_starts(context, tokenizer)
    if len(starts) <= budget:
        return context
    cut = _word_start(context, starts[len(starts) - budget])
    # encoded alone, the suffix's first word may take a token more than inside the context
    while len(tokenizer.encode(context[cut:], add_special_tokens=False)) > budget:
        cut = _word_start(context, cut + 1)
    return context[cut:]


def chunks(text: str, size: int, tokenizer) -> list[str]:
    """`text` cut into consecutive chunks of up to about `size` tokens, each ending at a line break when one
    lies in its second half (else at a space there, else mid-word). The chunks concatenate back to `text`."""
    starts = _token_starts(text, tokenizer)
    out, begin = [], 0
    while begin < len(text):
        i = bisect_left(starts, begin) + size
        if i >= len(starts):
            out.append(text[begin:])
            break
        end = starts[i]
        half = starts[i - size // 2]
        for sep in ("\n", " "):
            cut = text.rfind(sep, half, end)
            if cut >= 0:
                end = cut + 1
                break
        out.append(text[begin:end])
        begin = end
    return out


def bm25_context(pieces: list[str], question: str, budget: int, chunk_tokens: int, tokenizer) -> list[str]:
    """What is kept of each piece: the chunks (of all pieces together) BM25 ranks best for `question`, up to
    `budget` tokens, in document order."""
    chunked = [(k, c) for k, piece in enumerate(pieces) for c in chunks(piece, chunk_tokens, tokenizer)]
    if not chunked:
        return list(pieces)
    texts = [c for _, c in chunked]
    scores = bm25_scores(question, texts)
    ranked = sorted(range(len(texts)), key=lambda i: -scores[i])  # stable: ties keep document order
    kept, used = [], 0
    for i in ranked:
        n = len(tokenizer.encode(texts[i], add_special_tokens=False))
        if used + n <= budget:
            kept.append(i)
            used += n
    out = [""] * len(pieces)
    for i in sorted(kept):
        out[chunked[i][0]] += texts[i]
    return out
