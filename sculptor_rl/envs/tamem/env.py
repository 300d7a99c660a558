"""The TA-Mem environment (Yuan et al.): a question about a long conversation, answered through ten memory tools.

The agent sees the system prompt (the QA instructions; the tools come with the chat template) and the question,
never the conversation: its memory is a `tamem.memory.MemoryDB` of pages built from notes, either the oracle
notes of a generated conversation (`notes: oracle`) or an LLM extractor's, read from the directory `extract_notes`
wrote (`notes: DIR`). Each rollout holds a `tamem.tools.Retriever` (the per-question cache). At most `max_turns`
completions (paper: 7): the result of a call made in the last but one turn says to answer next, and calls made
after that are refused with an error (the reward counts a rollout past the limit as a broken cap, and an answer
given past it scores 0, F1 and BLEU-1, so eval never credits an 8th turn). The score is LoCoMo's F1 (the `tamem`
family's scorer), the reward that F1 (`tamem.metrics.reward`).

`eval --environment tamem` runs the modes `tamem` (this env) and the baselines over the raw conversation in the
same records: `full` (all of it in context), `bm25` (top chunks) and `acm` (the ACM tools over it), and reports
per category F1, BLEU-1, tokens and turns per question and the tool-usage distribution (`tamem.metrics`).

`extract_notes` runs the LLM extractor (`tamem.extract`) for the conversations of some records on any engine and
caches each conversation's notes in a directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import conversations, extract, metrics
from .memory import MemoryDB, oracle_notes, pages
from .tools import TOOL_SCHEMAS, Retriever
from ...toolcalls import ToolResult
from ..base import Env

__all__ = ["TAMEM_SYSTEM_PROMPT", "TamemEnv", "TamemParams", "extract_notes"]

TAMEM_SYSTEM_PROMPT = (
    "You answer a question about a long conversation between two people. You cannot read the conversation: its "
    "memory is a database of pages. A page holds the original dialogue of a few messages, the date of its session "
    "and a note: summary, keywords, people, facts, events with their dates, and a topic tag. Find what you need "
    "with the tools. search_keyword, search_person and search_tag match a key exactly: when one finds nothing, list "
    "the keys (get_keywords, get_person_names, get_tags) and retry with one of them. match_events and match_facts "
    "rank events and facts by similarity to your query; get_person_events and get_person_facts give all of a "
    "person's. A page already returned is not shown again. Relative times in a dialogue (\"yesterday\", \"last "
    "Saturday\") count from its session's date; when facts disagree, the latest session holds. You have at most "
    "{max_turns} turns: answer with a short phrase, without a tool call."
)


@dataclass
class TamemParams:
    notes: str = "oracle"  # "oracle" (generated conversations' own metadata) or a directory of extract_notes
    max_turns: int = 7  # completions per question (paper: 7)

    def __post_init__(self):
        if not isinstance(self.max_turns, int) or isinstance(self.max_turns, bool) or self.max_turns < 1:
            raise ValueError(f"max_turns must be an integer >= 1, got {self.max_turns!r}")
        if not isinstance(self.notes, str) or not (self.notes == "oracle" or Path(self.notes).is_dir()):
            raise ValueError(f"notes must be \"oracle\" or a directory of extracted notes, got {self.notes!r}")


class TamemEnv(Env):
    name = "tamem"
    Params = TamemParams
    system_prompt = TAMEM_SYSTEM_PROMPT
    tools = TOOL_SCHEMAS
    task_families = (conversations.NAME,)

    @classmethod
    def eval_modes(cls) -> dict[str, tuple[str, dict]]:
        """TA-Mem against the baselines over the raw conversation (each the environment of that name)."""
        return {"tamem": (cls.name, {}), "full": ("full", {}), "bm25": ("bm25", {}), "acm": ("acm", {})}

    @classmethod
    def summarize(cls, trajs: list, mode: str) -> dict:
        return metrics.summarize(trajs)

    def __init__(self, task: dict, params: TamemParams | None = None, **kwargs):
        if task.get("task") != conversations.NAME:
            raise ValueError(f"the tamem env runs {conversations.NAME!r} tasks, got {task.get('task')!r}")
        super().__init__(task, params, **kwargs)
        meta = task["meta"]
        convo = conversations.conversation_of(task)
        if self.params.notes == "oracle":
            notes = oracle_notes(convo)
        else:
            notes = extract.load(Path(self.params.notes), convo)
        self.retriever = Retriever(MemoryDB(pages(convo, notes)))
        sessions = convo["sessions"]
        a, b = convo["speakers"]
        question = (f"The conversation between {a} and {b} has {len(sessions)} sessions, from "
                    f"{sessions[0]['date_time']} to {sessions[-1]['date_time']}.\nQuestion: {meta['question']} "
                    "Answer with a short phrase.")
        self.messages = [{"role": "system", "content": self.system_prompt.format(max_turns=self.params.max_turns)},
                         {"role": "user", "content": question}]
        self.turns = 0
        self.answer: str | None = None

    @classmethod
    def conversation(cls, messages: list[dict], params=None, **kwargs) -> "TamemEnv":
        raise ValueError("the tamem environment answers questions about a stored conversation's memory; it cannot "
                         "serve a client's conversation")

    def append(self, message: dict) -> None:
        self.turns += message["role"] == "assistant"
        super().append(message)

    def execute(self, name, arguments) -> ToolResult:
        last = self.params.max_turns
        if self.turns >= last:
            return ToolResult(f"Error: no tool calls in the last turn ({last} of {last}): answer now.", False, False)
        result = self.retriever.execute(name, arguments)
        if self.turns == last - 1:
            return ToolResult(f"{result.text}\n\n(Turn {self.turns} of {last}: your next reply is your answer.)",
                              result.ok, result.modified)
        return result

    def on_answer(self, text: str) -> bool:
        self.answer = text
        return False

    def _in_time(self) -> bool:
        return self.turns <= self.params.max_turns

    def score(self, answer: str | None) -> float:
        """LoCoMo's F1 of the answer; 0 when it came after the `max_turns`-th completion (the paper's limit)."""
        return super().score(answer) if self._in_time() else 0.0

    def reward(self, traj) -> float:
        return metrics.reward(traj, self.reward_config, self.params.max_turns)

    def info(self) -> dict:
        gold = self.task.get("answer")
        answer = (self.answer or "") if self._in_time() else ""
        return {"env": "tamem", "category": self.task["meta"]["category"], "turns": self.turns,
                "cache_hits": self.retriever.cache_hits, "notes": "oracle" if self.params.notes == "oracle" else "llm",
                **({"bleu1": metrics.bleu1(answer, gold)} if gold is not None else {})}


def extract_notes(tasks: list[dict], llm, out_dir: str | Path, retries: int = 1, max_new_tokens: int = 2048) -> dict:
    """The LLM extractor over the conversations of `tasks` (each once) on `llm` (`envs.llm`: the policy's engine
    or an endpoint), cached per conversation in `out_dir` (the env's `notes: DIR`). Returns `tamem.extract.run`'s
    report."""
    convos = list({t["meta"]["conversation"]["id"]: conversations.conversation_of(t) for t in tasks}.values())
    return extract.run(convos, lambda batch: llm.ask(batch, max_new_tokens=max_new_tokens, tag="extract"),
                       Path(out_dir), retries)
