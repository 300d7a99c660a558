"""The MemToolAgent environment (Er et al., 2026): WorkBench-style tool use with a memory of past episodes.

Two task families, both scored by an outcome (1 or 0; the reward is design eq. 4 on it):
- `workbench`: the agent holds the 27 sandbox tools (`workbench.sandbox`) over the task's own copy of the
  databases; the outcome is right when the databases end exactly as the gold calls leave them;
- `nestful`: the agent holds four math functions and calls them one at a time, the k-th successful call labelled
  `$var_k` and `"$var_k.result$"` standing for its result (`workbench.nestful`); the outcome is right when the
  last result is the gold answer (NESTFUL's win). Its system prompt is the paper's Figure 18, adapted to calls.
The episode ends at a completion without tool calls.

The memory (`sculptor_rl.memory`) lives across episodes and reaches the env through its parameters: `memory`, a
JSONL store (entries m = (query, calls, feedback, reflection)), read as an immutable snapshot, so every rollout
of a GRPO group sees the same one. Entries similar to the task's query (BM25 over the stored queries) are chosen
by `retrieval` (none | topk | dynamic: the paper's Dynamic "n", Algorithm 1) and shown in the system prompt as
the paper's Figure 10 does. `reflections: false` shows failed entries without their reflection (the ablation
"w/o memory extractor"). Nothing the agent does in an episode changes the memory: a driver
(`sculptor_rl.crossepisode`, `sculptor-rl memory build`) adds entries between rounds.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ..memory import check_entry, load_snapshot, render_entries
from ..memory.retrieval import RETRIEVALS, bm25_scores, select
from ..memory.store import thaw
from ..toolcalls import ToolResult
from ..workbench import metrics, nestful, sandbox
from ..workbench import tasks as workbench_tasks
from .base import Env, with_system

__all__ = ["MEMTOOLAGENT_SYSTEM_PROMPT", "MEMORY_PROMPT", "MemToolAgentEnv", "MemToolAgentParams"]

# the paper's Figure 10, with one line on how an episode ends (the loop's contract)
MEMTOOLAGENT_SYSTEM_PROMPT = (
    "Today's date is Thursday, 2023-11-30 and the current time is 00:00:00. Remember the current date and time "
    "when answering queries. Meetings must not start before 9am or end after 6pm.\n"
    "Use the tools to do what the user asks, then reply briefly without a tool call.")
NESTFUL_SYSTEM_PROMPT = (
    "You are a helpful assistant with access to function calls. Your task is to produce the sequence of function "
    "calls necessary to answer the user utterance, one call at a time. The result of your k-th call is $var_k: "
    "pass \"$var_k.result$\" as an argument to use it. When the last call gives the answer, reply with it.")
MEMORY_PROMPT = (
    "Here are similar queries, their executions, and user feedback:\n{memories}\n"
    "For each query where user feedback indicates incorrect execution, reflect on what went wrong and use these "
    "insights to avoid similar mistakes. Consider these examples when solving the current task.")


@dataclass
class MemToolAgentParams:
    """The environment's parameters (`--environment-param K=V`)."""

    memory: str = ""  # a JSONL memory store; "" = no memory
    retrieval: str = "dynamic"  # none | topk | dynamic
    k: int = 5  # topk's k, and dynamic's fallback
    radius: int = 10  # Dynamic "n": R of the derivative estimate
    prominence: float = 1e-5  # ... find_peaks' prominence
    peak: int = 0  # ... which peak (0: the first)
    reflections: bool = True  # show failed entries' reflections
    toolset: str = "all"  # workbench: all 27 tools, or "domain": the task's domain's and the directory (shorter)

    def __post_init__(self):
        if self.retrieval not in RETRIEVALS:
            raise ValueError(f"unknown retrieval {self.retrieval!r}; choose one of {', '.join(RETRIEVALS)}")
        for name, low in (("k", 1), ("radius", 1), ("peak", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.prominence, (int, float)) or self.prominence < 0:
            raise ValueError(f"prominence must be a number >= 0, got {self.prominence!r}")
        if self.toolset not in ("all", "domain"):
            raise ValueError(f"toolset is all or domain, got {self.toolset!r}")
        if not isinstance(self.reflections, bool):
            raise ValueError(f"reflections must be true or false, got {self.reflections!r}")


def retrieve(query: str, params: MemToolAgentParams) -> list[dict]:
    """The memory entries shown for `query` (best first; an entry sharing no word with it is never shown),
    reflections dropped when `params.reflections` is off."""
    if not params.memory or params.retrieval == "none":
        return []
    if not os.path.isfile(params.memory):
        raise ValueError(f"memory file {params.memory} does not exist (build one with `sculptor-rl memory build`)")
    entries = load_snapshot(params.memory, check_entry).entries
    scores = bm25_scores(query, [e["query"] for e in entries])
    chosen = [thaw(entries[i]) for i in select(scores, params.retrieval, params.k, params.radius,
                                                 params.prominence, params.peak) if scores[i] > 0]
    if not params.reflections:
        chosen = [{**e, "reflection": None} for e in chosen]
    return chosen


class MemToolAgentEnv(Env):
    name = "memtoolagent"
    Params = MemToolAgentParams
    system_prompt = MEMTOOLAGENT_SYSTEM_PROMPT
    tools = sandbox.tool_schemas()
    task_families = (workbench_tasks.NAME, nestful.NAME)

    @classmethod
    def eval_modes(cls) -> dict[str, tuple[str, dict]]:
        """The paper's ablations (§4.3): no memory, fixed top-k, Dynamic "n", each memory mode without
        reflections. The memory file comes from the user's `environment_params` (memory: PATH)."""
        return {"no_memory": (cls.name, {"retrieval": "none"}),
                "topk": (cls.name, {"retrieval": "topk"}),
                "dynamic": (cls.name, {"retrieval": "dynamic"}),
                "topk_no_reflections": (cls.name, {"retrieval": "topk", "reflections": False}),
                "dynamic_no_reflections": (cls.name, {"retrieval": "dynamic", "reflections": False})}

    @classmethod
    def summarize(cls, trajs: list, mode: str) -> dict:
        """Per task family (workbench, nestful): outcome accuracy (overall and per domain), tool/parameter F1,
        full-sequence match; and the mean number of entries retrieved."""
        episodes = [t.info for t in trajs if t.info.get("env") == cls.name and t.info.get("gold") is not None]
        if not episodes:
            return {}
        families = dict.fromkeys(e["family"] for e in episodes)
        retrieved = [len(e["retrieved"]) for e in episodes]
        return {**{f: metrics.summarize([e for e in episodes if e["family"] == f]) for f in families},
                "retrieved_mean": sum(retrieved) / len(retrieved)}

    def __init__(self, task: dict, params: MemToolAgentParams | None = None, **kwargs):
        super().__init__(task, params, **kwargs)
        users = [m["content"] for m in task["messages"] if m["role"] == "user"]
        if not users:
            raise ValueError(f"task {task.get('id')!r}: no user message (the query)")
        self.query = users[-1]
        self.meta = task.get("meta") or {}
        self.nested = task.get("task") == nestful.NAME
        self.retrieved = retrieve(self.query, self.params)
        prompt = NESTFUL_SYSTEM_PROMPT if self.nested else self.system_prompt
        if self.retrieved:
            prompt += "\n\n" + MEMORY_PROMPT.format(memories=render_entries(self.retrieved))
        self.messages = with_system(prompt, task["messages"])
        self.tools = nestful.tool_schemas() if self.nested else self._toolset()
        self.start = None if self.nested else sandbox.start_database(self.meta)
        self.box = None if self.nested else sandbox.Sandbox(self.start)
        self.values: dict = {}  # nestful: label -> result
        self.calls: list[dict] = []  # every call that ran (a bad call changes nothing and is not kept)
        self.results: list[str] = []

    def _toolset(self) -> list[dict]:
        domain = self.meta.get("domain")
        if self.params.toolset == "all" or domain not in sandbox.DOMAINS:  # multi-domain: every tool
            return MemToolAgentEnv.tools
        return sandbox.tool_schemas([n for n in sandbox.TOOLS if n.split(".")[0] in (domain, "company_directory")])

    def execute(self, name, arguments) -> ToolResult:
        try:
            if self.nested:
                text, call = self._nested(name, arguments)
            else:
                text = self.box.call(name, arguments)
                call = {"name": name, "arguments": sandbox.parsed_arguments(name, arguments)}
        except (sandbox.WorkbenchError, nestful.NestfulError) as e:
            self.results.append(f"Error: {e}")
            return ToolResult(f"Error: {e}", ok=False, modified=False)
        self.calls.append(call)
        self.results.append(text)
        return ToolResult(text, ok=True, modified=False)

    def _nested(self, name, arguments) -> tuple[str, dict]:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                raise nestful.NestfulError("arguments are not valid JSON.") from None
        value = nestful.call(name, arguments, self.values)
        label = f"$var_{len(self.calls) + 1}"
        self.values[nestful.label_key(label)] = value
        return f"{label} = {value:g}", {"name": name, "arguments": arguments, "label": label}

    def outcome(self) -> bool:
        gold = self.task.get("answer")
        if gold is None:
            return False
        if self.nested:
            return bool(nestful.score(self.task, self.calls))
        expected = sandbox.replay(gold, self.start)[0].state()
        return self.box.state() == expected

    def score(self, answer: str | None) -> float:
        """WorkBench's outcome check: 1.0 when the databases end as the gold calls leave them. A rollout a cap
        stopped (no answer) still has its databases: they are checked all the same."""
        return float(self.outcome())

    def info(self) -> dict:
        return {"env": self.name, "family": self.task.get("task"), "domain": self.meta.get("domain", "unknown"),
                "template": self.meta.get("template"),
                "query": self.query, "calls": self.calls, "results": self.results, "gold": self.task.get("answer"),
                "outcome": self.outcome(), "retrieved": [e["query"] for e in self.retrieved]}
