"""Environments: the contract (`base.Env`), every environment, and the registry by name.

The loop, the trainer, eval and serve take an environment factory `make_env(task, index) -> Env` and know
nothing else about it. Configs name the environment with `environment:` (`--environment` on the command line)
and give its parameters with `environment_params:` (`--environment-param K=V`):

- `acm`: the ACM workspace (six context tools) over the task's messages; no parameters.
- `memtool`: a MemTool session in which the agent manages its own tool set; `MemToolConfig`'s parameters
  (mode, limit and its rules, the history manager, an optional judge, loaded_tools_penalty).
- `toolmem`: predict a tool's score on a task, pick the better of two tools, or choose one and solve the task
  through it, with a memory of the tools in context (ToolMem); `ToolMemParams` (mode generic|few-shot|toolmem,
  memory, top_k, solver agent|tool).
- `tamem`: a question about a long conversation answered through TA-Mem's ten memory tools; `TamemParams`
  (notes oracle|DIR of extracted notes, max_turns).
- `memtoolagent`: WorkBench-style tool use (27 tools, outcome = final database state) with a memory of past
  episodes in the system prompt (MemToolAgent); `MemToolAgentParams` (memory, retrieval none|topk|dynamic, k,
  radius, prominence, peak, reflections, toolset all|domain).
- `full`, `truncate`, `bm25`: the no-tool baselines; `truncate` and `bm25` take `context_budget` and
  `chunk_tokens` (`BaselineParams`) and need the policy's tokenizer.

Your own: a subclass of `Env` with a `name`, added with `register_env` (README, "Writing an environment").
`serve` builds the same environments over a client's conversation instead of a task (`conversation_env`).
The scripted teachers (`teachers.ScriptedTeacher`) are a policy for these environments, not an engine.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .acm import ACM_SYSTEM_PROMPT, AcmEnv
from .base import Env, ToolResult, with_system
from .baselines import Bm25Env, FullEnv, TruncateEnv
from .memtool import MemToolConfig, MemToolEnv
from .memtoolagent import MemToolAgentEnv
from .toolmem import ToolMemEnv
from .reward import RewardConfig, compute_reward
from .tamem import TamemEnv

__all__ = ["ACM_SYSTEM_PROMPT", "ENVS", "AcmEnv", "Env", "MemToolConfig", "MemToolEnv", "RewardConfig", "ToolResult",
           "compute_reward", "conversation_env", "make_env_factory", "params_of", "register_env", "with_system"]

ENVS: dict[str, type[Env]] = {cls.name: cls for cls in (AcmEnv, MemToolEnv, FullEnv, TruncateEnv, Bm25Env,
                                                         ToolMemEnv, TamemEnv, MemToolAgentEnv)}


def register_env(cls: type[Env]) -> type[Env]:
    """Add an environment class to the registry under its `name` (a class decorator); configs then name it with
    `environment: NAME`. A name already taken by another class is an error."""
    if not (isinstance(cls, type) and issubclass(cls, Env)):
        raise TypeError(f"an environment is a subclass of sculptor_rl.envs.Env, got {cls!r}")
    if ENVS.get(cls.name, cls) is not cls:
        raise ValueError(f"environment name {cls.name!r} is taken by {ENVS[cls.name].__qualname__}")
    ENVS[cls.name] = cls
    return cls


def params_of(name: str, params: dict | None = None):
    """Environment `name`'s parameters as its `Params` dataclass (ValueError naming the unknown environment, the
    unknown parameter, or the value its checks reject)."""
    if name not in ENVS:
        raise ValueError(f"unknown environment {name!r}; choose one of {', '.join(ENVS)}")
    kind = ENVS[name].Params
    known = [f.name for f in dataclasses.fields(kind)]
    for key in params or {}:
        if key not in known:
            takes = f"takes {', '.join(known)}" if known else "takes no parameters"
            raise ValueError(f"unknown parameter {key!r} of the {name} environment (it {takes})")
    return kind(**(params or {}))


def make_env_factory(name: str, params: dict | None = None, *, seed: int = 0, reward: RewardConfig | None = None,
                     tokenizer=None) -> Callable[[dict, int], Env]:
    """`make_env(task, index)`: a fresh environment `name` for rollout `index` of a run (its ids seeded by the run
    `seed` and the index). `tokenizer`: the policy's, for the environments that count tokens."""
    cls, checked = ENVS.get(name), params_of(name, params)
    return lambda task, index: cls(task, checked, seed=seed * 1_000_003 + index, reward=reward, tokenizer=tokenizer)


def conversation_env(name: str, params: dict | None = None, tokenizer=None) -> Callable[[list[dict], int], Env]:
    """For `serve`: `(messages, seed) -> env`, environment `name` over a client's conversation (ValueError on
    bad names or parameters, at once; on a conversation the env cannot take, when called)."""
    cls, checked = ENVS.get(name), params_of(name, params)
    return lambda messages, seed: cls.conversation(messages, checked, seed=seed, tokenizer=tokenizer)
