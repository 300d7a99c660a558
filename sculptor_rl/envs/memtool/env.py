"""The MemTool environment (Lumer et al., 2025): the agent manages its own tool set over a session of requests.

The agent starts with no catalogue tool loaded. `Search_Tools(keywords)` loads the 5 best BM25 matches of each
keyword (tool descriptions), `Remove_Tools(tool_names)` unloads tools (the paper's names; no lower-case alias:
one name per idea). The system prompt states the tool count (as the paper's Fig. 5 does). Requests follow one
another through `on_answer` (below); everything runs through the policy's engine unless an endpoint is named.

Modes (who manages the tool set), Algorithms 1-3:
- autonomous: the agent holds Search_Tools and Remove_Tools;
- workflow: before each request, deterministic steps ask the model, in plain text and with no tool bound (as
  the paper's separate LLM calls, Figs. 6-7), which loaded tools to remove ("prune") and which keywords to search
  for ("search"); the env applies the replies; the agent then holds only the loaded catalogue tools;
- hybrid: the prune step as in workflow; the agent holds Search_Tools.
The first prune step is skipped while nothing is loaded. Every model call, workflow steps included, is an
ordinary step of the agent loop through the same engine, so workflow decisions are trained like any completion.

Where the paper and an earlier choice of ours differ, both are parameters; the paper's is the default:
- `limit_rule`: `add` (paper): a search adds what it found, T <- T ∪ S, and then, if |T| > limit, autonomous
  mode answers "Error: Hit <limit> limit, remove tools." (the tools stay: the count can pass the limit; the
  error counts as a limit breach), while workflow and hybrid run the re-prune loop `while |T| > L: R <- LLM_prune`
  (a prune step again, until |T| <= limit; in hybrid mode its prompt comes in the Search_Tools result; a prune
  reply naming no loaded tool is the paper's Raise Error("T > L"):
  the request fails with that error and counts a breach). `refuse` (ours): a search that would pass the limit is
  refused and loads nothing (a breach).
- `count_management`: True (paper): |T| counts the management tools the mode holds (2 autonomous, 1 hybrid,
  0 workflow); False: only catalogue tools.
- `remove_rule`: `ignore` (paper): T <- T \\ (R \\ {Search_Tools, Remove_Tools}); names not loaded (and the
  management tools) are ignored and reported. `strict` (ours): such a name fails the whole call.
- `history` (the history manager H, applied as each request opens): `truncate` (TRUNCATEHISTORY; the default):
  the last `history_turns` finished requests are shown in full, earlier ones dropped; `summarize`
  (SUMMARIZEHISTORY): requests leaving that window are folded into a running LLM summary in the system prompt,
  written by the policy itself in a "History step (summarize)" step of the loop (trained like the workflow
  steps), or by an OpenAI-compatible endpoint (`summary_url`, `summary_model`); `digest` (ours, offline): the
  last `digest_turns` dropped requests as an extractive one-line digest each (request and reply, no model).
- a prompt over the model's window (the loop's `max_context_tokens`, through `on_cap`): with truncate or digest,
  the oldest request still shown leaves the window (H again: the paper truncates "in case the LLM agent used too
  many tokens in the previous query"); when none is left, or with summarize, the request fails (no reply, a
  `capped` turn) and the next one opens, as after a request that makes more than the loop's `max_tool_calls`
  (a cap per request here). Without this a small model's session would end at its first overflow, and every
  later request would count 0. The RL reward of a session with a capped request is the cap penalty.
- task completion (the paper: an LLM judge): the exact check (every asked value in the reply) is the default,
  offline; `judge_url` + `judge_model` add an LLM judge through any OpenAI-compatible endpoint (the paper used
  GPT-4o mini), scoring each reply's alignment with the expected values 0-10 (`Turn.judged`, in [0, 1]; the
  metrics use it for task completion; the RL reward keeps the exact score). An endpoint's key: $OPENAI_API_KEY.

A session maps onto the agent loop through `on_answer`: a completion without tool calls ends a step of the
request (a workflow or history reply) or answers it; the env then opens the next step or request and returns
True, or False after the last answer. The loop restarts the prompt from `render()` there, which lets the env
keep the dialogue short: it shows the system prompt, the finished requests in the history window and the
request in progress.

Loaded tools change the tools block at the head of the prompt and the tool count in the system prompt, so
Search_Tools and Remove_Tools report `modified` when they change the set: Algorithm 1 starts a new sample there.
"""

