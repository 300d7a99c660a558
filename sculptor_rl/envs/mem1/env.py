"""The MEM1 environment: the record's long context read through `read_chunk`, and a prompt that keeps only the
task and the last turn.

Mechanics as in MIT-MI/MEM1 (6f22061) `Mem1/train/rollout/llm_agent/generation_think.py` (`run_llm_loop`, with
`_calculate_kept_lengths` and `tensor_helper.mask_using_kept_lengths`): the model writes its internal state, then
one action (a search, or the answer); the next prompt is the initial task followed by the last response (from its
state on) and the observation it got, every earlier turn masked out. Here the action is a `read_chunk` call or the
final answer (no call) and the observation is the call's tool turn: `render()` is the system prompt, the task, the
last assistant turn and the tool turns after it. The internal state is written in `<state>...</state>` (MEM1's code
tags it `<think>`; a chat template that strips reasoning from earlier turns, Qwen3's, would drop a `<think>` block
from the one turn that is kept).
Training: each prompt replaces the previous turn, so Algorithm 1 makes one sample per turn, trained in exactly the
prompt the model saw (MEM1's released mask, `rollout/llm_agent/attn_mask_utils.py`, trains a packed sequence under an
attention mask that differs from what its rollout showed; this follows the rollout).

Budget: a chunk is 2/5 of `context_budget` (the observation is the largest part of a MEM1 prompt; the task, the
system prompt and the state take the rest).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..reading import BudgetParams, ReadingEnv
from .teacher import teach

__all__ = ["MEM1_SYSTEM_PROMPT", "Mem1Env", "Mem1Params"]

MEM1_SYSTEM_PROMPT = (
    "You answer a question about a text that you read one chunk at a time. Only your last turn stays in your context: "
    "every earlier turn is removed. So each turn, first write your internal state inside <state>...</state>: "
    "everything you have found so far that helps answer the question, and which chunk you read last. Then either call "
    "read_chunk for the next chunk, or, when you can answer, give the final answer without a tool call.")


@dataclass
class Mem1Params(BudgetParams):
    """`context_budget` (tokens): a chunk is 2/5 of it."""


class Mem1Env(ReadingEnv):
    name = "mem1"
    Params = Mem1Params
    system_prompt = MEM1_SYSTEM_PROMPT
    teach = staticmethod(teach)

    def chunk_tokens(self) -> int:
        return 2 * self.params.context_budget // 5

    def render(self) -> list[dict]:
        """The system prompt and the task, then the last assistant turn and its tool turns."""
        turns = [i for i, m in enumerate(self.shown) if m["role"] == "assistant" and i >= self.head]
        return [dict(m) for m in self.shown[: self.head] + (self.shown[turns[-1]:] if turns else [])]
