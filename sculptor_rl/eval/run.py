"""Evaluate checkpoints: every model × mode × task family through the agent loop, then results and a report.

One engine at a time: a model's engine starts and runs all its modes; the next model's weights are loaded into
it when they fit (same architecture and tokenizer: base, SFT and RL checkpoints of one model), otherwise it is
shut down (its memory freed) and the next model's engine starts. `environment` picks the environment and with it
the modes and task families (the env's `eval_modes()` and `task_families`): `acm` (the ACM environment vs the
no-tool environments full/truncate/bm25, on the long-context families), `memtool` (the autonomous/workflow/hybrid
modes of MemTool on `memtool` sessions), or any registered one. Besides the usual metrics, each mode's summary
holds the env's own (`summarize(trajs, mode)`, e.g. MemTool's tool-management metrics) under the env's name.
Each (model, mode) run is saved under `OUT/runs/<model>/<mode>/` (trajectories and summary); a later call with
the same settings finds it and skips it, so an interrupted evaluation resumes.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..agent.chat import ChatFormat
from ..agent.loop import LoopConfig, run_rollouts
from ..config import load_config
from ..engines import SamplingConfig, make_engine
from ..envs import RewardConfig, env_class, make_env_factory, params_of
from ..envs.llm import LLMSettings
from ..jsonl import write_atomic
from ..metrics import per_rollout, summarize, summarize_by
from ..models import DEFAULT_MODEL, resolve_model
from ..envs.tasks import generate, load_tasks
from ..trajectory import write_trajectories
from .report import write_report

log = logging.getLogger(__name__)

__all__ = ["EvalConfig", "check_config", "evaluate", "eval_tasks", "model_labels"]

ENGINES = ("vllm", "ray", "hf")
ACM_MODES = tuple(env_class("acm").eval_modes())


@dataclass
class EvalConfig(LoopConfig, RewardConfig, LLMSettings):
    """The loop's (`LoopConfig`) and the reward's (`RewardConfig`) settings under the names rl and serve use."""

    models: list[str | None] = field(default_factory=lambda: [None])  # HF ids or checkpoint dirs; None: embedded
    environment: str = "acm"  # a registered environment (acm, memtool, ...): it sets the modes and task families
    environment_params: dict = field(default_factory=dict)  # merged over each mode's own (memtool: limit, ...)
    tasks: list[str] | None = None  # families to evaluate (filters --data too); None: the env's, or all in data
    modes: list[str] | None = None  # None: all of the env's (acm: acm,full,truncate,bm25; memtool: its three)
    # the modes of the models after the first (checkpoints trained from it: Table 2 runs the baselines on the base
    # model only); None: `modes`
    checkpoint_modes: list[str] | None = None
    num: int | None = None  # tasks per family (split over its sizes); None: 8 generated, all loaded
    sizes: dict[str, list[dict]] = field(default_factory=dict)  # per family: generator params, one per bucket
    data: str | None = None  # users' tasks (.jsonl, .parquet or a datasets name) instead of generated ones
    split: str = "test"  # the `datasets` split of `data`
    out: str = "runs/eval"
    engine: str = "vllm"  # vllm | ray (vLLM in Ray actors; engine_kwargs: num_workers, ray_address, ...) | hf
    seed: int = 0
    context_budget: int = 1500  # the truncate and bm25 environments' parameters (BaselineParams)
    chunk_tokens: int = 200
    max_model_len: int | None = None  # the engine's window (None: the model's)
    temperature: float = 0.0
    top_p: float = 1.0
    engine_kwargs: dict = field(default_factory=dict)

    def __post_init__(self):
        try:
            env = env_class(self.environment)
        except ValueError:  # reported by _check
            return
        if self.tasks is None and not self.data:  # with data: the families it holds (eval_tasks)
            self.tasks = list(env.task_families)
        self.modes = list(env.eval_modes()) if self.modes is None else self.modes

    @classmethod
    def from_yaml(cls, path: str | Path | None, /, **overrides) -> "EvalConfig":
        """The settings of the YAML file (if any), then `overrides` that are not None (command-line flags)."""
        return load_config(cls, path, overrides)

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_p=self.top_p, seed=self.seed)

    def mode_env(self, mode: str) -> tuple[str, dict]:
        """The environment that runs `mode` and its parameters: the mode's own, the baselines' budget (for an
        env that takes one), then the user's `environment_params`."""
        name, params = env_class(self.environment).eval_modes()[mode]
        takes = {f.name for f in dataclasses.fields(env_class(name).Params)}
        budget = {k: getattr(self, k) for k in ("context_budget", "chunk_tokens") if k in takes}
        return name, {**params, **budget, **self.environment_params}

    def make_env(self, mode: str, fmt: ChatFormat, engine):
        """The environment factory of `mode` (its LLM, `summarizer`, on `engine` or an endpoint)."""
        name, params = self.mode_env(mode)
        return make_env_factory(name, params, seed=self.seed, reward=RewardConfig.of(self), tokenizer=fmt.tokenizer,
                                llm=self.llm(engine, fmt))