from __future__ import annotations

import re
from pathlib import Path
from dataclasses import asdict, dataclass
from functools import lru_cache

from ...acm.schemas import ToolError, show
from . import metrics, sessions
from .catalogue import QUARTERS, SEARCH_TOP_K, YEARS, catalogue
from .metrics import session_reward
from ...toolcalls import ToolResult, json_object
from ..base import Env
from ..llm import endpoint_llm

__all__ = ["MODES", "MANAGEMENT_TOOLS", "MEMTOOL_SYSTEM_PROMPT", "MemToolParams", "MemToolEnv", "Turn", "PRUNE_STEP",
           "REPRUNE_STEP", "SEARCH_STEP", "SUMMARY_STEP", "SEARCH", "REMOVE", "ask_endpoint", "judge_score"]

MEMTOOL_SYSTEM_PROMPT = "You answer a user's requests about companies' financial figures with tools from a catalogue."

MODES = ("autonomous", "workflow", "hybrid")
SEARCH, REMOVE = "Search_Tools", "Remove_Tools"
MANAGEMENT_TOOLS = (SEARCH, REMOVE)

SEARCH_TOOLS = {"type": "function", "function": {
    "name": SEARCH,
    "description": f"Search the tool catalogue: each keyword loads its {SEARCH_TOP_K} best-matching tools into your "
                   "tool set. Use a company name and a metric, e.g. \"Bluegate Foods net income\".",
    "parameters": {"type": "object", "properties": {
        "keywords": {"type": "array", "items": {"type": "string"}}}, "required": ["keywords"]},
}}
REMOVE_TOOLS = {"type": "function", "function": {
    "name": REMOVE,
    "description": f"Remove tools you no longer need from your tool set ({SEARCH} and {REMOVE} stay).",
    "parameters": {"type": "object", "properties": {
        "tool_names": {"type": "array", "items": {"type": "string"}}}, "required": ["tool_names"]},
}}
_HELD = {"autonomous": [SEARCH_TOOLS, REMOVE_TOOLS], "workflow": [], "hybrid": [SEARCH_TOOLS]}

_MODE_PROMPTS = {
    "autonomous": f"Your tool set starts empty: {SEARCH} loads catalogue tools, and {REMOVE} removes the "
                  "ones you no longer need.",
    "workflow": "Before each request, workflow steps ask you which loaded tools to remove and what to search for; "
                "then answer with the tools loaded.",
    "hybrid": f"Before each request, a workflow step asks you which loaded tools to remove; {SEARCH} loads "
              "catalogue tools.",
}
PRUNE_STEP = ("Workflow step (remove tools): reply with the names of the loaded tools this request does not need, "
              "separated by commas, or none. Loaded tools: {names}.")
REPRUNE_STEP = ("Workflow step (remove tools): the tool count {count} is over the limit {limit}. Reply with the "
                "names of the loaded tools to remove, separated by commas. Loaded tools: {names}.")
SEARCH_STEP = ("Workflow step (search tools): reply with search keywords for the tools this request needs (a company "
               f"name and a metric each), separated by commas, or none. Each keyword loads its {SEARCH_TOP_K} "
               "best-matching tools. Loaded tools: {names}.")
SUMMARY_STEP = ("History step (summarize): the oldest requests shown here now leave your context. Reply with a short "
                "summary of the conversation so far (the earlier summary and those requests): what was asked and the "
                "values found.")
ANSWER_STEP = "{outcome} Now answer the request: call your tools, then reply with the numbers."
_SUMMARIZER = ("Summarize this conversation between a user and a financial assistant in a few lines: what was asked "
               "and the values found. Keep every number exactly.")
