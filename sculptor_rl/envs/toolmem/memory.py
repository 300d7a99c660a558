"""The ToolMem memory (paper §2.1-2.3): per tool, entries in four proficiency categories, refined by an inducer.

An entry is {"tool", "category", "text"}: category proficient (+2), good (+1), bad (-1) or weak (-2), the text
one sentence that starts with its category phrase ("Good at ...", "Weak at ..."). It lives in a
`sculptor_rl.memory.MemoryStore` (JSONL on disk).

Update with one experience e of tool t (§2.2, `induce`): the top-`k` (6) entries of each of t's categories, by
BM25 against e's task prompt and feedback, are M_context; the induction step I(M_context, e) gives M_updated; then
M <- (M \\ M_context) ∪ M_updated (`ToolMem.apply`). Two induction steps (`INDUCTIONS`), one update path:
- `model`, the paper's: an LLM (the policy's engine or another endpoint, given by the caller as
  `generate(prompts, attempt) -> texts`) answers the refinement prompt (§B.2, `induction_prompt`), parsed into
  entries (`parse_induction`). An answer with no sentence that starts with a category phrase is malformed: it is
  asked again (`retries` times), then reported and the memory left as it was (`model_induction`);
- `rules`, not the paper's: a deterministic substitute for when no model can follow the refinement prompt (the
  embedded 135M model cannot: 31 of 32 answers rejected). It needs no model and uses only the experience's exact
  1-5 score and the task features its prompt states (`features`: the family, the family and size, the band of the
  context's length). Per (tool, feature) one entry keeps the running count and sum of the scores (`n`, `sum`,
  saved with the entry) and says the mean in the paper's form, in the category the mean falls in (`category_of`):
  "Good at pi_llm tasks (size 4/48): mean score 4.2/5 over 5 experiences." (`rules_induction`). The entry of a
  feature is looked up by its key, not retrieved, so that the count stays exact; an updated entry that names its
  feature replaces that feature's entry wherever it is (`apply`), so a feature has one entry, in one category.

At test time (§2.3) the top-`k` (12) entries of each category, by BM25 against the task, are shown (`recall`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...memory import MemoryStore, bm25_scores, top_k

__all__ = ["CATEGORIES", "INDUCTIONS", "INDUCTION_PROMPT", "InductionReport", "TASK_LENGTH", "ToolMem",
           "category_of", "check_entry", "features", "in_band", "induce", "mirror", "model_induction",
           "parse_induction", "render_memory", "rules_induction"]

CATEGORIES = {"proficient": 2, "good": 1, "bad": -1, "weak": -2}
# the phrases the refinement prompt asks for; "poor at" is the prompt's word for the "weak at" category
PHRASES = {"proficient at": "proficient", "good at": "good", "bad at": "bad", "weak at": "weak", "poor at": "weak"}
UPDATE_K, TEST_K = 6, 12  # entries per category: retrieved for an update, shown at test time (paper §3.1)
MAX_TEXT = 300  # characters: a longer "sentence" is a run-on, not an entry
MAX_ENTRIES = 4 * UPDATE_K + 8  # an answer may keep the 4 x 6 retrieved entries and add a few
INDUCTIONS = ("model", "rules")  # the paper's LLM induction; the deterministic offline substitute

# paper §B.2, "Prompt for Memory Refinement" (text generation tools), verbatim but for the fields' names
INDUCTION_PROMPT = """You are an assistant responsible for maintaining an incremental memory of the tool's capabilities, limitations, and use cases.

You will receive a current memory and new feedback. Your job is to update the memory by integrating the new feedback without losing previously stored information.

Rules:
1. Start with the current memory.
2. Consider the new prompt and feedback, but do not simply repeat the feedback, think deep and get general insights.
3. Incrementally refine and update the memory to reflect any new insights.
4. Do not remove previously known capabilities unless the new feedback explicitly contradicts them.
5. If no new insights are provided, leave the memory unchanged.

Instructions:
Follow this procedure strictly:
- Review the current memory for model {tool}:
"{memory}"
- Input task prompt to the tool was:
"{prompt}"
- Tool's answer was:
"{response}"
- Score rubric was:
"{rubric}"
- The score for tool's response was:
"{score}"
- Feedback for this answer received:
"{feedback}"