def model_labels(models: list[str | None]) -> list[str]:
    """Short unique names: the last path part, or as many last parts as it takes to tell the models apart."""
    names = [DEFAULT_MODEL if m is None else str(m).rstrip("/") for m in models]
    if len(set(names)) < len(names):
        raise ValueError(f"a model is given twice: {names}")
    depth = 1
    while True:
        labels = ["/".join(Path(n).parts[-depth:]) for n in names]
        if len(set(labels)) == len(labels):
            return labels
        depth += 1


def check_config(cfg: EvalConfig) -> None:
    """What would stop an eval run, before any engine starts (ValueError, FileNotFoundError)."""
    env = cfg.environment
    modes, families = env_class(env).eval_modes(), env_class(env).task_families
    for mode in [*cfg.modes, *(cfg.checkpoint_modes or [])]:
        if mode not in modes:
            raise ValueError(f"unknown mode {mode!r} of environment {env} (known: {', '.join(modes)})")
    if cfg.checkpoint_modes is not None and not set(cfg.checkpoint_modes) <= set(cfg.modes):
        raise ValueError(f"checkpoint_modes {cfg.checkpoint_modes} must be among modes {cfg.modes}")
    for task in [*([] if cfg.data else cfg.tasks), *cfg.sizes]:  # loaded records: any family or benchmark
        if task not in families:
            raise ValueError(f"unknown task {task!r} for environment {env} (known: {', '.join(families)})")
    if "mode" in cfg.environment_params:
        raise ValueError("choose the modes with `modes` (--modes), not environment_params.mode")
    for mode in cfg.modes:  # unknown or bad parameters fail here, before any engine starts
        params_of(*cfg.mode_env(mode))
    if cfg.engine not in ENGINES:
        raise ValueError(f"unknown engine {cfg.engine!r} (eval runs on: {', '.join(ENGINES)})")
    if not (cfg.models and (cfg.tasks or cfg.data) and cfg.modes):
        raise ValueError("nothing to evaluate: models, tasks and modes must each name at least one")
    if cfg.num is not None and cfg.num < 1:
        raise ValueError(f"num must be at least 1, got {cfg.num}")
    for model in cfg.models:
        if model is not None and str(model).startswith(("/", ".", "~")) and not Path(model).expanduser().exists():
            raise FileNotFoundError(f"model path {model} does not exist")


def eval_tasks(cfg: EvalConfig) -> list[dict]:
    """The tasks: loaded from `cfg.data` (first `num` of each asked family) or generated, `num` per family
    spread over the family's sizes (bucket k generated with seed `seed + k`, so ids stay unique)."""
    if cfg.data:
        per_family: dict[str, list[dict]] = {}
        for record in load_tasks(cfg.data, cfg.split, environment=cfg.environment):
            if cfg.tasks is None or record["task"] in cfg.tasks:
                per_family.setdefault(record["task"], []).append(record)
        if not per_family:
            raise ValueError(f"{cfg.data} holds no task of the families {', '.join(cfg.tasks)}")
        return [r for family in cfg.tasks or per_family for r in per_family.get(family, [])[: cfg.num]]
    num, records = cfg.num or 8, []
    for family in cfg.tasks:
        sizes = cfg.sizes.get(family) or [{}]
        for k, params in enumerate(sizes):
            records += generate(family, num // len(sizes) + (k < num % len(sizes)), cfg.seed + k,
                                environment=cfg.environment, **params)
    return records


def _fingerprint(cfg: EvalConfig, path: str, mode: str, tasks: list[dict]) -> dict:
    """What a saved run depends on; a saved run is reused only when all of it matches."""
    digest = hashlib.sha256()
    for t in tasks:
        digest.update(json.dumps(t, sort_keys=True).encode())
    settings = {"model": path, "mode": mode, "engine": cfg.engine, "tasks_sha256": digest.hexdigest(),
                "num_tasks": len(tasks), "seed": cfg.seed, "max_model_len": cfg.max_model_len,
                "sampling": dataclasses.asdict(cfg.sampling), "loop": dataclasses.asdict(LoopConfig.of(cfg)),
                "reward": dataclasses.asdict(RewardConfig.of(cfg)), "environment": cfg.environment,
                "environment_params": cfg.environment_params}
    # the same paths with other contents (a retrained checkpoint, a regrown memory) are another run
    settings["files"] = {**_stamp(path), **_files(cfg.environment_params)}
    if mode in ("truncate", "bm25"):
        settings["context_budget"] = cfg.context_budget
    if mode == "bm25":
        settings["chunk_tokens"] = cfg.chunk_tokens
    return settings


