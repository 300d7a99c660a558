"""The environments the agent loop runs, by name (`--env acm|memtool`): the loop, the trainer and eval take an
environment factory `make_env(task, index) -> env` (see `agent.loop.Env`) and know nothing else about it.

- `acm`: the ACM workspace (six context tools) over the task's messages; no parameters.
- `memtool`: `memtool.MemToolEnv`, a session of requests in which the agent manages its own tool set; parameters
  are `memtool.MemToolConfig`'s (mode, limit, history_turns, digest_turns, loaded_tools_penalty).

`serve` builds the same environments over a client's conversation instead of a task (`conversation_env`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import fields
from typing import Callable

import yaml

from .acm import Workspace
from .memtool import MemToolConfig, MemToolEnv
from .tasks.common import SYSTEM_PROMPT

__all__ = ["ENVS", "acm_env", "memtool_env", "make_env_factory",
           "conversation_env", "env_flag_from_config", "parse_config"]


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


def conversation_env(name: str, **params) -> Callable[[list[dict], int], object]:
    """For `serve`: `(messages, seed) -> env`, environment `name` over a client's conversation. Without a system
    message of its own, a conversation gets the one the model was trained with (ValueError on bad names or
    parameters, as `make_env_factory`; on a conversation the env cannot take, when called)."""
    make_env_factory(name, 0, **params)
    if name == "memtool":
        config = MemToolConfig(**params)
        return lambda messages, seed: MemToolEnv.conversation(messages, config)
    return lambda messages, seed: Workspace(
        messages if messages and messages[0]["role"] == "system"
        else [{"role": "system", "content": SYSTEM_PROMPT}, *messages], seed=seed)


def env_flag_from_config(argv: list[str]) -> tuple[list[str], str | None]:
    """For the commands TrlParser reads (`rl`, `serve`): it takes a YAML `env:` as environment variables (a
    mapping) and rejects a string, but ours names the environment (`env: memtool`). A string `env` of the --config
    file becomes an `--env` flag put before the others (which still override it), and the file is read from a
    copy without it. Returns (argv, the copy to delete after parsing, or None)."""
    if "--config" not in argv or argv.index("--config") + 1 >= len(argv):
        return argv, None
    i = argv.index("--config")
    with open(argv[i + 1]) as f:
        values = yaml.safe_load(f)
    if not isinstance(values, dict) or not isinstance(values.get("env"), str):
        return argv, None
    name = values.pop("env")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as copy:
        yaml.safe_dump(values, copy)
    return ["--env", name, *argv[:i], "--config", copy.name, *argv[i + 2:]], copy.name


def parse_config(config_cls, argv: list[str], prog: str | None = None):
    """The config of a command TrlParser reads (`rl`, `serve`) from `--config FILE` and flags, with the file's
    `env:` taken as the environment (`env_flag_from_config`). Raises ValueError from the config's own checks."""
    from trl import TrlParser

    args, copy = env_flag_from_config(argv)
    try:
        (cfg,) = TrlParser((config_cls,), prog=prog).parse_args_and_config(args)
    finally:
        if copy:
            os.unlink(copy)
    return cfg
