"""Evaluation modes: how a task's context reaches the model, and which environment the agent loop runs in.

- `acm`: the task as it is, in an ACM workspace (the six tools).
- `full`: the whole context, no tools.
- `truncate`: the context cut to its last `context_budget` tokens (the question is kept), no tools.
- `bm25`: the paper's RAG baseline (Appendix D.4): the context in chunks of about `chunk_tokens` tokens, ranked
  by BM25 against the question, the best chunks up to `context_budget` tokens kept in document order, no tools.

Every mode runs through the same agent loop; the baselines' environment exposes no tools and the loop allows
no tool call, so their first completion is the answer. A task's user message is `intro \\n\\n context \\n\\n
question` (sculptor_rl/tasks); users' own data must follow that layout for `truncate` and `bm25`.
"""

from __future__ import annotations

import re
from bisect import bisect_left

from ..acm import ToolResult
from ..envs import acm_env
from ..tasks.common import SYSTEM_PROMPT as ACM_SYSTEM_PROMPT

__all__ = ["MODES", "BASELINE_SYSTEM_PROMPT", "PlainContext", "bm25_context", "check_mode", "chunks", "make_env",
           "prepare", "split_user", "truncate_context"]

MODES = ("acm", "full", "truncate", "bm25")

# The generated tasks' system prompt announces the ACM tools; the baselines have none, so they get this one.
BASELINE_SYSTEM_PROMPT = "Read the text the user gives you and answer the question at its end."
_SPACE = re.compile(r"\s")


class PlainContext:
    """An environment without tools: the conversation shown as it is (the full, truncate and bm25 modes)."""

    tools: list[dict] = []

    def __init__(self, messages: list[dict]):
        self.messages = [dict(m) for m in messages]

    def render(self) -> list[dict]:
        return [dict(m) for m in self.messages]

    original = render

    def append(self, message: dict) -> None:
        self.messages.append(dict(message))

    def execute(self, name, arguments) -> ToolResult:
        return ToolResult(f"Error: no tools are available here (called {name!r}).", ok=False, modified=False)


def make_env(mode: str, seed: int):
    """The environment factory `run_rollouts` takes, for `mode`."""
    check_mode(mode)
    return acm_env(seed) if mode == "acm" else (lambda task, index: PlainContext(task["messages"]))


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")


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


def prepare(task: dict, mode: str, tokenizer, context_budget: int = 1500, chunk_tokens: int = 200) -> dict:
    """The task as `mode` shows it to the model. `acm` keeps it as it is; the baselines swap the generated
    tasks' ACM system prompt for a tool-free one and `truncate`/`bm25` shrink the last user message's context."""
    check_mode(mode)
    if mode == "acm":
        return task
    messages = [dict(m) for m in task["messages"]]
    for m in messages:
        if m["role"] == "system" and m["content"] == ACM_SYSTEM_PROMPT:
            m["content"] = BASELINE_SYSTEM_PROMPT
    if mode != "full":
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if not users:
            raise ValueError(f"task {task['id']}: no user message to take the context from")
        user = users[-1]
        intro, context, question = split_user(messages[user]["content"])
        if mode == "truncate":
            context = truncate_context(context, context_budget, tokenizer)
        else:
            context = bm25_context(context, question, context_budget, chunk_tokens, tokenizer)
        messages[user]["content"] = f"{intro}\n\n{context}\n\n{question}"
    return {**task, "messages": messages}
