"""A toy environment: the model adds numbers with a tool, then replies with the sum."""

from __future__ import annotations

import random

from sculptor_rl.envs import Env, ToolResult

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


def make_tasks(num: int, seed: int = 0) -> list[dict]:
    """`num` sums of two numbers below 100."""
    rng = random.Random(seed)
    out = []
    for i in range(num):
        a, b = rng.randrange(100), rng.randrange(100)
        out.append({"id": f"sum-{seed}-{i}", "task": "sum",
                    "messages": [{"role": "user", "content": f"What is {a} + {b}?"}], "answer": a + b})
    return out
