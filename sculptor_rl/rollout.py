"""Run tasks through the agent loop on an engine: the `rollout` (policy) and `collect` (teacher) commands, resumable."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path

from tqdm.auto import tqdm

from .agent.chat import ChatFormat
from .config import load_config
from .agent.loop import LoopConfig, run_rollouts
from .engines import SamplingConfig, make_engine
from .envs import RewardConfig, make_env_factory
from .envs.llm import LLMSettings
from .jsonl import append_jsonl, resume_jsonl
from .models import resolve_model
from .trajectory import Trajectory, read_trajectories, write_trajectories

log = logging.getLogger(__name__)

__all__ = ["RolloutConfig", "rollout", "rollout_engine", "rollout_to_file"]


@dataclass
class RolloutConfig(LoopConfig, RewardConfig, LLMSettings):
    """`rollout`, `collect` and `memory build`: the loop's (`LoopConfig`), the reward's (`RewardConfig`) and the
    environments' LLM (`LLMSettings`) settings under the names eval, rl and serve use; from YAML (`--config`) and
    flags, as every command."""

    engine: str = "vllm"  # vllm | hf | openai | scripted (the scripted teachers, `envs.teacher`)
    model: str | None = None  # the policy (HF id or path; None: the embedded default): its tokenizer makes the ids
    teacher_model: str | None = None  # openai engine: the served model's name
    base_url: str | None = None  # openai engine: the endpoint, e.g. http://127.0.0.1:8000/v1
    api_key: str = "EMPTY"
    num_generations: int = 1
    seed: int = 0
    environment: str = "acm"  # a built-in, an import path package.module:Class, or an entry point (envs.registry)
    environment_params: dict = field(default_factory=dict)  # the environment's parameters, e.g. {"mode": "workflow"}
    temperature: float = 1.0
    top_p: float = 1.0
    engine_kwargs: dict = field(default_factory=dict)  # passed to the engine (e.g. kv_cache_memory_bytes)

    @classmethod
    def from_yaml(cls, path: str | Path | None, /, **overrides) -> "RolloutConfig":
        """The settings of the YAML file (if any), then `overrides` that are not None (command-line flags)."""
        return load_config(cls, path, overrides)

    @property
    def loop(self) -> LoopConfig:
        return LoopConfig.of(self)

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_p=self.top_p, seed=self.seed)

    @property
    def reward(self) -> RewardConfig:
        return RewardConfig.of(self)


def rollout(tasks: list[dict], cfg: RolloutConfig, fmt: ChatFormat | None = None, engine=None,
            progress: bool = True) -> list[Trajectory]:
    """Roll out `cfg.num_generations` per task. The tokenizer is the policy's, also for text-only teachers
    (their text is tokenized once, as the policy will be trained on it)."""
    fmt = fmt or ChatFormat.of(resolve_model(cfg.model), cfg.loop)
    engine = engine or rollout_engine(cfg, fmt, tasks)
    return run_rollouts(tasks, engine, fmt, _make_env(cfg, fmt, engine), cfg.loop, cfg.num_generations,
                        progress=progress)


def rollout_to_file(tasks: list[dict], cfg: RolloutConfig, out: str | Path, keep=lambda t: True,
                    chunk_size: int = 64, fmt: ChatFormat | None = None, engine=None) -> list[Trajectory]:
    """`rollout`, resumable: the tasks run in chunks of `chunk_size`, each finished chunk's trajectories are
    appended as whole lines to `OUT.partial`; a run started again with the same tasks and settings skips the
    chunks found there (an unfinished one is dropped and run again). At the end the trajectories `keep` accepts
    are written to `out` (whole or not at all) and every trajectory is returned (read back from the file).
    The chunks are the same in every run and each rollout's environment seed depends on its place in `tasks`
    only, so a resumed run writes what an uninterrupted one would, for the scripted teachers and greedy engines
    (a sampling engine draws other numbers after a restart)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    g = cfg.num_generations
    chunks = [tasks[i : i + chunk_size] for i in range(0, len(tasks), chunk_size)]
    expected = [[f"{t['id']}/{k}" for t in chunk for k in range(g)] for chunk in chunks]

    def finished(records: list[dict]) -> int:
        """Records of the chunks done; a file of other tasks or settings is an error, not silently mixed in."""
        n = 0
        for ids in expected:
            got = [r.get("rollout_id") for r in records[n : n + len(ids)]]
            if got != ids[: len(got)]:
                raise ValueError(f"{partial} holds rollouts {got[:3]}... where {ids[:3]}... belong: it comes from "
                                 "other tasks or settings; delete it to start over")
            if len(got) < len(ids):
                break
            n += len(ids)
        return n

    out.parent.mkdir(parents=True, exist_ok=True)
    records = len(resume_jsonl(partial, finished))
    done_chunks = sum(1 for n in accumulate(len(ids) for ids in expected) if n <= records)
    done = sum(len(chunk) for chunk in chunks[:done_chunks])
    if done:
        log.info("%s: %d of %d tasks done in an earlier run; resuming", partial, done, len(tasks))
    todo = chunks[done_chunks:]
    if todo:
        fmt = fmt or ChatFormat.of(resolve_model(cfg.model), cfg.loop)
        engine = engine or rollout_engine(cfg, fmt, tasks)
        make_env = _make_env(cfg, fmt, engine)
        bar = tqdm(total=len(tasks) * g, initial=done * g, desc="rollouts", unit="rollout", dynamic_ncols=True)
        start = done
        for chunk in todo:
            # the environment seeds by the rollout's index in the whole run, not in its chunk
            offset = start * g
            trajs = run_rollouts(chunk, engine, fmt, lambda task, i: make_env(task, offset + i), cfg.loop, g,
                                 progress=False)
            append_jsonl((t.to_json() for t in trajs), partial)
            start += len(chunk)
            bar.update(len(trajs))
        bar.close()
    trajs = list(read_trajectories(partial)) if partial.exists() else []
    write_trajectories([t for t in trajs if keep(t)], out)
    partial.unlink(missing_ok=True)
    return trajs


def _make_env(cfg: RolloutConfig, fmt: ChatFormat, engine):
    return make_env_factory(cfg.environment, cfg.environment_params, seed=cfg.seed, reward=cfg.reward,
                            tokenizer=fmt.tokenizer, llm=cfg.llm(engine, fmt))


def rollout_engine(cfg: RolloutConfig, fmt: ChatFormat, tasks: list[dict]):
    """The engine `cfg` names, as `rollout` and `collect` build it (`memory build` too): the scripted teacher
    over `tasks`, or a model's engine."""
    if cfg.engine == "scripted":
        from .envs.teacher import ScriptedTeacher

        return ScriptedTeacher(tasks, fmt.one_call_per_turn, cfg.environment)
    kwargs = dict(cfg.engine_kwargs)
    if cfg.engine == "openai":
        if not (cfg.base_url and cfg.teacher_model):
            raise ValueError("the openai engine needs --base-url and --teacher-model")
        kwargs.update(base_url=cfg.base_url, api_key=cfg.api_key)
    model = cfg.teacher_model if cfg.engine == "openai" else resolve_model(cfg.model)
    return make_engine(cfg.engine, model, fmt, cfg.sampling, **kwargs)
