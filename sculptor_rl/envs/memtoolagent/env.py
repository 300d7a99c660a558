"""The MemToolAgent environment (Er et al., 2026): WorkBench-style tool use with a memory of past episodes.

Two task families, both scored by an outcome (1 or 0; the reward is design eq. 4 on it):
- `workbench`: the agent holds the 27 sandbox tools (`workbench.sandbox`) over the task's own copy of the
  databases; the outcome is right when the databases end exactly as the gold calls leave them;
- `nestful`: the agent holds the record's own tools (an imported record's `meta.tools`; a generated one's four math
  functions) and calls them one at a time, the k-th successful call labelled `$var_k` and `"$var_k.result$"`
  standing for its result (`workbench.nestful.step`); the outcome is right when the last result is the gold answer
  (NESTFUL's win) where the functions run here, else when the calls are the gold sequence (NESTFUL's full-sequence
  match). Its system prompt is the paper's Figure 18, adapted to calls.
The episode ends at a completion without tool calls.

The memory (`sculptor_rl.memory`) lives across episodes and reaches the env through its parameters: `memory`, a
JSONL store (entries m = (query, calls, feedback, reflection)), read as an immutable snapshot, so every rollout
of a GRPO group sees the same one. Entries similar to the task's query (BM25 over the stored queries) are chosen
by `retrieval` (none | topk | dynamic: the paper's Dynamic "n", Algorithm 1) and shown in the system prompt as
the paper's Figure 10 does. `reflections: false` shows failed entries without their reflection (the ablation
"w/o memory extractor"). Nothing the agent does in an episode changes the memory: a driver adds entries between
rounds (`sculptor_rl.crossepisode`, `sculptor-rl memory build`; the RL trainer's `memory_updates`), each round's
made by `round_entries` (§3.2, memory extraction; the env's `memory_entries` hook), failures critiqued by a
`Reflector` on the run's LLM (`llm_reflector`) or the offline `rule_reflector`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable

from .entry import check_entry, make_entry, render_entries
from ...memory import load_snapshot
from .entry import render_call
from ...memory.retrieval import RETRIEVALS, bm25_scores, select
from ...memory.store import thaw
from ...toolcalls import ToolResult
from ...trajectory import Trajectory
from . import metrics, nestful, sandbox
from . import tasks as workbench_tasks
from ..base import Env, with_system

__all__ = ["MEMTOOLAGENT_SYSTEM_PROMPT", "MEMORY_PROMPT", "REFLECTION_PROMPT", "MemToolAgentEnv", "MemToolAgentParams",
           "Reflector", "execution_text", "llm_reflector", "round_entries", "rule_reflector"]

# the paper's Figure 10, with one line on how an episode ends (the loop's contract)
MEMTOOLAGENT_SYSTEM_PROMPT = (
    "Today's date is Thursday, 2023-11-30 and the current time is 00:00:00. Remember the current date and time "
    "when answering queries. Meetings must not start before 9am or end after 6pm.\n"
    "Use the tools to do what the user asks, then reply briefly without a tool call.")
NESTFUL_SYSTEM_PROMPT = (
    "You are a helpful assistant with access to function calls. Your task is to produce the sequence of function "
    "calls necessary to answer the user utterance, one call at a time. The result of your k-th call is $var_k: "
    "pass \"$var_k.result$\" (or one output field, \"$var_k.field$\") as an argument to use it. When the last call "
    "gives the answer, reply with it.")
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

    check_memory_entry = staticmethod(check_entry)

    @classmethod
    def memory_entries(cls, trajs: list, num_generations: int, params, llm=None, critique: bool = True,
                       **tags) -> list[dict]:
        """`round_entries`, failures critiqued by `llm` (`llm_reflector`), else by `rule_reflector`."""
        reflect = (llm_reflector(llm, cls.tools) if llm is not None else rule_reflector) if critique else None
        return round_entries(trajs, num_generations, params, reflect, **tags)

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
        self.tools = nestful.tool_schemas(task) if self.nested else self._toolset()
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
        label = f"$var_{len(self.calls) + 1}"
        text, value = nestful.step(self.task, name, arguments, self.values, label)
        self.values[nestful.label_key(label)] = value
        return text, {"name": name, "arguments": arguments, "label": label}

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


# ---- memory extraction (§3.2): the entries a round of episodes adds ----

# the paper's Figure 6 (memory extraction for general-purpose tool use)
REFLECTION_PROMPT = (
    "You are an agent responsible for analyzing the INCORRECT execution of a tool-use agent.\n"
    "{date_rules}\n"
    "The agent had access to these tools:\n{tools}\n"
    "Here are similar queries, their executions, and user feedback:\n{similar}\n"
    "For each query where user feedback indicates incorrect execution, reflect on what went wrong and use these "
    "insights.\n"
    "The whole agent execution including tool calls and corresponding responses is:\n{execution}\n"
    "Check if the agent used a correct order of tools\n"
    "Check if the agent hallucinated any tool parameters\n"
    "Check if the agent used wrong values for tool parameters\n"
    "Check if the agent only used the information from tools or directly from user.\n"
    "Check if the agent had a correct temporal and conditional reasoning.\n"
    "Before sending any error message, verify you're not contradicting yourself\n"
    "Remember this is a wrong response, there is at least one mistake in tool usage\n"
    "Reflect on the query, response, and other similar queries to catch the mistake, try to keep your response "
    "short.")

Reflector = Callable[[Trajectory, list[dict]], str]  # (a failed rollout, the similar entries) -> reflection


def execution_text(traj: Trajectory) -> str:
    """The calls a rollout made and what each returned, then its final reply."""
    lines = []
    for step in traj.steps:
        for c in step.calls:
            call = {"name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], dict) else {}}
            lines.append(f"{render_call(call) if c['name'] else '(unparsable call)'} -> {c['result'][:300]}")
    lines.append(f"Final reply: {traj.answer if traj.answer is not None else '(none: ' + traj.stop_reason + ')'}")
    return "\n".join(lines)


def rule_reflector(traj: Trajectory, similar: list[dict]) -> str:
    """An offline critique without a model: the failed calls and their errors (labelled as such)."""
    failed = [f"{c['name']}: {c['result'][:160]}" for s in traj.steps for c in s.calls if not c["ok"]]
    if failed:
        return "Automatic critique, no LLM: these calls failed: " + "; ".join(failed)
    return "Automatic critique, no LLM: every call ran, but the final state was wrong; check the parameter values."


def llm_reflector(llm, tools: list[dict]) -> Reflector:
    """Reflections (the paper's Figure 6 prompt) from the run's LLM (`envs.llm`: the policy's own engine, or an
    OpenAI-compatible endpoint)."""
    tool_text = "\n".join(f"- {t['function']['name']}: {t['function']['description']}" for t in tools)

    def reflect(traj: Trajectory, similar: list[dict]) -> str:
        prompt = REFLECTION_PROMPT.format(
            date_rules=MEMTOOLAGENT_SYSTEM_PROMPT.split("\n")[0], tools=tool_text,
            similar=render_entries(similar) or "(none)", execution=execution_text(traj))
        messages = [{"role": "system", "content": prompt},
                    {"role": "user", "content": f"Query: {traj.info.get('query')}\nUser feedback: Incorrect"}]
        (text,) = llm.ask([messages], tag="reflect")
        return text.strip() or "(empty reflection)"

    return reflect


def round_entries(trajs: list[Trajectory], num_generations: int, params: MemToolAgentParams,
                  reflect: Reflector | None = None, **tags) -> list[dict]:
    """The entries m = (q, a, f, r) a round adds (§3): one per task, whose rollouts are each consecutive run of
    `num_generations` in `trajs` (a GRPO group). The entry is a successful rollout's if any, else the first's: its
    query, its calls, f = its outcome (1 right, 0 wrong) and for f = 0 `reflect`'s critique, given the entries the
    agent saw (retrieved as the env does from `params.memory`, the round's snapshot). `tags` (round=, step=) are
    kept in every entry."""
    entries = []
    for i in range(0, len(trajs), num_generations):
        group = trajs[i:i + num_generations]
        best = next((t for t in group if t.score == 1.0), group[0])
        feedback = int(best.score == 1.0)
        info = best.info
        reflection = reflect(best, retrieve(info["query"], params)) if reflect is not None and not feedback else None
        entries.append(make_entry(info["query"], info["calls"], feedback, reflection, task_id=best.task_id,
                                  domain=info.get("domain"), **tags))
    return entries
