"""`ScriptedTeacher`: the scripted teachers as the policy the agent loop runs (SFT data without a strong model
endpoint).

A teacher is `teach(task, messages, tools=None) -> dict | str`, one per environment package (`<env>/teacher.py`,
named in the registry for its task families). `messages` is the conversation as the model sees it now and `tools`
the tool schemas it holds; the return value is the next assistant turn: a structured message making tool calls
(`toolcalls.assistant_message`, several per turn, run in order), which the loop renders in the policy's own
tool-call format with its chat template, or the final answer's text. Its state is read back from the
conversation. It may use `task["meta"]` for what the question asks about but never `task["answer"]`.
"""

from __future__ import annotations

from ..engines.base import Completion, Request
from ..toolcalls import assistant_message
from . import registry

__all__ = ["ScriptedTeacher"]


class ScriptedTeacher:
    """The teachers as the policy of a run over `tasks`: each request's next completion comes from its task
    family's teacher, as a structured turn the loop renders in the policy's format. A request names its rollout
    (`Request.rollout_id`, "<task id>/<copy>"); the task is looked up here, so no engine request carries a task.
    `environment`: the run's, whose `teach` hook teaches its own families. `one_call_per_turn` (a template that renders
    one call per assistant turn, Llama 3.x's): a turn of several calls
    is given one call at a time, the rest queued for the rollout's next requests."""

    max_model_len = None

    def __init__(self, tasks: list[dict], one_call_per_turn: bool = False, environment: str | None = None):
        self.tasks = {t["id"]: t for t in tasks}
        self.one_call_per_turn = one_call_per_turn
        self.queued: dict[str, list[dict]] = {}
        # each family's teacher, looked up once: a family without one fails before any rollout; a user's
        # environment (`environment`, or the installed one that lists the family) teaches with its `teach` hook
        self.teachers = {f: registry.teacher(f, environment) for f in {t["task"]: None for t in tasks}}

    def generate(self, requests: list[Request]) -> list[Completion]:
        out = []
        for r in requests:
            turn = self.queued.get(r.rollout_id, [])
            if turn:
                message = turn.pop(0)
            else:
                task = self.tasks[r.rollout_id.rsplit("/", 1)[0]]
                message = self.teachers[task["task"]](task, r.messages, r.tools)
                message = message if isinstance(message, dict) else assistant_message(content=message)
                calls = message.get("tool_calls") or []
                if self.one_call_per_turn and len(calls) > 1:
                    self.queued[r.rollout_id] = [{**message, "content": "", "tool_calls": [c]} for c in calls[1:]]
                    message = {**message, "tool_calls": calls[:1]}
            out.append(Completion(text=message["content"], message=message))
        return out
