"""The no-tool baselines, as environments: how much of a task's context reaches the model without ACM.

- `full`: the whole context;
- `truncate`: the context cut to its last `context_budget` tokens (the question is kept);
- `bm25`: the paper's RAG baseline (Appendix D.4): the context in chunks of about `chunk_tokens` tokens, ranked
  by BM25 against the question, the best chunks up to `context_budget` tokens kept in document order.

None holds a tool, so the first completion is the answer (eval also allows no tool call). Their system prompt
announces no tools. A task's last user message is `intro \\n\\n context \\n\\n question` (sculptor_rl/tasks);
users' own data must follow that layout for `truncate` and `bm25`, which need the policy's tokenizer.
`original()` is the whole context, so a trajectory's context reduction is measured against it.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

from .base import Env

__all__ = ["BASELINE_SYSTEM_PROMPT", "BaselineParams", "Bm25Env", "FullEnv", "TruncateEnv", "bm25_context", "chunks",
           "split_user", "truncate_context"]

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


class _ShrunkEnv(FullEnv):
    """The last user message's context shrunk by `shrink(context, question)`; `original()` keeps it whole."""

    Params = BaselineParams

    def __init__(self, task: dict, params: BaselineParams | None = None, **kwargs):
        super().__init__(task, params, **kwargs)
        if self.tokenizer is None:
            raise ValueError(f"the {self.name} environment needs the policy's tokenizer")
        users = [i for i, m in enumerate(self.messages) if m["role"] == "user"]
        if not users:
            raise ValueError(f"task {task['id']}: no user message to take the context from")
        self.shown = [dict(m) for m in self.messages]
        intro, context, question = split_user(self.shown[users[-1]]["content"])
        self.shown[users[-1]]["content"] = f"{intro}\n\n{self.shrink(context, question)}\n\n{question}"

    def shrink(self, context: str, question: str) -> str:
        raise NotImplementedError

    def render(self) -> list[dict]:
        return [dict(m) for m in self.shown]

    def original(self) -> list[dict]:
        return [dict(m) for m in self.messages]

    def append(self, message: dict) -> None:
        self.shown.append(dict(message))
        self.messages.append(dict(message))


class TruncateEnv(_ShrunkEnv):
    name = "truncate"

    def shrink(self, context: str, question: str) -> str:
        return truncate_context(context, self.params.context_budget, self.tokenizer)


class Bm25Env(_ShrunkEnv):
    name = "bm25"

    def shrink(self, context: str, question: str) -> str:
        return bm25_context(context, question, self.params.context_budget, self.params.chunk_tokens, self.tokenizer)


def split_user(text: str) -> tuple[str, str, str]:
    """(intro, context, question) of a task's user message laid out as `intro \\n\\n context \\n\\n question`."""
    first, last = text.find("\n\n"), text.rfind("\n\n")
    if first < 0 or first == last:
        raise ValueError("the truncate and bm25 modes need the user message laid out as "
                         "`intro \\n\\n context \\n\\n question` (two blank lines at least)")
    return text[:first], text[first + 2 : last], text[last + 2 :]


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


def bm25_context(context: str, question: str, budget: int, chunk_tokens: int, tokenizer) -> str:
    """The chunks of `context` BM25 ranks best for `question`, up to `budget` tokens, in document order."""
    import bm25s

    pieces = chunks(context, chunk_tokens, tokenizer)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(pieces, stopwords="en", show_progress=False), show_progress=False)
    query = bm25s.tokenize(question, stopwords="en", return_ids=False, show_progress=False)[0]
    scores = retriever.get_scores(query) if query else [0.0] * len(pieces)
    ranked = sorted(range(len(pieces)), key=lambda i: -scores[i])  # stable: ties keep document order
    kept, used = [], 0
    for i in ranked:
        n = len(tokenizer.encode(pieces[i], add_special_tokens=False))
        if used + n <= budget:
            kept.append(i)
            used += n
    return "".join(pieces[i] for i in sorted(kept))
