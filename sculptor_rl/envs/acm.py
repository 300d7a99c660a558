"""The ACM environment: the task's conversation in an ACM `Workspace` (the six context tools), its system
prompt, the task family's scorer and the eq. 4 reward (both `Env` defaults)."""

from __future__ import annotations

from ..acm import TOOL_SCHEMAS, Workspace
from ..tasks import FAMILIES
from .base import Env

__all__ = ["ACM_SYSTEM_PROMPT", "AcmEnv"]

ACM_SYSTEM_PROMPT = (
    "You have tools to fragment, fold, summarize, restore and search your context. Use them when they help, "
    "then give your final answer without a tool call."
)


class AcmEnv(Env):
    name = "acm"
    system_prompt = ACM_SYSTEM_PROMPT
    tools = TOOL_SCHEMAS
    task_families = tuple(FAMILIES)

    @classmethod
    def eval_modes(cls) -> dict[str, tuple[str, dict]]:
        """ACM against the no-tool baselines: each mode is the environment of that name."""
        return {mode: (mode, {}) for mode in ("acm", "full", "truncate", "bm25")}

    def __init__(self, task: dict, params=None, *, seed: int = 0, summarizer=None, **kwargs):
        super().__init__(task, params, seed=seed, **kwargs)
        self.workspace = Workspace(self.messages, seed=seed, summarizer=summarizer)

    def render(self) -> list[dict]:
        return self.workspace.render()

    def original(self) -> list[dict]:
        return self.workspace.original()

    def append(self, message: dict) -> None:
        self.workspace.append(message)

    def execute(self, name, arguments):
        return self.workspace.execute(name, arguments)