def _stamp(path: str) -> dict:
    """What a file, or a folder's files, hold: sha256 of each small file, size and mtime of each large one (hashing
    a real model's weights would take minutes). Empty for a string that names no file."""
    if not path or len(path) > 4096:
        return {}
    root = Path(path)
    try:
        files = sorted(p for p in root.iterdir() if p.is_file()) if root.is_dir() else [root] if root.is_file() else []
        stamps = []
        for f in files:
            st = f.stat()
            big = st.st_size > 16 << 20
            stamps.append([f.name, st.st_size, st.st_mtime_ns if big else hashlib.sha256(f.read_bytes()).hexdigest()])
    except OSError:
        return {}
    return {path: stamps} if stamps else {}


def _files(params) -> dict:
    """`_stamp` of every string in an environment's parameters (a memory file, a store folder)."""
    if isinstance(params, dict):
        params = list(params.values())
    if isinstance(params, (list, tuple)):
        return {k: v for value in params for k, v in _files(value).items()}
    return _stamp(params) if isinstance(params, str) else {}


def _saved(run_dir: Path, settings: dict) -> dict | None:
    path = run_dir / "summary.json"
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    if saved.get("settings") != settings:
        changed = sorted(k for k in settings if saved.get("settings", {}).get(k) != settings[k])
        log.info("%s: settings changed (%s); evaluating again", run_dir, ", ".join(changed))
        return None
    return saved


def run_mode(tasks: list[dict], mode: str, engine, fmt: ChatFormat, cfg: EvalConfig) -> tuple[list, dict]:
    """Roll out every task in `mode`, one task family at a time (its wall time is measured on its own); the
    summary adds the env's own metrics (`Env.summarize`) under the env's name."""
    name, _ = cfg.mode_env(mode)
    make_env = cfg.make_env(mode, fmt, engine)
    # an env without tools (the baselines) gets no tool calls: its first completion is the answer
    no_tools = isinstance(env_class(name).tools, list) and not env_class(name).tools
    loop = dataclasses.replace(LoopConfig.of(cfg), max_tool_calls=0 if no_tools else cfg.max_tool_calls)
    bucket = {t["id"]: str(t.get("meta", {}).get("bucket", "all")) for t in tasks}
    trajs, per_task = [], {}
    for family in dict.fromkeys(t["task"] for t in tasks):
        group = [t for t in tasks if t["task"] == family]
        log.info("%s mode %s, %s: %d tasks", cfg.environment, mode, family, len(group))
        start = time.perf_counter()
        out = run_rollouts(group, engine, fmt, make_env, loop)
        wall = time.perf_counter() - start
        per_task[family] = _family_summary(out, wall, bucket, cfg)
        trajs += out
    summary = _mode_summary(mode, per_task, trajs, sum(s["wall_time"] for s in per_task.values()), cfg)
    own = env_class(cfg.environment).summarize(trajs, mode)
    return trajs, {**summary, **({cfg.environment: own} if own else {})}


def _family_summary(trajs: list, wall: float, bucket: dict[str, str], cfg: EvalConfig) -> dict:
    """One task family's rollouts in one mode: the usual metrics, its wall time and the per-bucket metrics."""
    return {**summarize(trajs, cfg.correct_threshold), "wall_time": wall,
            "buckets": summarize_by(trajs, lambda t: bucket[t.task_id], cfg.correct_threshold)}


def _mode_summary(mode: str, per_task: dict, trajs: list, wall: float, cfg: EvalConfig) -> dict:
    accuracies = [s["accuracy"] for s in per_task.values()]
    return {"mode": mode, "tasks": per_task, "average": sum(accuracies) / len(accuracies),
            "overall": summarize(trajs, cfg.correct_threshold), "wall_time": wall,
            "rollouts": per_rollout(trajs, cfg.correct_threshold)}  # paired comparisons in the report


