"""The ACM environment: the task's conversation in an ACM `Workspace` (the six context tools), its system
prompt, the task family's scorer and the eq. 4 reward (both `Env` defaults)."""

from __future__ import annotations

import re

from ...acm import TOOL_SCHEMAS, Workspace
from ...longcontext import FAMILIES
from ..base import Env

__all__ = ["ACM_SYSTEM_PROMPT", "SUMMARY_PROMPT", "AcmEnv", "llm_summarizer"]

ACM_SYSTEM_PROMPT = (
    "You have tools to fragment, fold, summarize, restore and search your context. Use them when they help, "
    "then give your final answer without a tool call."
)


SUMMARY_PROMPT = (
    "Summarize the following part of a conversation, focusing on: {focus}. Keep every name, number and fact that "
    "bears on the focus, drop the rest. Reply with the summary alone.\n\n{text}"
)


def llm_summarizer(llm):
    """`summarize_fragment`'s summarizer on the run's LLM (the paper's "focused AI-powered summaries"): the
    fragment's text and the focus in one user turn, the reply as the summary."""
    def summarize(text: str, focus: str) -> str:
        (reply,) = llm.ask([[{"role": "user", "content": SUMMARY_PROMPT.format(focus=focus, text=text)}]],
                           tag="summarize_fragment")
        return reply.strip()
    return summarize


_MADE = re.compile(r"^- (f[a-z0-9]{5}): (\d+) chars", re.M)  # fragment_context's result, one line per fragment
_SUMMARY = re.compile(r"shown as a (\d+)-char summary")  # summarize_fragment's result
_STATES = {"fold_fragment": "folded", "summarize_fragment": "summarized", "restore_fragment": "restored"}


class AcmEnv(Env):
    name = "acm"
    system_prompt = ACM_SYSTEM_PROMPT
    tools = TOOL_SCHEMAS
    task_families = tuple(FAMILIES)

    @classmethod
    def eval_modes(cls) -> dict[str, tuple[str, dict]]:
        """ACM against the no-tool baselines: each mode is the environment of that name."""
        return {mode: (mode, {}) for mode in ("acm", "full", "truncate", "bm25")}

    @staticmethod
    def context_events(call: dict) -> list[dict]:
        """The fragments a call made or changed, read from its result text (the workspace's own wording)."""
        if not (call["ok"] and call["modified"]):
            return []
        if call["name"] == "fragment_context":
            return [{"fragment": f, "state": "visible", "chars": int(n)} for f, n in _MADE.findall(call["result"])]
        state = _STATES.get(call["name"])
        fragment = call["arguments"].get("fragment_id") if isinstance(call["arguments"], dict) else None
        if state is None or not fragment:
            return []
        event = {"fragment": fragment, "state": state}
        if (m := _SUMMARY.search(call["result"])) and state == "summarized":
            event["summary_chars"] = int(m[1])
        return [event]

    def __init__(self, task: dict, params=None, *, seed: int = 0, **kwargs):
        super().__init__(task, params, seed=seed, **kwargs)
        self.workspace = Workspace(self.messages, seed=seed, summarizer=self.llm and llm_summarizer(self.llm))

    def render(self) -> list[dict]:
        return self.workspace.render()

    def original(self) -> list[dict]:
        return self.workspace.original()

    def append(self, message: dict) -> None:
        self.workspace.append(message)

    def execute(self, name, arguments):
        return self.workspace.execute(name, arguments)
