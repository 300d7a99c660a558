"""Run tasks through the agent loop on an engine: the `rollout` (policy) and `collect` (teacher) commands."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .acm import Workspace
from .agent.chat import ChatFormat
from .agent.loop import LoopConfig, run_rollouts
from .engines import SamplingConfig, make_engine
from .envs import acm_env, make_env_factory
from .models import resolve_model
from .rewards import RewardConfig
from .trajectory import Trajectory

log = logging.getLogger(__name__)

__all__ = ["RolloutConfig", "rollout", "acm_env"]


@dataclass
class RolloutConfig:
    engine: str = "vllm"  # vllm | hf | openai | scripted
    model: str | None = None  # the policy (HF id or path; None: the embedded default): its tokenizer makes the ids
    teacher_model: str | None = None  # openai engine: the served model's name
    base_url: str | None = None  # openai engine: the endpoint, e.g. http://127.0.0.1:8000/v1
    api_key: str = "EMPTY"
    num_generations: int = 1
    seed: int = 0
    env: str = "acm"  # acm | memtool (sculptor_rl.envs)
    env_params: dict = field(default_factory=dict)  # the environment's parameters, e.g. {"mode": "workflow"}
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    engine_kwargs: dict = field(default_factory=dict)  # passed to the engine (e.g. gpu_memory_utilization)


def rollout(tasks: list[dict], cfg: RolloutConfig, fmt: ChatFormat | None = None, engine=None,
            progress: bool = True) -> list[Trajectory]:
    """Roll out `cfg.num_generations` per task. The tokenizer is the policy's, also for text-only teachers
    (their text is tokenized once, as the policy will be trained on it)."""
    policy = resolve_model(cfg.model)
    fmt = fmt or ChatFormat.from_pretrained(policy)
    if engine is None:
        kwargs = dict(cfg.engine_kwargs)
        if cfg.engine == "openai":
            if not (cfg.base_url and cfg.teacher_model):
                raise ValueError("the openai engine needs --base-url and --teacher-model")
            kwargs.update(base_url=cfg.base_url, api_key=cfg.api_key)
        model = cfg.teacher_model if cfg.engine == "openai" else policy
        engine = make_engine(cfg.engine, model, fmt, cfg.sampling, tools=Workspace.tools, **kwargs)
    make_env = make_env_factory(cfg.env, cfg.seed, **cfg.env_params)
    return run_rollouts(tasks, engine, fmt, make_env, cfg.loop, cfg.reward, cfg.num_generations, progress=progress)
