"""The ReSum environment: the record's long context read through `read_chunk`; when the context reaches 90 % of
`context_budget`, it is reset to the system prompt and one user turn of the question and a summary.

Mechanics as in Alibaba-NLP/DeepResearch (f72f75d) `WebAgent/WebResummer/src/react_agent.py`: after each
observation the conversation's tokens are counted; at 90 % of the limit a summary tool is asked
(`summary_utils.summarize_conversation`: the question, the conversation since the last reset and the last summary;
the reply's `<summary>...</summary>`), and the messages become the system prompt and a user turn "Question: ...
Below is a summary of the previous conversation. ... Summary: <summary>". No tool of the agent's own: the reset is
the environment's. Here the count is of what the messages say and of the tool schemas (`context_tokens`, the policy's
tokens; the chat template's own tokens are not counted), and the reset happens when the next prompt is made
(`render`), between turns, as there.

The summarizer is the run's LLM (`envs.llm`: the policy itself, as ReSum-GRPO trains, or an endpoint, as ReSum's
dedicated summary model), asked with this project's wording of ReSum's summary request. Offline (no LLM wired), a
labelled stand-in writes the summary a reader of the question would: the notes (`reading.update_notes`) of the chunks
read so far, in the scripted teacher's note form, marked `[scripted summary: ...]` (for a record without the
question's `meta`, the agent's own last note, marked `[extractive: ...]`); never presented as an LLM's summary.
(The agent's own last note alone would not do: it was written before the observation that crossed the threshold,
which a reset would then lose.)
Training: a reset starts a prompt that does not extend the previous one, so Algorithm 1 closes a sample there: K
summaries make K + 1 samples, the rollout's advantage copied to each, as in ReSum-GRPO.

Budget: a chunk is a third of `context_budget`; the reset threshold is `threshold` (0.9) of it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..reading import BudgetParams, ReadingEnv, count_tokens, message_tokens
from ..reading import update_notes
from .teacher import CHUNK, NOTE, teach

__all__ = ["RESET_TEMPLATE", "RESUM_SYSTEM_PROMPT", "ReSumEnv", "ReSumParams", "SUMMARY_PROMPT"]

RESUM_SYSTEM_PROMPT = (
    "You answer a question about a text that you read one chunk at a time with read_chunk. Before each call, note "
    "in your reply what you have found so far that helps answer the question. When you can answer, give the final "
    "answer without a tool call.")
SUMMARY_PROMPT = (
    "An agent is working on the question below. Summarize its progress so far: every fact it has found that bears "
    "on the question (names, numbers, values, exact quotes), and what it has done and should do next. Reply with the "
    "summary inside <summary>...</summary>.\n\nQuestion: {question}\n\n{last}Conversation since then:\n{history}")
RESET_TEMPLATE = (
    "Question: {question}\nBelow is a summary of the previous conversation. It condenses the key information of the "
    "earlier steps: consider it carefully, judge whether it is enough to answer the question, and build on it to "
    "continue.\nSummary: <summary>{summary}</summary>\n")
_SUMMARY = re.compile(r"<summary>(.*?)(?:</summary>|$)", re.S)
EXTRACTIVE = "[extractive: the agent's last note] "
SCRIPTED = "[scripted summary: the notes of the chunks read] "


@dataclass
class ReSumParams(BudgetParams):
    """`context_budget` (tokens): a chunk is a third of it; the context is reset at `threshold` of it."""

    threshold: float = 0.9

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.threshold, (int, float)) or not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold!r}")


class ReSumEnv(ReadingEnv):
    name = "resum"
    Params = ReSumParams
    system_prompt = RESUM_SYSTEM_PROMPT
    teach = staticmethod(teach)

    def __init__(self, task: dict, params=None, **kwargs):
        super().__init__(task, params, **kwargs)
        self.question = self.shown[self.head - 1]["content"]  # the record's message, its context replaced
        self.summary: str | None = None
        self.resets = 0
        self.progress: tuple[int, list[str]] = (0, [])  # the scripted summary's chunks read and notes

    def chunk_tokens(self) -> int:
        return self.params.context_budget // 3

    def render(self) -> list[dict]:
        if self._between_turns() and self.context_tokens() >= self.params.threshold * self.params.context_budget:
            self.reset()
        return super().render()

    def context_tokens(self) -> int:
        """What the context holds now: the messages and the tool schemas the prompt shows."""
        return message_tokens(self.shown, self.tokenizer) + count_tokens(json.dumps(self.tools), self.tokenizer)

    def _between_turns(self) -> bool:
        """Every call of the last assistant turn answered (the next prompt is about to be made)."""
        turns = [i for i, m in enumerate(self.shown) if m["role"] == "assistant"]
        if not turns or len(self.shown) - 1 == turns[-1]:
            return False
        return len(self.shown) - 1 - turns[-1] >= len(self.shown[turns[-1]].get("tool_calls") or [])

    def reset(self) -> None:
        """Summarize the conversation since the last reset and restart from the question and the summary."""
        recent = self.shown[self.head:]
        self.summary = self.write_summary(recent)
        self.shown = [*self.shown[: self.head - 1],
                      {"role": "user", "content": RESET_TEMPLATE.format(question=self.question, summary=self.summary)}]
        self.resets += 1

    def write_summary(self, recent: list[dict]) -> str:
        if self.llm is None:  # the labelled offline stand-in
            return self.scripted_summary(recent)

        last = f"Summary of the conversation before that:\n{self.summary}\n\n" if self.summary else ""
        history = "\n".join(f"{m['role']}: {m['content']}" for m in recent)
        (reply,) = self.llm.ask([[{"role": "user", "content": SUMMARY_PROMPT.format(
            question=self.question, last=last, history=history)}]], tag="resum_summary")
        reply = re.sub(r"<think>.*?</think>", "", reply, flags=re.S).strip()
        found = _SUMMARY.search(reply)
        return (found.group(1) if found else reply).strip()

    def scripted_summary(self, recent: list[dict]) -> str:
        """The offline stand-in: the notes (`reading.update_notes`, what a reader keeps for the question) of every
        chunk read in order so far, and how far that is; for a record whose question it cannot read (no
        `meta`), the agent's own last note. Labelled, never presented as an LLM's summary."""
        try:
            done, notes = self.progress
            for m in recent:
                found = CHUNK.match(m["content"] or "") if m["role"] == "tool" else None
                if found and int(found[1]) == done + 1:
                    notes, done = update_notes(self.task, notes, m["content"][found.end():]), done + 1
        except (KeyError, ValueError, TypeError):
            said = [m["content"].strip() for m in recent if m["role"] == "assistant" and (m["content"] or "").strip()]
            return EXTRACTIVE + (said[-1] if said else "no progress noted")
        self.progress = (done, notes)
        return SCRIPTED + NOTE.format(done=done, notes="\n".join(notes) or "nothing relevant found yet")

    def info(self) -> dict:
        return {**super().info(), "resets": self.resets}
