"""The environments the agent loop runs, by name (`--env acm|memtool`): the loop, the trainer and eval take an
environment factory `make_env(task, index) -> env` (see `agent.loop.Env`) and know nothing else about it.

- `acm`: the ACM workspace (six context tools) over the task's messages; no parameters.
- `memtool`: `memtool.MemToolEnv`, a session of requests in which the agent manages its own tool set; parameters
  are `memtool.MemToolConfig`'s (mode, limit, history_turns, digest_turns, loaded_tools_penalty).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Callable

from .acm import Workspace
from .memtool import MemToolConfig, MemToolEnv

__all__ = ["ENVS", "acm_env", "memtool_env", "make_env_factory"]


def acm_env(seed: int):
    """A fresh ACM workspace per rollout, ids seeded by run seed and rollout index."""
    return lambda task, index: Workspace(task["messages"], seed=seed * 1_000_003 + index)


def memtool_env(seed: int, **params):
    """A fresh MemTool session per rollout (deterministic: the session is the task, no seed is needed)."""
    known = [f.name for f in fields(MemToolConfig)]
    unknown = [k for k in params if k not in known]
    if unknown:
        raise ValueError(f"unknown memtool parameter {unknown[0]!r} (known: {', '.join(known)})")
    config = MemToolConfig(**params)
    return lambda task, index: MemToolEnv(task, config)


ENVS: dict[str, Callable] = {"acm": acm_env, "memtool": memtool_env}


def make_env_factory(name: str, seed: int = 0, **params):
    """The factory of environment `name`; `params` configure it (ValueError on unknown names or parameters)."""
    if name not in ENVS:
        raise ValueError(f"unknown environment {name!r}; choose one of {', '.join(ENVS)}")
    if name == "acm" and params:
        raise ValueError(f"the acm environment takes no parameters, got {', '.join(params)}")
    return ENVS[name](seed, **params)
