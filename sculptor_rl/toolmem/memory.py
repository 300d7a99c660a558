"""The ToolMem memory (paper §2.1-2.3): per tool, entries in four proficiency categories, refined by an LLM.

An entry is {"tool", "category", "text"}: category proficient (+2), good (+1), bad (-1) or weak (-2), the text
one sentence that starts with its category phrase ("Good at ...", "Weak at ..."). It lives in a
`sculptor_rl.memory.MemoryStore` (JSONL on disk).

Update with one experience e of tool t (§2.2): the top-`k` (6) entries of each of t's categories, by BM25 against
e's task prompt and feedback, are M_context; the paper's refinement prompt (§B.2, `induction_prompt`) shows them
with e; the LLM's answer, parsed into entries (`parse_induction`), is M_updated; then
M <- (M \\ M_context) ∪ M_updated (`ToolMem.apply`). An answer with no sentence that starts with a category
phrase is malformed: it is asked again (`retries` times), then reported and the memory left as it was (`induce`).
The LLM call itself is `generate(prompts, attempt) -> texts`, given by the caller (an engine on the envs layer).

At test time (§2.3) the top-`k` (12) entries of each category, by BM25 against the task, are shown (`recall`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..memory import MemoryStore, bm25_scores, top_k

__all__ = ["CATEGORIES", "INDUCTION_PROMPT", "InductionReport", "ToolMem", "check_entry", "induce",
           "parse_induction", "render_memory"]

CATEGORIES = {"proficient": 2, "good": 1, "bad": -1, "weak": -2}
# the phrases the refinement prompt asks for; "poor at" is the prompt's word for the "weak at" category
PHRASES = {"proficient at": "proficient", "good at": "good", "bad at": "bad", "weak at": "weak", "poor at": "weak"}
UPDATE_K, TEST_K = 6, 12  # entries per category: retrieved for an update, shown at test time (paper §3.1)
MAX_TEXT = 300  # characters: a longer "sentence" is a run-on, not an entry
MAX_ENTRIES = 4 * UPDATE_K + 8  # an answer may keep the 4 x 6 retrieved entries and add a few

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
        """M <- (M \\ M_context) ∪ M_updated (an updated entry already in M is kept once)."""
        self.store.remove(lambda e: e in context)
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
    updates: int = 0  # experiences whose answer was parsed and applied
    retries: int = 0  # answers asked again after a malformed one
    failed: list[dict] = field(default_factory=list)  # {"id", "error", "answer"} of experiences given up on


def induce(memory: ToolMem, experiences: Sequence[dict], generate: Callable[[list[str], int], list[str]],
           retries: int = 2, k: int = UPDATE_K) -> InductionReport:
    """Update `memory` with each experience in order (paper §2.2). Tools' memories are independent, so each
    round takes the next experience of every tool at once: one `generate(prompts, attempt)` call per round and
    retry (`attempt` 0 first; a retry should sample, since a greedy engine would give the same answer again)."""
    queues: dict[str, list[dict]] = {}
    for e in experiences:
        queues.setdefault(e["tool"], []).append(e)
    report = InductionReport()
    while any(queues.values()):
        batch = [q.pop(0) for q in queues.values() if q]
        contexts = [memory.recall(e["tool"], _query(e), k) for e in batch]
        pending = list(range(len(batch)))
        for attempt in range(retries + 1):
            answers = generate([induction_prompt(batch[i], contexts[i]) for i in pending], attempt)
            still = []
            for i, answer in zip(pending, answers, strict=True):
                try:
                    memory.apply(contexts[i], parse_induction(answer, batch[i]["tool"]))
                    report.updates += 1
                except ValueError as e:
                    if attempt == retries:
                        report.failed.append({"id": batch[i]["id"], "error": str(e), "answer": answer})
                    still.append(i)
            pending = still
            if not pending:
                break
            report.retries += len(pending) * (attempt < retries)
    return report

