"""The MemTool environment (Lumer et al., 2025): the agent manages its own tool set over a session of requests.

The agent starts with no catalogue tool loaded. `search_tools(keywords)` loads the 5 best BM25 matches of each
keyword (tool descriptions), `remove_tools(tool_names)` unloads tools; the two management tools can never be
removed. At most `limit` catalogue tools can be loaded: a search that would load more is refused with
"Hit <limit> limit, remove tools." and changes nothing. The system prompt states how many tools are loaded.

Modes (who manages the tool set):
- autonomous: the agent holds search_tools and remove_tools;
- workflow: before each request, deterministic steps ask the model, in plain text and with no tool bound (as
  the paper's separate LLM calls), which loaded tools to remove ("prune") and which keywords to search for
  ("search"); the env applies the replies; the agent then holds only the loaded catalogue tools;
- hybrid: the prune step as in workflow; the agent holds search_tools.
The prune step is skipped while nothing is loaded. Every model call, workflow steps included, is an ordinary
step of the agent loop through the same engine, so workflow decisions are trained like any other completion.

A session maps onto the agent loop through `on_answer`: a completion without tool calls ends a step of the
request (a workflow reply) or answers it; the env then opens the next step or request and returns True, or
returns False after the last answer. The loop restarts the prompt from `render()` there, which lets the env
keep the dialogue short: it shows the system prompt, the last `history_turns` finished requests in full,
(optionally) a digest of up to `digest_turns` requests before those, and the request in progress. The digest
is extractive (each request's text and the reply given), not a model's summary.

Loaded tools change the tools block at the head of the prompt and the tool count in the system prompt, so
search_tools and remove_tools report `modified` when they change the set: Algorithm 1 starts a new sample there.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

from ..acm.schemas import ToolError, show
from ..memtool import sessions
from ..memtool.catalogue import QUARTERS, SEARCH_TOP_K, YEARS, catalogue
from ..memtool.metrics import session_reward
from ..toolcalls import ToolResult
from .base import Env

__all__ = ["MODES", "MANAGEMENT_TOOLS", "MEMTOOL_SYSTEM_PROMPT", "MemToolConfig", "MemToolEnv", "Turn", "PRUNE_STEP",
           "SEARCH_STEP"]

MEMTOOL_SYSTEM_PROMPT = "You answer a user's requests about companies' financial figures with tools from a catalogue."

MODES = ("autonomous", "workflow", "hybrid")

SEARCH_TOOLS = {"type": "function", "function": {
    "name": "search_tools",
    "description": f"Search the tool catalogue: each keyword loads its {SEARCH_TOP_K} best-matching tools into your "
                   "tool set. Use a company name and a metric, e.g. \"Bluegate Foods net income\".",
    "parameters": {"type": "object", "properties": {
        "keywords": {"type": "array", "items": {"type": "string"}}}, "required": ["keywords"]},
}}
REMOVE_TOOLS = {"type": "function", "function": {
    "name": "remove_tools",
    "description": "Remove tools you no longer need from your tool set (search_tools and remove_tools stay).",
    "parameters": {"type": "object", "properties": {
        "tool_names": {"type": "array", "items": {"type": "string"}}}, "required": ["tool_names"]},
}}
MANAGEMENT_TOOLS = ("search_tools", "remove_tools")
_HELD = {"autonomous": [SEARCH_TOOLS, REMOVE_TOOLS], "workflow": [], "hybrid": [SEARCH_TOOLS]}

_MODE_PROMPTS = {
    "autonomous": "Your tool set starts empty: search_tools loads catalogue tools, and remove_tools removes the "
                  "ones you no longer need.",
    "workflow": "Before each request, workflow steps ask you which loaded tools to remove and what to search for; "
                "then answer with the tools loaded.",
    "hybrid": "Before each request, a workflow step asks you which loaded tools to remove; search_tools loads "
              "catalogue tools.",
}
PRUNE_STEP = ("Workflow step (remove tools): reply with the names of the loaded tools this request does not need, "
              "separated by commas, or none. Loaded tools: {names}.")
SEARCH_STEP = ("Workflow step (search tools): reply with search keywords for the tools this request needs (a company "
               f"name and a metric each), separated by commas, or none. Each keyword loads its {SEARCH_TOP_K} "
               "best-matching tools. Loaded tools: {names}.")
ANSWER_STEP = "{outcome} Now answer the request: call your tools, then reply with the numbers."


@dataclass
class MemToolConfig:
    """The environment's parameters (`--environment-param K=V` on the command line)."""

    mode: str = "autonomous"  # autonomous | workflow | hybrid
    limit: int = 128  # catalogue tools that may be loaded at once
    history_turns: int = 2  # finished requests shown in full
    digest_turns: int = 0  # earlier requests shown as a one-line digest in the system prompt
    loaded_tools_penalty: float = 0.0  # reward: minus this × mean tools loaded per turn

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown memtool mode {self.mode!r}; choose one of {', '.join(MODES)}")
        for name, low in (("limit", 1), ("history_turns", 0), ("digest_turns", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.loaded_tools_penalty, (int, float)) or self.loaded_tools_penalty < 0:
            raise ValueError(f"loaded_tools_penalty must be a number >= 0, got {self.loaded_tools_penalty!r}")


@dataclass
class Turn:
    """What happened during one request (a turn of the session)."""

    added: int = 0  # catalogue tools loaded (by the agent or a workflow step)
    removed: int = 0
    loaded: int = 0  # catalogue tools loaded at the end of the turn (its answer, or the end of the rollout)
    calls: int = 0  # calls of anything but the management tools
    correct_calls: int = 0  # ... that are one of the request's calls, name and arguments
    breaches: int = 0  # searches refused for the limit
    completed: bool = False  # the reply holds every asked value


class MemToolEnv(Env):
    """One session of a `memtool` task record in one mode. Deterministic: no randomness at all."""

    name = "memtool"
    Params = MemToolConfig
    system_prompt = MEMTOOL_SYSTEM_PROMPT

    def __init__(self, task: dict, params: MemToolConfig | None = None, **kwargs):
        if task.get("task") != sessions.NAME:
            raise ValueError(f"the memtool env runs {sessions.NAME!r} tasks, got {task.get('task')!r}")
        super().__init__(task, params, **kwargs)
        self.mode, self.limit = self.params.mode, self.params.limit
        self.requests = task["meta"]["requests"]
        self.catalogue = catalogue()
        self.loaded: list[str] = []  # catalogue tool names, in the order they were loaded
        self.turns: list[Turn] = []
        self.replies: list[str] = []  # the answer to each request so far
        self.finished: list[list[dict]] = []  # the messages of each finished request
        self.current: list[dict] = []  # the messages of the request in progress
        self.phase = "agent"  # prune | search | agent | done
        self._open(0)

    @classmethod
    def conversation(cls, messages: list[dict], params: MemToolConfig | None = None, **kwargs) -> "MemToolEnv":
        """A session over a served conversation (`serve --environment memtool`): each user message is a request, the
        assistant message after it (if any) its reply, and the loop answers the last one; a leading system
        message follows the environment's. A server keeps no state between HTTP requests, so the tool set
        starts empty; the requests carry no expected calls, so nothing is scored."""
        system = [m for m in messages[:1] if m["role"] == "system"]
        turns: list[list] = []  # [request text, its reply or None]
        for m in messages:
            if m["role"] == "user":
                turns.append([m["content"], None])
            elif m["role"] == "assistant" and turns and turns[-1][1] is None:
                turns[-1][1] = m["content"]
        if not turns or turns[-1][1] is not None:
            raise ValueError("the conversation must end with a user message (the request to answer)")
        n = len(turns)
        env = cls({"id": "conversation", "task": sessions.NAME, "answer": [[] for _ in turns],
                   "messages": [*system, {"role": "user", "content": sessions.request_message(0, n, turns[0][0])}],
                   "meta": {"requests": [{"text": text, "calls": []} for text, _ in turns]}}, params, **kwargs)
        for i, (text, reply) in enumerate(turns[:-1]):  # earlier requests: shown as asked and answered
            env.current = [{"role": "user", "content": sessions.request_message(i, n, text)},
                           {"role": "assistant", "content": reply or ""}]
            env.replies.append(reply or "")
            env._open(i + 1)
        return env

    # ---- the Env interface ----

    @property
    def tools(self) -> list[dict]:
        if self.phase in ("prune", "search"):
            return []  # a workflow step is a plain-text call, like the paper's separate LLM calls
        return _HELD[self.mode] + [self.catalogue[n].schema for n in self.loaded]

    def render(self) -> list[dict]:
        window = self.finished[-self.params.history_turns:] if self.params.history_turns else []
        return [{"role": "system", "content": self._system()}, *(m for turn in window for m in turn), *self.current]

    def original(self) -> list[dict]:
        return self.render()  # messages are never rewritten in place; the history window is in render() itself

    def append(self, message: dict) -> None:
        self.current.append(message)

    def execute(self, name: str, arguments) -> ToolResult:
        try:
            if self.phase in ("prune", "search"):
                raise ToolError("this workflow step takes a reply in plain text, not a tool call.")
            held = {t["function"]["name"] for t in _HELD[self.mode]}
            if name in MANAGEMENT_TOOLS:
                if name not in held:
                    raise ToolError(f"{name} is not in your tool set in {self.mode} mode.")
                text, changed = (self._search if name == "search_tools" else self._remove)(_arguments(name, arguments))
                return ToolResult(text, True, modified=changed)
            turn = self.turns[-1]
            turn.calls += 1
            if name not in self.loaded:
                hint = " search_tools loads catalogue tools." if "search_tools" in held else ""
                raise ToolError(f"{show(name)} is not in your tool set.{hint}")
            year, quarter = _period(arguments)
            wanted = {"name": name, "arguments": {"year": year, **({"quarter": quarter} if quarter else {})}}
            turn.correct_calls += wanted in self.requests[len(self.turns) - 1]["calls"]
            return ToolResult(self.catalogue[name].result(year, quarter), True, False)
        except ToolError as e:
            return ToolResult(f"Error: {e}", False, False)

    def on_answer(self, text: str) -> bool:
        """A completion without tool calls: apply a workflow reply or take the request's answer; open what comes
        next. False when the session is over."""
        if self.phase == "prune":
            names = [n for n in dict.fromkeys(re.findall(r"[A-Za-z0-9_]+", text)) if n in self.loaded]
            outcome = self._remove(names)[0] if names else "No tools removed."
            self._next_step(outcome)
            return True
        if self.phase == "search":
            keywords = [k.strip(" \t\"'`.*-") for k in re.split(r"[,;\n]", re.sub(r"(?i)^\s*keywords:", "", text))]
            keywords = [k for k in keywords if k and k.lower() != "none"]
            try:
                outcome = self._search(keywords)[0] if keywords else "No search."
            except ToolError as e:
                outcome = f"Error: {e}"
            self._next_step(outcome)
            return True
        turn = self.turns[-1]
        self.replies.append(text)
        turn.completed = sessions.completed(self.task["answer"][len(self.replies) - 1], text)
        turn.loaded = len(self.loaded)
        if len(self.replies) == len(self.requests):
            self.phase = "done"
            return False
        self._open(len(self.replies))
        return True

    def score(self, answer: str | None) -> float:
        """Task completion: the fraction of the session's requests answered exactly (unreached ones count 0)."""
        return sessions.score(self.task, self.replies)

    def info(self) -> dict:
        """The session's record for `Trajectory.info`: what each turn loaded, removed, called and completed."""
        turns = [asdict(t) for t in self.turns]
        if self.phase != "done":
            turns[-1]["loaded"] = len(self.loaded)  # the rollout stopped inside this turn
        return {"env": "memtool", "mode": self.mode, "limit": self.limit, "turns": turns}

    def reward(self, traj) -> float:
        return session_reward(traj, self.reward_config, self.params.loaded_tools_penalty)

    # ---- management ----

    def _search(self, keywords: list[str]) -> tuple[str, bool]:
        """(result text, whether the tool set changed)."""
        found = list(dict.fromkeys(n for k in keywords for n in self.catalogue.search(k)))
        new = [n for n in found if n not in self.loaded]
        if not new:
            return ("No new tools: every match is already loaded." if found
                    else "No tools match these keywords: use a company name and a metric."), False
        if len(self.loaded) + len(new) > self.limit:
            self.turns[-1].breaches += 1
            raise ToolError(f"Hit {self.limit} limit, remove tools. {len(self.loaded)} tools are loaded and this "
                            f"search would load {len(new)} more.")
        self.loaded += new
        self.turns[-1].added += len(new)
        again = [n for n in found if n not in new]
        also = f" Already loaded: {', '.join(again)}." if again else ""
        return f"Loaded {len(new)} tools: {', '.join(new)}.{also} {len(self.loaded)} tools loaded.", True

    def _remove(self, names: list[str]) -> tuple[str, bool]:
        protected = [n for n in names if n in MANAGEMENT_TOOLS]
        if protected:
            raise ToolError(f"{', '.join(protected)} cannot be removed; nothing was removed.")
        absent = [n for n in names if n not in self.loaded]
        if absent:
            raise ToolError(f"not loaded: {', '.join(absent[:10])}; nothing was removed.")
        names = list(dict.fromkeys(names))
        self.loaded = [n for n in self.loaded if n not in names]
        self.turns[-1].removed += len(names)
        return f"Removed {len(names)} tools: {', '.join(names)}. {len(self.loaded)} tools loaded.", True

    # ---- the session ----

    def _system(self) -> str:
        parts = [self.messages[0]["content"], _MODE_PROMPTS[self.mode]]
        dropped = len(self.finished) - self.params.history_turns
        if self.params.digest_turns and dropped > 0:
            first = max(0, dropped - self.params.digest_turns)
            lines = [f"- {sessions.request_message(i, len(self.requests), self.requests[i]['text'])} "
                     f"You replied: {' '.join(self.replies[i].split())[:200]}" for i in range(first, dropped)]
            parts.append("Earlier requests (digest):\n" + "\n".join(lines))
        parts.append(f"You have {len(self.loaded)} tools loaded (limit {self.limit}).")
        return "\n\n".join(parts)

    def _open(self, index: int) -> None:
        """Start request `index`: its turn record and its first message (with the first workflow step)."""
        if self.current:
            self.finished.append(self.current)
        self.current = []
        self.turns.append(Turn())
        text = sessions.request_message(index, len(self.requests), self.requests[index]["text"])
        if self.mode != "autonomous" and self.loaded:
            self.phase = "prune"
            text += "\n\n" + PRUNE_STEP.format(names=", ".join(self.loaded))
        elif self.mode == "workflow":
            self.phase = "search"
            text += "\n\n" + SEARCH_STEP.format(names=", ".join(self.loaded) or "none")
        else:
            self.phase = "agent"
        self.current.append({"role": "user", "content": text})

    def _next_step(self, outcome: str) -> None:
        if self.phase == "prune" and self.mode == "workflow":
            self.phase = "search"
            text = f"{outcome}\n\n" + SEARCH_STEP.format(names=", ".join(self.loaded) or "none")
        else:
            self.phase, text = "agent", ANSWER_STEP.format(outcome=outcome)
        self.current.append({"role": "user", "content": text})


def _object(arguments) -> dict:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            raise ToolError("arguments are not valid JSON; pass one JSON object.") from None
    if not isinstance(arguments, dict):
        raise ToolError(f"arguments must be a JSON object, not {show(arguments)}.")
    return arguments


def _arguments(name: str, arguments) -> list[str]:
    """The one list-of-strings argument of a management tool."""
    key = "keywords" if name == "search_tools" else "tool_names"
    arguments = _object(arguments)
    unknown = [k for k in arguments if k != key]
    if unknown:
        raise ToolError(f"unknown argument {show(unknown[0])}. Usage: {name}({key}: array of strings).")
    value = arguments.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ToolError(f'"{key}" must be a non-empty array of non-empty strings, not {show(value)}.')
    return value


def _period(arguments) -> tuple[int, int | None]:
    arguments = _object(arguments)
    unknown = [k for k in arguments if k not in ("year", "quarter")]
    if unknown:
        raise ToolError(f"unknown argument {show(unknown[0])}. Usage: (year: integer, quarter: integer 1..4 optional).")
    year, quarter = arguments.get("year"), arguments.get("quarter")
    if not isinstance(year, int) or isinstance(year, bool) or year not in YEARS:
        raise ToolError(f'"year" must be an integer from {YEARS[0]} to {YEARS[-1]}, not {show(year)}.')
    if quarter is not None and (not isinstance(quarter, int) or isinstance(quarter, bool) or quarter not in QUARTERS):
        raise ToolError(f'"quarter" must be an integer from 1 to 4 (or left out), not {show(quarter)}.')
    return year, quarter
