"""A toy environment: the model adds numbers with a tool, then replies with the sum."""

from __future__ import annotations

import random
import re

from sculptor_rl.envs import Env, ToolResult
from sculptor_rl.toolcalls import assistant_message

__all__ = ["CalculatorEnv", "make_tasks"]

ADD = {"type": "function", "function": {
    "name": "add", "description": "The sum of two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                   "required": ["a", "b"]}}}


class CalculatorEnv(Env):
    """Tasks like {"id": "sum-0", "task": "sum", "messages": [{"role": "user", "content": "What is 2 + 3?"}],
    "answer": 5}."""

    name = "calculator"
    task_families = ("sum",)
    system_prompt = "Add numbers with the add tool, then reply with the result alone."
    tools = [ADD]

    def execute(self, name, arguments) -> ToolResult:
        if name != "add" or not isinstance(arguments, dict) or set(arguments) != {"a", "b"}:
            return ToolResult("Error: call add with two numbers, a and b.", ok=False, modified=False)
        return ToolResult(str(arguments["a"] + arguments["b"]), ok=True, modified=False)

    def score(self, answer: str | None) -> float:
        return float(answer is not None and answer.strip() == str(self.task["answer"]))

    @classmethod
    def generate(cls, num: int, seed: int = 0, params: dict | None = None) -> list[dict]:
        """Its tasks for `sculptor-rl data generate --task sum` (params: `high`, the numbers' bound)."""
        params = dict(params or {})
        high = params.pop("high", 100)
        if params:
            raise ValueError(f"unknown sum parameter {next(iter(params))!r} (known: high)")
        return make_tasks(num, seed, high)

    @staticmethod
    def teach(task: dict, messages: list[dict], tools=None) -> dict | str:
        """The scripted teacher (`collect --teacher scripted`): add the two numbers with the tool, then reply with
        what it returned. Its state is the conversation: a tool result means the sum is known."""
        if messages[-1]["role"] == "tool":
            return messages[-1]["content"]
        question = next(m["content"] for m in messages if m["role"] == "user")
        a, b = map(int, re.findall(r"-?\d+", question)[:2])
        return assistant_message([("add", {"a": a, "b": b})])


def make_tasks(num: int, seed: int = 0, high: int = 100) -> list[dict]:
    """`num` sums of two numbers below `high`."""
    rng = random.Random(seed)
    out = []
    for i in range(num):
        a, b = rng.randrange(high), rng.randrange(high)
        out.append({"id": f"sum-{seed}-{i}", "task": "sum",
                    "messages": [{"role": "user", "content": f"What is {a} + {b}?"}], "answer": a + b})
    return out
