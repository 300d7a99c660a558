"""Experiences with exact feedback, generated offline: context strategies ("tools") on the long-context families.

A tool here is a context strategy with a fixed reader: the strategy decides which part of a task's long context
is shown, the reader answers from what is shown with the family's own parser (the last `key: value` line, the
ancestor chain, the i-th exchange, the last move), and the family's scorer scores the answer exactly. No model
runs, so a set of hundreds of experiences takes seconds; what a tool is good or bad at still varies with the
task, as in the paper's neural tools:
- `truncate-B`: the last B tokens of the context (a line boundary) — good where the answer lies late (pi_llm's
  last updates), bad where it may lie anywhere (needles, moves, the i-th of several requests);
- `bm25-B`: the context in ~200-token chunks of whole lines, the chunks BM25 ranks best for the question kept up
  to B tokens in document order — good where the question names the fact (a person's moves), weak on multi-hop
  chains (only the first link is named) and on an i-th occurrence (an earlier one may be dropped).
Token counts are chars/4 estimates, as in `sculptor_rl.longcontext`. `CAPABILITY` ranks the tools as the paper ranks
its pairs (§4: the more capable tool is A); `shown_with` is what an agent that chose a tool reads (the same view).

An experience (one JSON object, the unit ToolMem learns from and is tested on):

    {"id": "<task id>/<tool>", "task_id", "family", "bucket", "tool",
     "prompt": <the task as a predictor sees it: intro, the context's size, the question>,
     "solution": <the tool's answer>, "raw": <the family's exact score in [0, 1]>, "score": <1..5>,
     "rubric": RUBRIC, "feedback": <what the tool showed, what it answered, what was right>}

Splits: the train and test sets are drawn from disjoint generator seeds (`split`), so no task is in both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...memory.retrieval import bm25_scores
from ...longcontext import babilong, mrcr, needlebench, pi_llm
from ...longcontext.common import render_value, task_rng
from ...records import context_spans

__all__ = ["CAPABILITY", "FAMILY_SIZES", "RUBRIC", "SPLITS", "TOOLS", "Tool", "experience", "generate_experiences",
           "generate_tasks", "likert", "read_answer", "shown_with"]

CHUNK_TOKENS = 200  # bm25 chunks (the bm25 baseline's default)
SPLITS = {"train": 0, "test": 1_000_000}  # generator seed offsets: disjoint task sets
RUBRIC = ("The tool's answer is scored exactly by the task's scorer (a fraction in [0, 1]) and mapped to 1-5:\n"
          "1: wrong or no answer (below 0.125)\n2: mostly wrong (0.125-0.375)\n3: about half right (0.375-0.625)\n"
          "4: mostly right (0.625-0.875)\n5: exactly right (0.875 and above)")
# the sizes tasks are drawn from (generator parameters of each family)
FAMILY_SIZES = {
    pi_llm.NAME: [{"keys": k, "updates": u} for k in (2, 4, 8) for u in (16, 48)],
    needlebench.NAME: [{"needles": n, "context_tokens": c} for n in (2, 4) for c in (500, 1000, 3000)],
    mrcr.NAME: [{"needles": n, "turns": 12, "context_tokens": c} for n in (1, 3) for c in (800, 2400)],
    babilong.NAME: [{"facts": f, "context_tokens": c} for f in (2, 8) for c in (500, 1000, 3000)],
}
FAMILY_MODULES = {m.NAME: m for m in (pi_llm, needlebench, mrcr, babilong)}


def likert(raw: float) -> int:
    """The 1-5 score of an exact score in [0, 1] (see RUBRIC)."""
    return 1 + min(4, max(0, int(raw * 4 + 0.5)))


def _suffix(context: str, budget: int) -> str:
    """The longest suffix of `context` of at most `budget` tokens that starts at a line."""
    if len(context) <= 4 * budget:
        return context
    cut = context.find("\n", len(context) - 4 * budget - 1)
    return context[cut + 1:] if cut >= 0 else ""


def _chunks(context: str, size: int) -> list[str]:
    """Consecutive whole lines packed into chunks of up to about `size` tokens (a longer line is one chunk)."""
    out: list[str] = []
    for line in context.splitlines(keepends=True):
        if out and len(out[-1]) + len(line) <= 4 * size:
            out[-1] += line
        else:
            out.append(line)
    return out


def _bm25(context: str, question: str, budget: int) -> str:
    pieces = _chunks(context, CHUNK_TOKENS)
    scores = bm25_scores(question, pieces)
    kept, used = [], 0
    for i in sorted(range(len(pieces)), key=lambda i: -scores[i]):  # stable: ties keep document order
        if used + len(pieces[i]) <= 4 * budget:
            kept.append(i)
            used += len(pieces[i])
    return "".join(pieces[i] for i in sorted(kept))


@dataclass(frozen=True)
class Tool:
    name: str
    kind: str  # truncate | bm25
    budget: int  # tokens of context shown

    @property
    def description(self) -> str:
        """What a GENERIC agent knows of the tool: its name and how it works, nothing of how well."""
        if self.kind == "truncate":
            return (f"A context strategy: the solver reads only the last {self.budget} tokens of the task's "
                    "context, then answers the question.")
        return (f"A context strategy: the solver reads only the {self.budget} tokens of the task's context that "
                f"BM25 ranks most relevant to the question ({CHUNK_TOKENS}-token chunks), then answers.")

    def view(self, context: str, question: str) -> str:
        return _suffix(context, self.budget) if self.kind == "truncate" else _bm25(context, question, self.budget)

    def shown(self) -> str:
        if self.kind == "truncate":
            return f"its last {self.budget} tokens"
        return f"the {CHUNK_TOKENS}-token chunks BM25 ranked best for the question, up to {self.budget} tokens"


TOOLS = {t.name: t for t in (Tool(f"{kind}-{budget}", kind, budget)
                             for kind in ("truncate", "bm25") for budget in (256, 1024))}
# The tools, most capable first: the paper's pairs put the more capable tool on the left (A), so that F1< measures
# finding where it does worse. Mean exact score on 400 train-split tasks (seed 0): bm25-1024 0.84, truncate-1024
# 0.76, truncate-256 0.38, bm25-256 0.37 (the last two nearly tied).
CAPABILITY = ("bm25-1024", "truncate-1024", "truncate-256", "bm25-256")


# ---- readers: the answer a solver gives from the visible text (the family's own parsing) ----

def read_answer(record: dict, visible: str) -> str:
    """A tool's answer: what its fixed reader finds in `visible` for the record's question."""
    meta, family = record["meta"], record["task"]
    if family == pi_llm.NAME:
        found = {key: re.findall(rf"^{re.escape(key)}: (\S+)$", visible, re.M) for key in meta["asked_keys"]}
        return pi_llm.render_answer({key: values[-1] for key, values in found.items() if values})
    if family == needlebench.NAME:
        return render_value(needlebench.eldest_ancestor(needlebench.parse_relations(visible), meta["person"]))
    if family == mrcr.NAME:
        replies = re.findall(rf"^User: {re.escape(meta['request'])}\nAssistant: (.*)$", visible, re.M)
        return render_value(replies[meta["occurrence"] - 1] if len(replies) >= meta["occurrence"] else "unknown")
    return render_value(babilong.last_place(visible, meta["person"]) or "unknown")


def _prompt(record: dict) -> str:
    """The task as a predictor sees it: the family, its size, the intro and the question; not the context."""
    meta = record["meta"]
    intro = record["messages"][0]["content"].split("\n\n", 1)[0]
    return (f"[{record['task']} task, size {meta['bucket']}, about {meta['approx_tokens']} tokens of context]\n"
            f"{intro}\n[... the long context ...]\n{meta['question']}")


def _span(record: dict) -> tuple[int, int, int]:
    (span,) = context_spans(record)  # a generated record's context is one span of one message
    return span


def shown_with(record: dict, tool: Tool) -> str:
    """The record's message with its long context as `tool` shows it (the rest, the question with it, kept)."""
    i, start, end = _span(record)
    content = record["messages"][i]["content"]
    return content[:start] + tool.view(content[start:end], record["meta"]["question"]) + content[end:]