def reloadable(running: str | None, path: str) -> bool:
    """Whether the weights at `path` can be loaded into an engine started on `running` instead of starting a
    new engine (~1 min on CPU): same architecture and shapes, same tokenizer (the engine's stop ids)."""
    if running is None:
        return False

    def shape(p: str) -> dict | None:
        f = Path(p) / "config.json"
        if not f.exists():  # a Hub id: compare only what is local
            return None
        skip = {"_name_or_path", "torch_dtype", "dtype", "transformers_version", "use_cache"}
        return {k: v for k, v in json.loads(f.read_text()).items() if k not in skip}

    def vocab(p: str) -> str | None:
        f = Path(p) / "tokenizer.json"
        return hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else None

    a, b = shape(running), shape(path)
    return a is not None and a == b and vocab(running) == vocab(path) is not None


def shutdown(engine) -> None:
    """Stop an engine that holds memory outside Python (vLLM); others free it with their last reference."""
    if hasattr(engine, "close"):
        engine.close()


def _free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def evaluate(cfg: EvalConfig, engine=None) -> dict:
    """Evaluate every model in every mode on the tasks; write runs, `results.json`, the tables and the plots
    under `cfg.out`; return the results. `engine`: an engine already serving the (single) model, used as it
    is (its own sampling settings) and left running."""
    check_config(cfg)
    if engine is not None and len(cfg.models) != 1:
        raise ValueError("an engine passed in serves one model; evaluate several models without one")
    formats = {}
    for model in cfg.models:  # tokenizers first: a bad model name fails before any work starts
        try:
            formats[model] = ChatFormat.of(resolve_model(model), cfg)
        except (OSError, ValueError) as e:
            where = "checkpoint directory" if Path(str(model)).exists() else "not a local directory; Hub id"
            raise ValueError(f"cannot load model {model!r} ({where}): {e}") from e
    tasks = eval_tasks(cfg)
    families = list(dict.fromkeys(t["task"] for t in tasks))
    log.info("%d tasks: %s", len(tasks), ", ".join(f"{f} {sum(t['task'] == f for t in tasks)}" for f in families))
    out = Path(cfg.out)
    runs, labels = [], model_labels(cfg.models)
    live, live_path = engine, None  # an engine we started stays up for the next model when its weights fit
    for k, (label, model) in enumerate(zip(labels, cfg.models)):
        path, fmt = resolve_model(model), formats[model]
        modes = cfg.modes if k == 0 or cfg.checkpoint_modes is None else cfg.checkpoint_modes
        run_dirs = {mode: out / "runs" / re.sub(r"[^\w.-]+", "_", label) / mode for mode in modes}
        settings = {mode: _fingerprint(cfg, path, mode, tasks) for mode in modes}
        done = {mode: s for mode in modes if (s := _saved(run_dirs[mode], settings[mode]))}
        for mode in done:
            log.info("%s / %s: results in %s; skipping", label, mode, run_dirs[mode])
        todo = [mode for mode in modes if mode not in done]
        if todo:
            if engine is None and live is not None and live_path != path:  # an engine we started, on another model
                if hasattr(live, "reload_weights") and reloadable(live_path, path):
                    log.info("%s: loading %s into the running engine", label, path)
                    live.reload_weights(path)
                else:
                    shutdown(live)
                    live = None
                    _free_memory()
            if live is None:
                log.info("%s: starting the %s engine on %s", label, cfg.engine, path)
                live = make_engine(cfg.engine, path, fmt, cfg.sampling, max_model_len=cfg.max_model_len,
                                   **cfg.engine_kwargs)
            live_path = path
            try:
                for mode in todo:
                    trajs, summary = run_mode(tasks, mode, live, fmt, cfg)
                    done[mode] = {"model": label, "path": path, **summary, "settings": settings[mode]}
                    run_dirs[mode].mkdir(parents=True, exist_ok=True)
                    write_trajectories(trajs, run_dirs[mode] / "trajectories.jsonl")
                    # written last, each whole or not at all: a run with a summary is complete
                    write_atomic(run_dirs[mode] / "summary.json", json.dumps(done[mode], indent=1))
                    log.info("%s / %s: average accuracy %.3f (%.0f s)", label, mode, summary["average"],
                             summary["wall_time"])
            except BaseException:
                if engine is None:
                    shutdown(live)
                raise
        runs += [done[mode] for mode in modes]
    if engine is None and live is not None:
        shutdown(live)
        _free_memory()
    results = {"environment": cfg.environment, "tasks": families, "models": labels, "modes": list(cfg.modes),
               "runs": runs,
               "config": dataclasses.asdict(cfg)}
    write_report(results, out)
    return results
