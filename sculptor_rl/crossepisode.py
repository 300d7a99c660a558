"""MemToolAgent's cross-episode driver: tasks run in rounds, the memory updated between rounds (§3).

Round r takes the next chunk of tasks in order (its trajectories: `OUT/round_<r>.trajectories.jsonl`). Before
it, the store is frozen into a snapshot file (`OUT/round_<r>.memory.jsonl`, written once, never changed), and
every rollout of the round, every rollout of a GRPO group with them, reads that file (`memtoolagent` env,
`memory=` the snapshot). After the round each task adds one entry m = (q, a, f, r) (§3): its query, the calls its
rollout made, the feedback f = the outcome (1 right, 0 wrong), and for f = 0 a reflection (§3.2, the paper's
Figure 6 prompt) from `reflect`. With several rollouts per task, the entry is a successful one if any, else the
first. The store is saved (atomically) after every round, so `eval`, `rl` and `serve` can start from it
(`--environment-param memory=PATH`).

Reflections come from an LLM: `engine_reflector(engine, fmt)` asks any engine (the policy's own, or an
OpenAI-compatible endpoint's `openai` engine) with the Figure 6 prompt. `rule_reflector` is the offline stand-in
for tests and runs without a model: it lists the calls that failed and their errors, and says so ("Automatic
critique, no LLM"); it is never presented as an LLM's reflection.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .agent.chat import ChatFormat
from .agent.loop import LoopConfig, run_rollouts
from .engines.base import Request, SamplingConfig
from .envs import RewardConfig, make_env_factory, params_of
from .envs.memtoolagent import MEMTOOLAGENT_SYSTEM_PROMPT, retrieve
from .memory import MemoryStore, check_entry, make_entry, render_entries
from .memory.entry import render_call
from .trajectory import Trajectory, write_trajectories

log = logging.getLogger(__name__)

__all__ = ["DriverConfig", "REFLECTION_PROMPT", "engine_reflector", "execution_text", "rule_reflector", "run_rounds"]

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


@dataclass
class DriverConfig:
    memory: str  # the store (JSONL): read when it exists, saved after every round
    out: str  # round snapshots and trajectories go here
    rounds: int = 2  # the tasks are cut into this many consecutive chunks
    environment_params: dict = field(default_factory=dict)  # memtoolagent's (retrieval, k, reflections, ...)
    num_generations: int = 1
    loop: LoopConfig = field(default_factory=LoopConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    seed: int = 0

    def __post_init__(self):
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if "memory" in self.environment_params:
            raise ValueError("the driver gives the env its memory (each round's snapshot); set `memory` instead")


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


def engine_reflector(engine, fmt: ChatFormat, tools: list[dict], max_new_tokens: int = 256,
                     sampling: SamplingConfig | None = None) -> Reflector:
    """Reflections from an LLM behind `engine` (the policy's, or an `openai` engine on another endpoint)."""
    tool_text = "\n".join(f"- {t['function']['name']}: {t['function']['description']}" for t in tools)

    def reflect(traj: Trajectory, similar: list[dict]) -> str:
        prompt = REFLECTION_PROMPT.format(
            date_rules=MEMTOOLAGENT_SYSTEM_PROMPT.split("\n")[0], tools=tool_text,
            similar=render_entries(similar) or "(none)", execution=execution_text(traj))
        messages = [{"role": "system", "content": prompt},
                    {"role": "user", "content": f"Query: {traj.info.get('query')}\nUser feedback: Incorrect"}]
        ids = fmt.encode(fmt.text(messages, add_generation_prompt=True))
        out = engine.generate([Request(prompt_ids=ids, messages=messages, max_new_tokens=max_new_tokens,
                                       sampling=sampling or SamplingConfig(temperature=0.0))])
        return out[0].text.strip() or "(empty reflection)"

    return reflect


def _entry(trajs: list[Trajectory], reflect: Reflector | None, similar: Callable[[str], list[dict]],
           round_index: int) -> dict:
    best = next((t for t in trajs if t.score == 1.0), trajs[0])
    feedback = int(best.score == 1.0)
    info = best.info
    reflection = reflect(best, similar(info["query"])) if reflect is not None and not feedback else None
    return make_entry(info["query"], info["calls"], feedback, reflection, task_id=best.task_id,
                      domain=info.get("domain"), round=round_index)


def run_rounds(tasks: list[dict], engine, fmt: ChatFormat, cfg: DriverConfig,
               reflect: Reflector | None = None) -> tuple[MemoryStore, list[list[Trajectory]]]:
    """Run `tasks` in `cfg.rounds` rounds (in order), the memory growing between rounds; the store and each
    round's trajectories."""
    path, out = Path(cfg.memory), Path(cfg.out)
    store = MemoryStore.load(path, check_entry) if path.exists() else MemoryStore(check=check_entry)
    size = -(-len(tasks) // cfg.rounds)
    per_round = []
    for r in range(cfg.rounds):
        chunk = tasks[r * size:(r + 1) * size]
        if not chunk:
            break
        snapshot = out / f"round_{r}.memory.jsonl"
        store.frozen().save(snapshot)
        params = {**cfg.environment_params, "memory": str(snapshot)}
        make_env = make_env_factory("memtoolagent", params, seed=cfg.seed + r, reward=cfg.reward)
        trajs = run_rollouts(chunk, engine, fmt, make_env, cfg.loop, cfg.num_generations, progress=False)
        checked = params_of("memtoolagent", params)
        for i in range(len(chunk)):
            group = trajs[i * cfg.num_generations:(i + 1) * cfg.num_generations]
            # the reflector sees the entries the agent saw (the snapshot's, by the env's retrieval)
            store.add(_entry(group, reflect, lambda q: retrieve(q, checked), r))
        store.save(path)
        write_trajectories(trajs, out / f"round_{r}.trajectories.jsonl")
        per_round.append(trajs)
        right = sum(t.score == 1.0 for t in trajs)
        log.info("round %d: %d/%d rollouts right; memory holds %d entries", r, right, len(trajs), len(store))
    return store, per_round
