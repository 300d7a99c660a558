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
critique, no LLM"); it is never presented as an LLM's reflection. Both, and the entries a round adds
(`round_entries`), live in `sculptor_rl.envs.memtoolagent`, shared with the RL trainer, which grows the memory
between its own generation rounds (`memory_updates`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from .agent.chat import ChatFormat
from .agent.loop import LoopConfig, run_rollouts
from .envs import RewardConfig, make_env_factory, params_of
from .envs.memtoolagent import Reflector, engine_reflector, round_entries, rule_reflector
from .memory import MemoryStore, check_entry
from .trajectory import Trajectory, write_trajectories

log = logging.getLogger(__name__)

# the reflectors live with the env (`envs.memtoolagent`, shared with the RL trainer), named here for the driver's users
__all__ = ["DriverConfig", "engine_reflector", "rule_reflector", "run_rounds"]


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
        for entry in round_entries(trajs, cfg.num_generations, params_of("memtoolagent", params), reflect, round=r):
            store.add(entry)
        store.save(path)
        write_trajectories(trajs, out / f"round_{r}.trajectories.jsonl")
        per_round.append(trajs)
        right = sum(t.score == 1.0 for t in trajs)
        log.info("round %d: %d/%d rollouts right; memory holds %d entries", r, right, len(trajs), len(store))
    return store, per_round
