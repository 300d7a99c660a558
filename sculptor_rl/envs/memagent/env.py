"""The MemAgent environment: no tools; the record's long context is read chunk by chunk, one fresh prompt per chunk.

Mechanics as in BytedTsinghua-SIA/MemAgent (76b7a65) `recurrent/impls/memory.py`: each turn's prompt is the problem,
the memory written by the previous turn ("No previous memory" at first) and the next chunk; the reply becomes the new
memory, whole (it overwrites the old one), cut to `memory_tokens` (there the memory turn's generation length caps it);
after the last chunk a final prompt of the problem and the memory asks for the answer. Every turn is a new prompt that
does not extend the previous one, so Algorithm 1 makes one sample per turn, each trained in its own prompt, and the
rollout's advantage reaches them all (MemAgent's `compute_1D_grpo_advantage` copies the final one to every turn).

Budget: MemAgent's 8K context holds a 1K problem, a 1K memory and a 5K chunk (with the memory's 1K generation); here
`context_budget` is split as chunk = budget / 2 and memory = budget / 4 (a larger memory share than MemAgent's: an
MRCR answer is a whole earlier reply), the rest for the problem and the template. The prompts are this project's
wording of MemAgent's two templates.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..reading import BudgetParams, ShownEnv, count_tokens, document, paradigm_modes
from .teacher import teach

__all__ = ["FINAL_TEMPLATE", "MEMORY_TEMPLATE", "MemAgentEnv", "MemAgentParams", "NO_MEMORY"]

NO_MEMORY = "No previous memory"
MEMORY_TEMPLATE = (
    "You are given a problem, one section of a text that may hold the answer, and your memory of the sections before "
    "it. Read the section and write the updated memory: keep every detail of the previous memory that helps answer "
    "the problem and add what this section adds. Reply with the memory alone.\n\n"
    "<problem>\n{problem}\n</problem>\n\n<memory>\n{memory}\n</memory>\n\n"
    "<section {index}/{count}>\n{chunk}\n</section>\n\nUpdated memory:")
FINAL_TEMPLATE = (
    "You are given a problem and your memory of a text you have read. Answer the problem from the memory.\n\n"
    "<problem>\n{problem}\n</problem>\n\n<memory>\n{memory}\n</memory>\n\nYour answer:")


@dataclass
class MemAgentParams(BudgetParams):
    """`context_budget` (tokens): a chunk is half of it, the memory a quarter."""


class MemAgentEnv(ShownEnv):
    name = "memagent"
    Params = MemAgentParams
    task_families = ("pi_llm", "needlebench", "mrcr", "babilong", "gsm_infinite")
    teach = staticmethod(teach)

    @classmethod
    def eval_modes(cls) -> dict[str, tuple[str, dict]]:
        return paradigm_modes()

    def __init__(self, task: dict, params=None, **kwargs):
        super().__init__(task, params, **kwargs)
        budget = self.params.context_budget
        self.chunk_tokens, self.memory_tokens = budget // 2, budget // 4
        self.doc = document(task, self.chunk_tokens, self.tokenizer)
        self.problem = "\n\n".join(p for p in (self.doc.before, self.doc.after) if p)
        self.memory, self.turn, self.cut = NO_MEMORY, 0, 0
        self.shown = [self._prompt()]

    def _prompt(self) -> dict:
        count = len(self.doc.chunks)
        if self.turn < count:
            text = MEMORY_TEMPLATE.format(problem=self.problem, memory=self.memory, index=self.turn + 1, count=count,
                                          chunk=self.doc.chunks[self.turn])
        else:
            text = FINAL_TEMPLATE.format(problem=self.problem, memory=self.memory)
        return {"role": "user", "content": text}

    def capped(self, text: str) -> str:
        """The memory a reply writes: its first `memory_tokens` tokens."""
        text = text.strip()
        if count_tokens(text, self.tokenizer) <= self.memory_tokens:
            return text
        self.cut += 1
        if self.tokenizer is None:
            return text[: 4 * self.memory_tokens]
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: self.memory_tokens]
        return self.tokenizer.decode(ids)

    def on_answer(self, text: str) -> bool:
        """A memory turn's reply overwrites the memory and the next prompt opens; the final turn's is the answer."""
        if self.turn == len(self.doc.chunks):
            return False
        self.memory = self.capped(text) or NO_MEMORY
        self.turn += 1
        self.shown = [self._prompt()]
        return True

    def info(self) -> dict:
        return {"chunks": len(self.doc.chunks), "chunk_tokens": self.chunk_tokens, "memory_tokens": self.memory_tokens,
                "memory_cut": self.cut, "context_budget": self.params.context_budget}
