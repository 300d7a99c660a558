"""The Context-Folding environment: the record's long context read through `read_chunk`, with `branch` and
`return` to fold the reading of sub-tasks out of the main thread.

Mechanics as in sunnweiwei/FoldAgent (cc09646; read, not copied: the repository has no licence), `agents/fold_agent.py`
(`process_item`) and `agents/tool_spec.py` (`branch_tool`): `branch(description, prompt)` starts a branch that
continues from the main thread's whole context (the branch call included) plus a turn announcing branch mode with the
prompt; every observation inside the branch carries a reminder of its sub-task and of `return`; a branch cannot
branch or finish (the call fails and says so), and there are at most `max_branches` branches (FoldAgent's
`max_session`, 10 in its scripts), a call beyond them answered that the limit is reached. On `return(message)` the
branch's turns are dropped and the main thread gets "Branch has finished its task, the returned message is:\n\n
<message>". FoldAgent's model writes calls as text and gets observations as user turns; here calls are structured,
so the branch announcement and the returned message are the branch call's tool turn (shown as the announcement in
the branch, as the returned message after it).
Training: a return rewrites the context (the branch's turns leave it), so Algorithm 1 closes a sample there: the
main thread's completions and each branch's are trained in exactly the context each was generated in (FoldGRPO
trains each thread as its own sequence).

Budget: a chunk is a quarter of `context_budget` (a branch holds MAIN's context and its chunks); `main_limit` is
half of it, FoldGRPO's threshold for penalizing main-thread turns made while the main context is over it
(`info()["main_over_limit"]` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...toolcalls import ToolResult, json_object
from ..reading import READ_CHUNK, BudgetParams, ReadingEnv, message_tokens
from .teacher import teach

__all__ = ["BRANCH_MESSAGE", "BRANCH_TOOL", "FOLD_SYSTEM_PROMPT", "FoldEnv", "FoldParams", "RETURN_TOOL",
           "RETURNED"]

FOLD_SYSTEM_PROMPT = (
    "You answer a question about a text that you read one chunk at a time with read_chunk. You work in one of two "
    "modes. MAIN: plan, hand each sub-task (such as reading some chunks) to a branch with branch(description, "
    "prompt), and answer without a tool call when you can. BRANCH: do only the sub-task you were given, then call "
    "return(message) with everything MAIN needs from it; the branch's turns then leave the context and MAIN sees only "
    "your message.")

BRANCH_TOOL = {"type": "function", "function": {
    "name": "branch",
    "description": "Create a branch to do a sub-task; it sees the whole context so far and returns a message.",
    "parameters": {"type": "object", "properties": {
        "description": {"type": "string", "description": "A 3-5 word name for the sub-task."},
        "prompt": {"type": "string",
                   "description": "The sub-task: its objective and what the returned message must preserve."}},
        "required": ["description", "prompt"]}}}
RETURN_TOOL = {"type": "function", "function": {
    "name": "return",
    "description": "Finish the branch's sub-task (or give up on it) and go back to MAIN with a message.",
    "parameters": {"type": "object", "properties": {
        "message": {"type": "string", "description": "Everything MAIN needs from the sub-task's outcome."}},
        "required": ["message"]}}}

BRANCH_MESSAGE = (
    "MODE: BRANCH ({description}). You are now a branch with this sub-task from MAIN:\n{prompt}\n"
    "Do only this sub-task, then call return(message) with a clear, compact message holding everything MAIN needs.")
REMINDER = ("\n* You are in branch mode: {description}. Do only the sub-task and call return when it is done.")
RETURNED = "Branch has finished its task, the returned message is:\n\n{message}"


@dataclass
class FoldParams(BudgetParams):
    """`context_budget` (tokens): a chunk is a quarter of it, the main thread's limit half of it; `max_branches`: how
    many branches a rollout may open."""

    max_branches: int = 10

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.max_branches, int) or isinstance(self.max_branches, bool) or self.max_branches < 1:
            raise ValueError(f"max_branches must be an integer >= 1, got {self.max_branches!r}")


class FoldEnv(ReadingEnv):
    name = "fold"
    Params = FoldParams
    system_prompt = FOLD_SYSTEM_PROMPT
    tools = [READ_CHUNK, BRANCH_TOOL, RETURN_TOOL]
    teach = staticmethod(teach)

    def __init__(self, task: dict, params=None, **kwargs):
        super().__init__(task, params, **kwargs)
        self.branches = 0
        self.branch: dict | None = None  # the open branch: its description, where its call's tool turn lies
        self.returned: str | None = None  # a return made, folded when the next prompt is made
        self.main_over_limit = 0
        self.main_limit = self.params.context_budget // 2

    def chunk_tokens(self) -> int:
        return self.params.context_budget // 4

    def append(self, message: dict) -> None:
        if message["role"] == "assistant" and self.branch is None and \
                message_tokens(self.shown, self.tokenizer) > self.main_limit:
            self.main_over_limit += 1  # a main-thread turn made over half the budget (FoldGRPO's penalty)
        super().append(message)
        if self.branch is not None and self.branch.get("at") is None and message["role"] == "tool":
            self.branch["at"] = len(self.shown) - 1  # the branch call's tool turn

    def execute(self, name, arguments) -> ToolResult:
        if name == "branch":
            return self._branch(arguments)
        if name == "return":
            return self._return(arguments)
        result = super().execute(name, arguments)
        if self.branch is not None and result.ok:
            return ToolResult(result.text + REMINDER.format(description=self.branch["description"]), True,
                              result.modified)
        return result

    def _branch(self, arguments) -> ToolResult:
        if self.branch is not None:
            return ToolResult("Error: you are in branch mode and cannot branch. Use the return tool to go back to "
                              "MAIN.", ok=False, modified=False)
        try:
            args = json_object(arguments)
        except ValueError as e:
            return ToolResult(f"Error: {e}.", ok=False, modified=False)
        description, prompt = args.get("description"), args.get("prompt")
        if not (isinstance(description, str) and description.strip() and isinstance(prompt, str) and prompt.strip()):
            return ToolResult("Error: branch takes description and prompt, two non-empty strings.", ok=False,
                              modified=False)
        if self.branches >= self.params.max_branches:
            return ToolResult(f"Error: you have already reached the limit of {self.branches} branch calls. Continue "
                              "working without branches.", ok=False, modified=False)
        self.branches += 1
        self.branch = {"description": description.strip(), "at": None}
        return ToolResult(BRANCH_MESSAGE.format(description=description.strip(), prompt=prompt.strip()), ok=True,
                          modified=False)

    def _return(self, arguments) -> ToolResult:
        if self.branch is None:
            return ToolResult("Error: return ends a branch; you are in MAIN (answer without a tool call when done).",
                              ok=False, modified=False)
        try:
            message = json_object(arguments).get("message")
        except ValueError as e:
            return ToolResult(f"Error: {e}.", ok=False, modified=False)
        if not isinstance(message, str):
            return ToolResult("Error: return takes message, a string.", ok=False, modified=False)
        self.returned = message
        return ToolResult("Returning to MAIN.", ok=True, modified=True)

    def render(self) -> list[dict]:
        if self.returned is not None:  # fold the branch: its turns go, the call's tool turn holds the message
            at = self.branch["at"]
            self.shown = [*self.shown[:at], {**self.shown[at], "content": RETURNED.format(message=self.returned)}]
            self.branch = self.returned = None
        return super().render()

    def info(self) -> dict:
        return {**super().info(), "branches": self.branches, "main_over_limit": self.main_over_limit}
