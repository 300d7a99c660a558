"""Environments: the contract (`base.Env`), one package per environment, and the registry by name (`registry`).

The loop, the trainer, eval and serve take an environment factory `make_env(task, index) -> Env` and know
nothing else about it. Configs name the environment with `environment:` (`--environment` on the command line) —
a built-in, an import path `package.module:Class`, or an installed entry point (`registry`) — and give its
parameters with `environment_params:` (`--environment-param K=V`). The built-ins, each a package here that imports
no other:

- `acm/`: the ACM workspace (six context tools) over the task's messages; no parameters; its scripted teacher.
- `baselines/`: `full`, `truncate`, `bm25`, the no-tool baselines; `truncate` and `bm25` take `context_budget` and
  `chunk_tokens` (`BaselineParams`) and need the policy's tokenizer.
- `memtool/`: a MemTool session in which the agent manages its own tool set; `MemToolParams`'s parameters
  (mode, limit and its rules, the history manager, an optional judge, loaded_tools_penalty).
- `toolmem/`: predict a tool's score on a task, pick the better of two tools, or choose one and solve the task
  through it, with a memory of the tools in context (ToolMem); `ToolMemParams`.
- `tamem/`: a question about a long conversation answered through TA-Mem's ten memory tools; `TamemParams`.
- `memtoolagent/`: WorkBench-style tool use (27 tools, outcome = final database state) with a memory of past
  episodes in the system prompt (MemToolAgent); `MemToolAgentParams`.

Each package holds its environment class, its task families (generators, scorers, importers of its benchmarks'
own files), tools, scripted teacher (`teacher.teach`), metrics and report section. Nothing here imports one of
them: the registry does, when a name is first used. `serve` builds the same environments over a client's
conversation instead of a task (`conversation_env`). `teacher.ScriptedTeacher` runs the teachers as a policy.
"""

from __future__ import annotations

from typing import Callable

from .base import Env, ToolResult, with_system
from .registry import env_class, env_names, params_of, register_env
from .reward import RewardConfig, compute_reward

__all__ = ["Env", "RewardConfig", "ToolResult", "compute_reward", "conversation_env", "env_class", "env_names",
           "make_env_factory", "params_of", "register_env", "with_system"]


def make_env_factory(name: str, params: dict | None = None, *, seed: int = 0, reward: RewardConfig | None = None,
                     tokenizer=None, llm=None) -> Callable[[dict, int], Env]:
    """`make_env(task, index)`: a fresh environment `name` for rollout `index` of a run (its ids seeded by the run
    `seed` and the index). `tokenizer`: the policy's, for the environments that count tokens; `llm`: what the
    environments ask (`envs.llm`; None: their offline stand-ins)."""
    cls, checked = env_class(name), params_of(name, params)
    return lambda task, index: cls(task, checked, seed=seed * 1_000_003 + index, reward=reward, tokenizer=tokenizer,
                                   llm=llm)


def conversation_env(name: str, params: dict | None = None, tokenizer=None, llm=None) -> Callable[[list[dict], int], Env]:
    """For `serve`: `(messages, seed) -> env`, environment `name` over a client's conversation (ValueError on
    bad names or parameters, at once; on a conversation the env cannot take, when called)."""
    cls, checked = env_class(name), params_of(name, params)
    return lambda messages, seed: cls.conversation(messages, checked, seed=seed, tokenizer=tokenizer, llm=llm)
