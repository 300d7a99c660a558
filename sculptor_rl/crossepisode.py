"""Cross-episode rounds: tasks run in rounds, the environment's memory updated between rounds (MemToolAgent §3).

Round r takes the next chunk of tasks in order (its trajectories: `OUT/round_<r>.trajectories.jsonl`). Before
it, the store is frozen into a snapshot file (`OUT/round_<r>.memory.jsonl`, written once, never changed), and
every rollout of the round, every rollout of a GRPO group with them, reads that file (the env's `memory=`
parameter). After the round the environment's `memory_entries` hook gives the entries it adds (MemToolAgent: one
per task, m = (q, a, f, r), failures critiqued by the run's LLM, `envs.llm`, or the env's labelled offline
stand-in). The store is saved (atomically) after every round, so `eval`, `rl` and `serve` can start from it
(`--environment-param memory=PATH`). The RL trainer grows the memory between its own generation rounds the same
way (`memory_updates`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from .agent.chat import ChatFormat
from .agent.loop import LoopConfig, run_rollouts
from .envs import RewardConfig, env_class, make_env_factory, params_of
from .memory import MemoryStore
from .trajectory import Trajectory, write_trajectories

log = logging.getLogger(__name__)

__all__ = ["DriverConfig", "run_rounds"]


@dataclass
class DriverConfig:
    memory: str  # the store (JSONL): read when it exists, saved after every round
    out: str  # round snapshots and trajectories go here
    environment: str = "memtoolagent"  # an environment that keeps a memory across episodes
    rounds: int = 2  # the tasks are cut into this many consecutive chunks
    environment_params: dict = field(default_factory=dict)  # the env's (memtoolagent: retrieval, k, reflections)
    num_generations: int = 1
    loop: LoopConfig = field(default_factory=LoopConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    seed: int = 0

    def __post_init__(self):
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if "memory" in self.environment_params:
            raise ValueError("the driver gives the env its memory (each round's snapshot); set `memory` instead")


def run_rounds(tasks: list[dict], engine, fmt: ChatFormat, cfg: DriverConfig, llm=None,
               critique: bool = True) -> tuple[MemoryStore, list[list[Trajectory]]]:
    """Run `tasks` in `cfg.rounds` rounds (in order), the memory growing between rounds; the store and each
    round's trajectories. `llm` critiques failures (`envs.llm`; None: the env's offline stand-in), unless not
    `critique`."""
    env = env_class(cfg.environment)
    if env.check_memory_entry is None:
        raise ValueError(f"the {cfg.environment} environment keeps no memory across episodes")
    path, out = Path(cfg.memory), Path(cfg.out)
    store = MemoryStore.load(path, env.check_memory_entry) if path.exists() else MemoryStore(check=env.check_memory_entry)
    size = -(-len(tasks) // cfg.rounds)
    per_round = []
    for r in range(cfg.rounds):
        chunk = tasks[r * size:(r + 1) * size]
        if not chunk:
            break
        snapshot = out / f"round_{r}.memory.jsonl"
        store.frozen().save(snapshot)
        params = {**cfg.environment_params, "memory": str(snapshot)}
        make_env = make_env_factory(cfg.environment, params, seed=cfg.seed + r, reward=cfg.reward)
        trajs = run_rollouts(chunk, engine, fmt, make_env, cfg.loop, cfg.num_generations, progress=False)
        for entry in env.memory_entries(trajs, cfg.num_generations, params_of(cfg.environment, params), llm,
                                        critique, round=r):
            store.add(entry)
        store.save(path)
        write_trajectories(trajs, out / f"round_{r}.trajectories.jsonl")
        per_round.append(trajs)
        right = sum(t.score == 1.0 for t in trajs)
        log.info("round %d: %d/%d rollouts right; memory holds %d entries", r, right, len(trajs), len(store))
    return store, per_round