_JUDGE = ("You grade an assistant's reply to a task against the expected answer. Reply with one integer from 0 (not "
          "aligned) to 10 (fully aligned: every expected value given), and nothing else.")
_PLAIN_PHASES = ("summarize", "prune", "reprune", "search")  # steps that take a reply in plain text


@dataclass
class MemToolParams:
    """The environment's parameters (`--environment-param K=V` on the command line); see the module docstring."""

    mode: str = "autonomous"  # autonomous | workflow | hybrid
    limit: int = 128  # L: tools that may be held at once
    limit_rule: str = "add"  # add (paper: add, then the limit error / the re-prune loop) | refuse
    count_management: bool = True  # |T| counts the management tools the mode holds (paper)
    remove_rule: str = "ignore"  # ignore (paper: names not loaded are ignored) | strict
    history: str = "truncate"  # truncate | summarize | digest: the history manager H
    history_turns: int = 2  # finished requests shown in full
    digest_turns: int = 8  # history=digest: dropped requests shown as a one-line digest each
    summary_url: str | None = None  # history=summarize: an OpenAI-compatible endpoint writes the summary ...
    summary_model: str | None = None  # ... with this model (without a url: the policy writes it)
    judge_url: str | None = None  # an OpenAI-compatible endpoint judging task completion ...
    judge_model: str | None = None  # ... with this model (without a url: the exact check only)
    loaded_tools_penalty: float = 0.0  # reward: minus this × mean tools loaded per turn

    def __post_init__(self):
        for name, allowed in (("mode", MODES), ("limit_rule", ("add", "refuse")), ("remove_rule", ("ignore", "strict")),
                              ("history", ("truncate", "summarize", "digest"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"unknown memtool {name} {getattr(self, name)!r}; choose one of {', '.join(allowed)}")
        for name, low in (("limit", 1), ("history_turns", 0), ("digest_turns", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.count_management, bool):
            raise ValueError(f"count_management must be true or false, got {self.count_management!r}")
        if not isinstance(self.loaded_tools_penalty, (int, float)) or self.loaded_tools_penalty < 0:
            raise ValueError(f"loaded_tools_penalty must be a number >= 0, got {self.loaded_tools_penalty!r}")
        for what in ("summary", "judge"):
            url, model = getattr(self, f"{what}_url"), getattr(self, f"{what}_model")
            if (url is None) != (model is None):
                raise ValueError(f"{what}_url and {what}_model go together (an endpoint and its model)")
        if self.summary_url is not None and self.history != "summarize":
            raise ValueError("summary_url is for history=summarize")


@dataclass
class Turn:
    """What happened during one request (a turn of the session)."""

    added: int = 0  # catalogue tools loaded (by the agent or a workflow step)
    removed: int = 0
    loaded: int = 0  # catalogue tools loaded at the end of the turn (its answer, or the end of the rollout)
    calls: int = 0  # calls of anything but the management tools
    correct_calls: int = 0  # ... that are one of the request's calls, name and arguments
    expected: int = 0  # distinct tools the request needs
    expected_called: int = 0  # ... of which were called (and ran): DeepEval's tool correctness
    breaches: int = 0  # limit errors: a search refused (refuse), over the limit (add, autonomous), a failed re-prune
    completed: bool = False  # the reply holds every asked value
    capped: str | None = None  # the loop's cap that failed the request: max_tool_calls | max_context_tokens
    judged: float | None = None  # the LLM judge's alignment score in [0, 1] (with judge_url)


_endpoint = lru_cache(maxsize=8)(endpoint_llm)  # one client per endpoint, not one per judged request


def ask_endpoint(url: str, model: str, messages: list[dict], max_tokens: int = 256) -> str:
    """One chat completion from an OpenAI-compatible endpoint (greedy), through the LLM seam (`envs.llm`)."""
    (reply,) = _endpoint(url, model).ask([messages], max_new_tokens=max_tokens, tag="memtool")
    return reply


def judge_score(text: str) -> float:
    """The judge's reply as a score in [0, 1]: its first number out of 10 (clipped); 0 when it gives none."""
    found = re.search(r"\d+(?:\.\d+)?", text)
    return min(10.0, float(found[0])) / 10 if found else 0.0


class MemToolEnv(Env):
    """One session of a `memtool` task record in one mode. Deterministic unless a judge or summary endpoint samples."""

    name = "memtool"
    Params = MemToolParams
    system_prompt = MEMTOOL_SYSTEM_PROMPT
    task_families = (sessions.NAME,)

    @classmethod
    def eval_modes(cls) -> dict[str, tuple[str, dict]]:
        return {mode: (cls.name, {"mode": mode}) for mode in MODES}

    @classmethod
    def summarize(cls, trajs: list, mode: str) -> dict:
        """The paper's tool-management metrics (`memtool.metrics.summarize`; NaN as None, for plain JSON) and
        the mean tools loaded at the end of each turn."""
        paper = metrics.summarize(trajs)[mode]
        paper = {k: None if isinstance(v, float) and v != v else v for k, v in paper.items()}
        return {**paper, "loaded_per_turn": metrics.loaded_per_turn(trajs)}

    @classmethod
    def report(cls, results: dict, out=None) -> list[str]:
        """The paper's Table 2 per model × mode, and the loaded-tools curves (`loaded_tools.png`)."""
        runs = [run for run in results["runs"] if run.get(cls.name)]
        if out is not None and runs:
            label = (lambda run: run["mode"]) if len(results["models"]) == 1 else \
                (lambda run: f"{run['model']} · {run['mode']}")
            metrics.plot_loaded_curves({label(run): run[cls.name]["loaded_per_turn"] for run in runs},
                                       Path(out) / "loaded_tools.png")
        return ["## MemTool: tool-management metrics", metrics.report_table(runs, cls.name),
                "As the MemTool paper's Table 2 (eq. 2-5), pooled over sessions: avg. removal ratio 3T, the mean "
                "over every 3-turn window of ΣR/ΣA (tools removed / added; a window adding nothing counts 0); avg. "
                "residual 3T, the mean tools loaded in the 3 turns after each peak of the loaded-tools curve; tool "
                "correctness, per request the share of its expected tools called; task completion, per request the "
                "exact check (or the LLM judge's score, with judge_url). In brackets: 95 % intervals over windows, "
                "peaks and requests (not independent: a lower bound on the uncertainty). Removal ratio: ΣR/ΣA over "
                "the session (eq. 1). Limit breaches, capped requests (failed by the loop's max_tool_calls or "
                "max_context_tokens, the session going on) and format errors: totals over the sessions; tool calls "
                "(management tools included): per session; – : nothing to divide. Plot: loaded_tools.png."]

    def __init__(self, task: dict, params: MemToolParams | None = None, **kwargs):
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
        self.summary = ""  # history=summarize: the running summary of the requests that left the window
        self.summarized = 0  # ... of finished[:summarized]
        self.hidden = 0  # finished[:hidden] are not shown in full: a prompt over the window dropped them (on_cap)
        self._called: set[str] = set()  # catalogue tools that ran during the request in progress
        self.phase = "agent"  # summarize | prune | search | reprune | agent | done
        self._open(0)

    @classmethod
    def conversation(cls, messages: list[dict], params: MemToolParams | None = None, **kwargs) -> "MemToolEnv":
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
        if self.phase in _PLAIN_PHASES:
            return []  # a workflow or history step is a plain-text call, like the paper's separate LLM calls
        return _HELD[self.mode] + [self.catalogue[n].schema for n in self.loaded]

    def render(self) -> list[dict]:
        if self.params.history == "summarize":
            window = self.finished[self.summarized:]  # a summary step still shows the requests it folds in
        else:
            window = self.finished[self._shown_from():]
        return [{"role": "system", "content": self._system()}, *(m for turn in window for m in turn), *self.current]

    def original(self) -> list[dict]:
        return self.render()  # messages are never rewritten in place; the history window is in render() itself

    def append(self, message: dict) -> None:
        self.current.append(message)

    def execute(self, name: str, arguments) -> ToolResult:
        try:
            if self.phase in _PLAIN_PHASES:
                raise ToolError("this step takes a reply in plain text, not a tool call.")
            held = {t["function"]["name"] for t in _HELD[self.mode]}
            if name in MANAGEMENT_TOOLS:
                if name not in held:
                    raise ToolError(f"{name} is not in your tool set in {self.mode} mode.")
                if name == REMOVE:
                    text, changed = self._remove(_arguments(name, arguments))
                    return ToolResult(text, True, changed)
                return self._search_call(_arguments(name, arguments))
            turn = self.turns[-1]
            turn.calls += 1
            if name not in self.loaded:
                hint = f" {SEARCH} loads catalogue tools." if SEARCH in held else ""
                raise ToolError(f"{show(name)} is not in your tool set.{hint}")
            year, quarter = _period(arguments)
            request = self.requests[len(self.turns) - 1]
            wanted = {"name": name, "arguments": {"year": year, **({"quarter": quarter} if quarter else {})}}
            turn.correct_calls += wanted in request["calls"]
            if name not in self._called and any(c["name"] == name for c in request["calls"]):
                turn.expected_called += 1
            self._called.add(name)
            return ToolResult(self.catalogue[name].result(year, quarter), True, False)
        except ToolError as e:
            return ToolResult(f"Error: {e}", False, False)

    def on_answer(self, text: str) -> bool:
        """A completion without tool calls: apply a history or workflow reply, or take the request's answer; open
        what comes next. False when the session is over."""
        if self.phase == "summarize":
            self.summary, self.summarized = text.strip(), self._leaving()
            self.current = []
            self._start(len(self.replies))
            return True
        if self.phase in ("prune", "reprune"):
            names = [n for n in dict.fromkeys(re.findall(r"[A-Za-z0-9_]+", text)) if n in self.loaded]
            if self.phase == "reprune" and not names:  # the paper's Raise Error("T > L"): the request fails
                self.turns[-1].breaches += 1
                return self._answered(f"Error: the tool count {self._count()} is over the limit {self.limit}.",
                                      judge=False)
            outcome = self._remove(names)[0] if names else "No tools removed."
            if self.phase == "reprune" and self._count() > self.limit:
                self._step(outcome, REPRUNE_STEP)
            elif self.phase == "prune" and self.mode == "workflow":
                self.phase = "search"
                self._step(outcome, SEARCH_STEP)
            else:
                self._step(outcome, None)
            return True
        if self.phase == "search":
            keywords = [k.strip(" \t\"'`.*-") for k in re.split(r"[,;\n]", re.sub(r"(?i)^\s*keywords:", "", text))]
            keywords = [k for k in keywords if k and k.lower() != "none"]
            try:
                outcome = self._search(keywords)[0] if keywords else "No search."
            except ToolError as e:
                outcome = f"Error: {e}"
            if self._count() > self.limit:
                self.phase = "reprune"
                self._step(outcome, REPRUNE_STEP)
            else:
                self._step(outcome, None)
            return True
        return self._answered(text, judge=True)

    def on_cap(self, reason: str) -> bool:
        """A prompt over the window drops the oldest request shown (truncate, digest); otherwise the request fails
        and the next one opens (False after the last). See the module docstring."""
        if (reason == "max_context_tokens" and self.params.history != "summarize"
                and self._shown_from() < len(self.finished)):
            self.hidden = self._shown_from() + 1
            return True
        self.turns[-1].capped = reason
        return self._answered("", judge=False)

    def score(self, answer: str | None) -> float:
        """Task completion: the fraction of the session's requests answered exactly (unreached ones count 0)."""
        return sessions.score(self.task, self.replies)

    def info(self) -> dict:
        """The session's record for `Trajectory.info`: what each turn loaded, removed, called and completed."""
        turns = [asdict(t) for t in self.turns]
        if self.phase != "done":
            turns[-1]["loaded"] = len(self.loaded)  # the rollout stopped inside this turn
        return {"env": "memtool", "mode": self.mode, "limit": self.limit, "requests": len(self.requests),
                "turns": turns}

    def reward(self, traj) -> float:
        return session_reward(traj, self.reward_config, self.params.loaded_tools_penalty)

    # ---- management ----

    def _count(self) -> int:
        """|T|: the tools held, the mode's management tools included when `count_management` (the paper)."""
        return len(self.loaded) + (len(_HELD[self.mode]) if self.params.count_management else 0)

    def _search(self, keywords: list[str]) -> tuple[str, bool]:
        """T <- T ∪ S (`refuse`: only if that stays within the limit); (result text, whether T changed)."""
        found = list(dict.fromkeys(n for k in keywords for n in self.catalogue.search(k)))
        new = [n for n in found if n not in self.loaded]
        if not new:
            return ("No new tools: every match is already loaded." if found
                    else "No tools match these keywords: use a company name and a metric."), False
        if self.params.limit_rule == "refuse" and self._count() + len(new) > self.limit:
            self.turns[-1].breaches += 1
            raise ToolError(f"Hit {self.limit} limit, remove tools. The tool count is {self._count()} and this "
                            f"search would add {len(new)} more.")
        self.loaded += new
        self.turns[-1].added += len(new)
        again = [n for n in found if n not in new]
        also = f" Already loaded: {', '.join(again)}." if again else ""
        return f"{len(new)} tools added: {', '.join(new)}.{also} Tool count: {self._count()}.", True

    def _search_call(self, keywords: list[str]) -> ToolResult:
        """Search_Tools called by the agent; over the limit, autonomous mode gets the paper's error (the tools
        stay added), hybrid mode the re-prune loop."""
        text, changed = self._search(keywords)
        if self._count() <= self.limit:
            return ToolResult(text, True, changed)
        if self.mode == "autonomous":
            self.turns[-1].breaches += 1
            return ToolResult(f"Error: Hit {self.limit} limit, remove tools. {text}", False, changed)
        self.phase = "reprune"
        return ToolResult(f"{text}\n\n{self._prompt(REPRUNE_STEP)}", True, changed)

    def _remove(self, names: list[str]) -> tuple[str, bool]:
        """T <- T \\ (R \\ management tools); `strict`: a name not loaded (or a management tool) fails the call."""
        names = list(dict.fromkeys(names))
        ignored = [n for n in names if n not in self.loaded]
        if self.params.remove_rule == "strict" and ignored:
            protected = [n for n in ignored if n in MANAGEMENT_TOOLS]
            raise ToolError(f"{', '.join(protected)} cannot be removed; nothing was removed." if protected
                            else f"not loaded: {', '.join(ignored[:10])}; nothing was removed.")
        removed = [n for n in names if n in self.loaded]
        self.loaded = [n for n in self.loaded if n not in removed]
        self.turns[-1].removed += len(removed)
        skipped = f" Ignored (not loaded or not removable): {', '.join(ignored[:10])}." if ignored else ""
        return f"{len(removed)} tools removed: {', '.join(removed) or 'none'}.{skipped} Tool count: {self._count()}.", \
            bool(removed)

    # ---- the session ----

    def _system(self) -> str:
        parts = [self.messages[0]["content"], _MODE_PROMPTS[self.mode]]
        dropped = self._shown_from()
        if self.params.history == "digest" and dropped > 0:
            first = max(0, dropped - self.params.digest_turns)
            lines = [f"- {sessions.request_message(i, len(self.requests), self.requests[i]['text'])} "
                     f"You replied: {' '.join(self.replies[i].split())[:200]}" for i in range(first, dropped)]
            parts.append("Earlier requests (digest):\n" + "\n".join(lines))
        if self.params.history == "summarize" and self.summary:
            parts.append("Summary of earlier requests:\n" + self.summary)
        parts.append(f"Tool count: {self._count()} (limit {self.limit}; {len(self.loaded)} loaded from the catalogue).")
        return "\n\n".join(parts)

    def _shown_from(self) -> int:
        """truncate, digest: the first finished request shown in full."""
        return max(self.hidden, self._leaving())

    def _leaving(self) -> int:
        """How many finished requests lie before the history window."""
        return max(0, len(self.finished) - self.params.history_turns)

    def _open(self, index: int) -> None:
        """Start request `index`: its turn record, then the history step (H = summarize, when requests leave the
        window) or the request's first message."""
        if self.current:
            self.finished.append(self.current)
        self.current = []
        self.turns.append(Turn(expected=len({c["name"] for c in self.requests[index]["calls"]})))
        self._called = set()
        if self.params.history == "summarize" and self._leaving() > self.summarized:
            if self.params.summary_url is None:  # the policy summarizes, as a step of the loop
                self.phase = "summarize"
                self.current.append({"role": "user", "content": SUMMARY_STEP})
                return
            self.summary, self.summarized = self._endpoint_summary(), self._leaving()
        self._start(index)

    def _endpoint_summary(self) -> str:
        lines = [f"Earlier summary: {self.summary}"] if self.summary else []
        lines += [f"{m['role']}: {m['content']}" for turn in self.finished[self.summarized:self._leaving()]
                  for m in turn]
        return ask_endpoint(self.params.summary_url, self.params.summary_model,
                            [{"role": "system", "content": _SUMMARIZER}, {"role": "user", "content": "\n".join(lines)}])

    def _start(self, index: int) -> None:
        """The request's first message, with its first workflow step."""
        text = sessions.request_message(index, len(self.requests), self.requests[index]["text"])
        if self.mode != "autonomous" and self.loaded:
            self.phase = "prune"
            text += "\n\n" + self._prompt(PRUNE_STEP)
        elif self.mode == "workflow":
            self.phase = "search"
            text += "\n\n" + self._prompt(SEARCH_STEP)
        else:
            self.phase = "agent"
        self.current.append({"role": "user", "content": text})

    def _prompt(self, step: str) -> str:
        return step.format(names=", ".join(self.loaded) or "none", count=self._count(), limit=self.limit)

    def _step(self, outcome: str, step: str | None) -> None:
        """The next user turn of the request: another step, or (None) the agent's turn to answer."""
        if step is None:
            self.phase, text = "agent", ANSWER_STEP.format(outcome=outcome)
        else:
            text = f"{outcome}\n\n{self._prompt(step)}"
        self.current.append({"role": "user", "content": text})

    def _answered(self, reply: str, judge: bool) -> bool:
        """The request's reply (or its error): score it, open the next request; False after the last."""
        k, turn = len(self.replies), self.turns[-1]
        self.replies.append(reply)
        turn.completed = sessions.completed(self.task["answer"][k], reply)
        if self.params.judge_url is not None:
            turn.judged = self._judge(k, reply) if judge else 0.0
        turn.loaded = len(self.loaded)
        if len(self.replies) == len(self.requests):
            self.phase = "done"
            return False
        self._open(len(self.replies))
        return True

    def _judge(self, k: int, reply: str) -> float:
        """eq. 4: Alignment(Task, Output), by the judge endpoint."""
        task = (f"Task: {self.requests[k]['text']}\nExpected answer: {', '.join(self.task['answer'][k])}\n"
                f"Output: {reply}")
        return judge_score(ask_endpoint(self.params.judge_url, self.params.judge_model,
                                        [{"role": "system", "content": _JUDGE}, {"role": "user", "content": task}],
                                        max_tokens=8))


def _object(arguments) -> dict:
    try:
        return json_object(arguments)
    except ValueError as e:
        raise ToolError(str(e)) from None


def _arguments(name: str, arguments) -> list[str]:
    """The one list-of-strings argument of a management tool."""
    key = "keywords" if name == SEARCH else "tool_names"
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