Integrate the key insights of the tool's limitations and capabilities from the feedback into the existing memory. Use complete sentences starting with phrases like good at, bad at, proficient at, or poor at to describe your findings.
- If the feedback suggests new limitations, capabilities, or clarifications, add them.
- If the feedback suggests that something previously stated is incorrect, correct it.
- If the feedback suggests the tool struggles with a certain aspect (like counting multiple objects), note it.
- If no contradiction or new insight is provided, keep the memory as is.
- Think deeply and determine what the feedback actually means for the model's capability, rather than staying on the surface of a specific example.

In your final answer, output ONLY the updated overall memory of the tool. Do not include extra explanations."""


def check_entry(entry: dict) -> None:
    """A ToolMem entry or a ValueError/KeyError saying what is wrong (the store's `check`)."""
    if entry["category"] not in CATEGORIES:
        raise ValueError(f"unknown category {entry['category']!r} (known: {', '.join(CATEGORIES)})")
    for key in ("tool", "text"):
        if not isinstance(entry[key], str) or not entry[key].strip():
            raise ValueError(f"{key} must be a non-empty string")
    if "feature" in entry:  # a rules entry: its statistics must be usable for the next update
        if not isinstance(entry["n"], int) or isinstance(entry["n"], bool) or entry["n"] < 1:
            raise ValueError(f"n must be an integer >= 1, got {entry['n']!r}")
        if not isinstance(entry["sum"], (int, float)) or not 1 <= entry["sum"] / entry["n"] <= 5:
            raise ValueError(f"sum must be a number whose mean over n lies in 1..5, got {entry['sum']!r}")


_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_BULLET = re.compile(r"^\s*(?:[-*•]+|\d+[.)])\s*")
_PHRASE = re.compile(r"\b(not\s+)?(" + "|".join(PHRASES) + r")\b", re.I)
# an entry names what the tool is good or bad at: at least one word after the phrase that is not one of these
_FUNCTION_WORDS = {"a", "an", "and", "or", "but", "the", "of", "in", "on", "at", "to", "for", "with", "it", "is",
                   "this", "that", "these", "those", "its"}


def parse_induction(text: str, tool: str) -> list[dict]:
    """The entries of an induction answer: each sentence with a category phrase ("X is good at Y." -> good,
    "Good at Y."), from the phrase on; negated ("not good at") and run-on sentences, and ones naming nothing after
    the phrase, are left out, repeats kept once. ValueError when no entry is left or there are more than
    MAX_ENTRIES (the answer is malformed)."""
    out, seen = [], set()
    for sentence in _SENTENCE.split(text):
        sentence = _BULLET.sub("", sentence).strip().strip('"')
        found = _PHRASE.search(sentence)
        if not found or found.group(1) or len(sentence) > MAX_TEXT:
            continue
        if all(w.lower() in _FUNCTION_WORDS for w in re.findall(r"\w+", sentence[found.end():])):
            continue  # "Good at" and." (seen from the embedded model): no capability named
        body = sentence[found.start(2):].rstrip(" .")
        body = body[0].upper() + body[1:] + "."
        if body.casefold() not in seen:
            seen.add(body.casefold())
            out.append({"tool": tool, "category": PHRASES[found.group(2).lower()], "text": body})
    if not out:
        raise ValueError("no sentence names what the tool is good or bad at after a category phrase (proficient at, "
                         "good at, bad at, poor at)")
    if len(out) > MAX_ENTRIES:
        raise ValueError(f"{len(out)} entries in one answer (at most {MAX_ENTRIES}): a runaway answer")
    return out


def render_memory(entries: Sequence[dict]) -> str:
    """Entries as the prompts show them: one line each, by category from proficient to weak."""
    if not entries:
        return "No entries yet."
    order = list(CATEGORIES)
    return "\n".join(f"- {e['text']}" for e in sorted(entries, key=lambda e: order.index(e["category"])))


class ToolMem:
    """Every tool's entries in one store."""

    def __init__(self, store: MemoryStore | None = None):
        self.store = store if store is not None else MemoryStore(check=check_entry)

    @classmethod
    def load(cls, path: str | Path) -> "ToolMem":
        return cls(MemoryStore.load(path, check=check_entry))

    def save(self, path: str | Path) -> int:
        return self.store.save(path)

    def tools(self) -> list[str]:
        return list(dict.fromkeys(e["tool"] for e in self.store.entries))

    def entries(self, tool: str, category: str | None = None) -> list[dict]:
        return [e for e in self.store.entries if e["tool"] == tool and category in (None, e["category"])]

    def retrieve(self, tool: str, query: str, k: int) -> dict[str, list[dict]]:
        """The top-`k` entries of each of `tool`'s categories by BM25 against `query`, best first."""
        out = {}
        for category in CATEGORIES:
            pool = self.entries(tool, category)
            out[category] = [pool[i] for i in top_k(bm25_scores(query, [e["text"] for e in pool]), k)]
        return out

    def recall(self, tool: str, query: str, k: int = TEST_K) -> list[dict]:
        """What a test-time prompt shows of `tool`: the top-`k` entries per category, as one list."""
        return [e for found in self.retrieve(tool, query, k).values() for e in found]

    def apply(self, context: Sequence[dict], updated: Sequence[dict]) -> None:
        """M <- (M \\ M_context) ∪ M_updated (an updated entry already in M is kept once); an updated entry that
        names its feature (rules) replaces the tool's entry of that feature, retrieved or not."""
        keys = {(e["tool"], e["feature"]) for e in updated if "feature" in e}
        self.store.remove(lambda e: e in context or (e["tool"], e.get("feature")) in keys)
        for entry in updated:
            if entry not in self.store.entries:
                self.store.add(entry)


def induction_prompt(experience: dict, context: Sequence[dict]) -> str:
    return INDUCTION_PROMPT.format(tool=experience["tool"], memory=render_memory(context),
                                   prompt=experience["prompt"], response=experience["solution"],
                                   rubric=experience["rubric"], score=experience["score"],
                                   feedback=experience["feedback"])


def _query(experience: dict) -> str:
    return f"{experience['prompt']}\n{experience['feedback']}"


@dataclass
class InductionReport:
    updates: int = 0  # experiences whose M_updated was applied
    retries: int = 0  # answers asked again after a malformed one (model)
    failed: list[dict] = field(default_factory=list)  # {"id", "error", "answer"} of experiences given up on (model)


# I(M_context, e) over one round: (memory, experiences, their contexts, report) -> each M_updated, or None when
# the experience was given up on (the memory is read only for the rules' exact statistics)
Induction = Callable[[ToolMem, list[dict], list[list[dict]], InductionReport], list[list[dict] | None]]


def induce(memory: ToolMem, experiences: Sequence[dict], induction: Induction, k: int = UPDATE_K) -> InductionReport:
    """Update `memory` with each experience in order (paper §2.2), each tool's in turn. Tools' memories are
    independent, so each round takes the next experience of every tool at once (one batch for an LLM)."""
    queues: dict[str, list[dict]] = {}
    for e in experiences:
        queues.setdefault(e["tool"], []).append(e)
    report = InductionReport()
    while any(queues.values()):
        batch = [q.pop(0) for q in queues.values() if q]
        contexts = [memory.recall(e["tool"], _query(e), k) for e in batch]
        for context, updated in zip(contexts, induction(memory, batch, contexts, report), strict=True):
            if updated is not None:
                memory.apply(context, updated)
                report.updates += 1
    return report


def model_induction(generate: Callable[[list[str], int], list[str]], retries: int = 2) -> Induction:
    """The paper's induction step on an LLM: one `generate(prompts, attempt)` call per round and retry (`attempt` 0
    first; a retry should sample, since a greedy engine would give the same answer again)."""
    def induction(memory, batch, contexts, report):
        updated: list[list[dict] | None] = [None] * len(batch)
        pending = list(range(len(batch)))
        for attempt in range(retries + 1):
            answers = generate([induction_prompt(batch[i], contexts[i]) for i in pending], attempt)
            still = []
            for i, answer in zip(pending, answers, strict=True):
                try:
                    updated[i] = parse_induction(answer, batch[i]["tool"])
                except ValueError as e:
                    if attempt == retries:
                        report.failed.append({"id": batch[i]["id"], "error": str(e), "answer": answer})
                    still.append(i)
            pending = still
            if not pending:
                break
            report.retries += len(pending) * (attempt < retries)
        return updated
    return induction


# ---- the rules induction ----

TASK_LENGTH = re.compile(r"about (\d+) tokens of context")  # how a generated experience's prompt states its length
LENGTH_EDGES = (250, 500, 1000, 2000, 4000)  # tokens: the bands of context length a rules entry is about
_BAND = re.compile(r"\b(?:under (\d+)|(\d+) to (\d+)|over (\d+)) tokens of context")


def _length_band(tokens: int) -> str:
    low = max((e for e in LENGTH_EDGES if e <= tokens), default=0)
    high = min((e for e in LENGTH_EDGES if e > tokens), default=None)
    if not low:
        return f"under {high} tokens of context"
    return f"over {low} tokens of context" if high is None else f"{low} to {high} tokens of context"


def in_band(text: str, tokens: int) -> bool | None:
    """Whether a context of `tokens` lies in the band of context length `text` names; None when it names none."""
    found = _BAND.search(text)
    if not found:
        return None
    under, low, high, over = (None if g is None else int(g) for g in found.groups())
    return tokens < under if under is not None else tokens >= over if over is not None else low <= tokens < high


def features(experience: dict) -> list[tuple[str, str]]:
    """(key, phrase) of each task feature the experience's prompt states, as the rules write them: the family, the
    family and its size (BiGGen Bench: capability and task), and the band of the context's length when given."""
    family, bucket = experience["family"], experience["bucket"]
    size = "size " if f"size {bucket}" in experience["prompt"] else ""
    out = [(f"family={family}", f"{family} tasks"),
           (f"bucket={family}/{bucket}", f"{family} tasks ({size}{bucket})")]
    found = TASK_LENGTH.search(experience["prompt"])
    if found:
        band = _length_band(int(found.group(1)))
        out.append((f"length={band}", f"tasks with {band}"))
    return out


def category_of(mean: float) -> str:
    """The category whose value (+2 .. -2, the score 5, 4, 2, 1) is nearest the mean 1-5 score (3: good)."""
    value = mean - 3
    return "proficient" if value >= 1.5 else "good" if value >= 0 else "bad" if value > -1.5 else "weak"


def mirror(entry: dict) -> dict:
    """The entry as a tool with the opposite record would have it (counterfactual SFT data, `envs.toolmem`): a
    rules entry with every score s as 6 - s, any other with the opposite category (proficient <-> weak, good <->
    bad) and its phrase."""
    if "feature" in entry:
        phrase = entry["text"].split(" at ", 1)[1].rsplit(": mean score", 1)[0]
        return _rules_entry(entry["tool"], entry["feature"], phrase, entry["n"], 6 * entry["n"] - entry["sum"])
    category = next(c for c, v in CATEGORIES.items() if v == -CATEGORIES[entry["category"]])
    found = _PHRASE.match(entry["text"])  # an induction entry begins with its phrase (`parse_induction`)
    rest = entry["text"][found.end():] if found else f": {entry['text']}"
    return {**entry, "category": category, "text": f"{category.capitalize()} at{rest}"}


def _rules_entry(tool: str, key: str, phrase: str, n: int, total: int | float) -> dict:
    mean = total / n
    category = category_of(mean)
    text = f"{category.capitalize()} at {phrase}: mean score {mean:.1f}/5 over {n} experience{'s' * (n != 1)}."
    return {"tool": tool, "category": category, "text": text, "feature": key, "n": n, "sum": total}


def rules_induction(memory: ToolMem, batch: list[dict], contexts: list[list[dict]],
                    report: InductionReport) -> list[list[dict]]:
    """The rules' induction step: per feature of the experience, its entry with the score added (a new one for a
    new feature); the rest of M_context kept as it was."""
    out = []
    for e, context in zip(batch, contexts, strict=True):
        fresh = []
        for key, phrase in features(e):
            old = next((x for x in memory.entries(e["tool"]) if x.get("feature") == key), None)
            n, total = (old["n"], old["sum"]) if old else (0, 0)
            fresh.append(_rules_entry(e["tool"], key, phrase, n + 1, total + e["score"]))
        keys = {x["feature"] for x in fresh}
        out.append([x for x in context if x.get("feature") not in keys] + fresh)
    return out