def experience(record: dict, tool: Tool) -> dict:
    """`tool` on one generated long-context task record, scored exactly by the family's scorer."""
    i, start, end = _span(record)
    context = record["messages"][i]["content"][start:end]
    visible = tool.view(context, record["meta"]["question"])
    solution = read_answer(record, visible)
    raw = FAMILY_MODULES[record["task"]].score(record, solution)
    gold = FAMILY_MODULES[record["task"]].render_answer(record["answer"])
    total = max(1, -(-len(context) // 4))
    feedback = (f"{tool.name} showed {100 * len(visible) // max(1, len(context))}% of the {total}-token context "
                f"({tool.shown()}). Answered {solution!r}; the right answer is {gold!r}. Exact score {raw:.2f}, "
                f"so {likert(raw)}/5.")
    return {"id": f"{record['id']}/{tool.name}", "task_id": record["id"], "family": record["task"],
            "bucket": record["meta"]["bucket"], "tool": tool.name, "prompt": _prompt(record), "solution": solution,
            "raw": raw, "score": likert(raw), "rubric": RUBRIC, "feedback": feedback}


def generate_tasks(num_tasks: int, seed: int = 0, split: str = "train") -> list[dict]:
    """`num_tasks` long-context task records (families in turn, sizes drawn from FAMILY_SIZES), deterministic by
    (seed, split); train and test draw from disjoint generator seeds."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    families = list(FAMILY_SIZES)
    out = []
    for index in range(num_tasks):
        family = families[index % len(families)]
        params = task_rng("toolmem", seed, index).choice(FAMILY_SIZES[family])
        out += FAMILY_MODULES[family].generate(1, SPLITS[split] + seed * 10_000 + index, **params)
    return out


def generate_experiences(num_tasks: int, seed: int = 0, split: str = "train",
                         tools: list[str] | None = None) -> list[dict]:
    """Every tool's experience on the tasks `generate_tasks` draws, task by task."""
    unknown = [name for name in tools or [] if name not in TOOLS]
    if unknown:
        raise ValueError(f"unknown tool {unknown[0]!r} (known: {', '.join(TOOLS)})")
    chosen = [TOOLS[name] for name in tools or TOOLS]
    return [experience(record, tool) for record in generate_tasks(num_tasks, seed, split) for tool in chosen]
