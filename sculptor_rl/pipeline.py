"""The quickstart pipeline: tasks → teacher trajectories → samples → SFT → GSPO → eval → report.

    sculptor-rl pipeline --config configs/quickstart.yaml [--name NAME] [--only STAGE ...]

Every stage writes into `runs/<name>/<stage>/` and a `done.json` (timing, outputs) last; a stage whose
`done.json` exists is skipped, so an interrupted run (even one killed with `kill -9`) resumes where it stopped:
inside a stage the rollouts resume from their finished chunks, the trainers from their last checkpoint and eval
from its finished (model, mode) runs; every file appears whole. Delete a stage's folder to run it again. SFT,
RL and eval take their settings from their own config files (`sft_config`, `rl_config`, `eval`), with the run's
paths filled in.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from .config import check_values, load_config
from .jsonl import write_atomic

log = logging.getLogger(__name__)


@dataclass
class PipelineConfig:
    name: str = "quickstart"
    runs_dir: str = "runs"
    seed: int = 0
    model: str | None = None  # None: the embedded SmolLM2-135M-Instruct
    task: str = "pi_llm"  # the family trained and evaluated
    task_params: dict = field(default_factory=dict)
    train_tasks: int = 40
    eval_tasks: int = 30
    rl_tasks: int = 64
    teacher_tasks: int = 50  # per family, for the teachers' report
    sft_config: str = "configs/acm/sft_quickstart_cpu.yaml"
    sft: dict = field(default_factory=dict)  # SculptorSFTConfig fields overriding sft_config
    rl_config: str = "configs/acm/rl_quickstart_cpu.yaml"
    rl: dict = field(default_factory=dict)  # SculptorGRPOConfig fields overriding rl_config
    eval: dict = field(default_factory=dict)  # EvalConfig fields (modes, temperature, max_new_tokens, ...)

    @classmethod
    def from_yaml(cls, path: str) -> "PipelineConfig":
        """The config, its stages' sections (`eval`, `sft`, `rl`) checked too, before any stage runs."""
        from .eval.run import EvalConfig
        from .train.rl_config import SculptorGRPOConfig
        from .train.sft import SculptorSFTConfig

        cfg = load_config(cls, path)
        for section, kind in (("eval", EvalConfig), ("sft", SculptorSFTConfig), ("rl", SculptorGRPOConfig)):
            check_values(kind, getattr(cfg, section), f"{path} ({section})")
        return cfg


class Run:
    """A run folder with one sub-folder per stage; prints one line per stage with its timing."""

    def __init__(self, cfg: PipelineConfig, stages: list[str]):
        self.cfg, self.stages = cfg, stages
        self.root = Path(cfg.runs_dir) / cfg.name
        self.root.mkdir(parents=True, exist_ok=True)
        self.start = time.perf_counter()

    def dir(self, stage: str) -> Path:
        return self.root / stage

    def stage(self, name: str, fn) -> dict:
        done = self.dir(name) / "done.json"
        k = self.stages.index(name) + 1
        if done.exists():
            info = json.loads(done.read_text())
            print(f"[{k}/{len(self.stages)}] {name}: done already ({info['seconds']:.0f} s), skipped", flush=True)
            return info
        print(f"[{k}/{len(self.stages)}] {name} ...", flush=True)
        self.dir(name).mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        info = fn(self.dir(name)) or {}
        info["seconds"] = time.perf_counter() - t
        write_atomic(done, json.dumps(info, indent=2))  # whole or absent: a kill here reruns the stage
        print(f"[{k}/{len(self.stages)}] {name}: {info['seconds']:.0f} s "
              f"(total {time.perf_counter() - self.start:.0f} s)", flush=True)
        return info


def _data(cfg: PipelineConfig):
    from .longcontext import FAMILIES
    from .envs.tasks import generate
    from .jsonl import write_jsonl

    def run(out: Path) -> dict:
        write_jsonl(generate(cfg.task, cfg.train_tasks, cfg.seed, **cfg.task_params), out / "train.jsonl")
        # held-out tasks: another seed, so no task is shared with training
        write_jsonl(generate(cfg.task, cfg.eval_tasks, cfg.seed + 1000, **cfg.task_params), out / "eval.jsonl")
        write_jsonl(generate(cfg.task, cfg.rl_tasks, cfg.seed + 3000, **cfg.task_params), out / "rl.jsonl")
        for family in FAMILIES:
            write_jsonl(generate(family, cfg.teacher_tasks, cfg.seed + 2000), out / f"teacher_{family}.jsonl")
        return {"train": str(out / "train.jsonl"), "eval": str(out / "eval.jsonl")}

    return run


def _teachers(cfg: PipelineConfig, data: Path):
    """Every family's scripted teacher on its tasks: accuracy and context reduction (issue: foundations)."""
    from .metrics import format_table, summarize_by_task
    from .rollout import RolloutConfig, rollout_to_file
    from .longcontext import FAMILIES
    from .envs.tasks import load_tasks

    def run(out: Path) -> dict:
        tasks = [t for family in FAMILIES for t in load_tasks(data / f"teacher_{family}.jsonl")]
        trajs = rollout_to_file(tasks, RolloutConfig(engine="scripted", model=cfg.model, seed=cfg.seed),
                                out / "trajectories.jsonl")
        summary = summarize_by_task(trajs)
        table = format_table(summary)
        write_atomic(out / "teachers.md", table + "\n")
        print(table)
        return {"summary": summary}

    return run


def _collect(cfg: PipelineConfig, data: Path):
    """Scripted-teacher trajectories on the training tasks, turned into Algorithm 1 samples."""
    from .agent.chat import ChatFormat
    from .models import resolve_model
    from .rollout import RolloutConfig, rollout_to_file
    from .samples import policy_samples, write_samples
    from .envs.tasks import load_tasks

    def run(out: Path) -> dict:
        fmt = ChatFormat.from_pretrained(resolve_model(cfg.model))
        trajs = rollout_to_file(load_tasks(data / "train.jsonl"), RolloutConfig(engine="scripted", model=cfg.model),
                                out / "trajectories.jsonl", keep=lambda t: t.reward >= 1.0, fmt=fmt)
        kept = [t for t in trajs if t.reward >= 1.0]
        samples = policy_samples(kept, fmt.provenance)
        write_samples(samples, out / "samples.jsonl")
        tokens = sum(len(s.input_ids) for s in samples)
        print(f"kept {len(kept)}/{len(trajs)} teacher trajectories → {len(samples)} samples, {tokens} tokens")
        return {"trajectories": len(kept), "samples": len(samples), "tokens": tokens}

    return run


def _sft(cfg: PipelineConfig, samples: Path):
    from .train.sft import SculptorSFTConfig, train

    def run(out: Path) -> dict:
        paths = {"output_dir": str(out), "model": cfg.model, "samples": str(samples), "seed": cfg.seed}
        return {"checkpoint": str(train(load_config(SculptorSFTConfig, cfg.sft_config, {**cfg.sft, **paths},
                                                    "pipeline sft")))}

    return run


def _rl(cfg: PipelineConfig, start: Path, tasks: Path):
    from .train.rl import SculptorGRPOConfig, train

    def run(out: Path) -> dict:
        paths = {"output_dir": str(out), "model": str(start), "tasks": str(tasks), "seed": cfg.seed}
        return {"checkpoint": str(train(load_config(SculptorGRPOConfig, cfg.rl_config, {**cfg.rl, **paths},
                                                    "pipeline rl")))}

    return run


def _eval(cfg: PipelineConfig, models: dict[str, str | None], tasks: Path):
    from .eval.run import EvalConfig, evaluate

    def run(out: Path) -> dict:
        settings = {"modes": ["acm", "full"], **cfg.eval}
        paths = dict(models=list(models.values()), tasks=[cfg.task], data=str(tasks), out=str(out), seed=cfg.seed)
        results = evaluate(load_config(EvalConfig, None, {**settings, **paths}, "pipeline eval"))
        return {"models": models, "results": str(out / "results.json"), "modes": results["modes"]}

    return run


def _report(run: Run):
    """`report.md` in the run folder: stage times, the teachers' table, the eval table and the plots."""

    def go(out: Path) -> dict:
        rows = []
        for name in run.stages[:-1]:
            done = run.dir(name) / "done.json"
            if done.exists():
                rows.append(f"| {name} | {json.loads(done.read_text())['seconds']:.0f} |")
        parts = [f"# sculptor-rl run `{run.cfg.name}`", "", "## Stages", "", "| stage | seconds |", "|---|---|", *rows]
        for title, path in [("Scripted teachers (50 tasks per family)", run.dir("teachers") / "teachers.md"),
                            ("Evaluation on held-out tasks (accuracy %)", run.dir("eval") / "results.md")]:
            if path.exists():
                parts += ["", f"## {title}", "", path.read_text().strip()]
        for title, path in [("SFT training curves", run.dir("sft") / "curves.png"),
                            ("RL training curves", run.dir("rl") / "curves.png"),
                            ("Accuracy vs context length", run.dir("eval") / "accuracy_vs_length.png"),
                            ("Tool usage", run.dir("eval") / "tool_usage.png")]:
            if path.exists():
                parts += ["", f"## {title}", "", f"![{title}]({path.relative_to(run.root)})"]
        report = run.root / "report.md"
        write_atomic(report, "\n".join(parts) + "\n")
        print(f"report: {report}")
        return {"report": str(report)}

    return go


STAGES = ["data", "teachers", "collect", "sft", "rl", "eval", "report"]


def run_pipeline(cfg: PipelineConfig, only: list[str] | None = None) -> Path:
    run = Run(cfg, STAGES)
    wanted = set(only or STAGES)
    unknown = wanted - set(STAGES)
    if unknown:
        raise ValueError(f"unknown stages {sorted(unknown)}; stages are {', '.join(STAGES)}")
    plan = {
        "data": lambda: _data(cfg),
        "teachers": lambda: _teachers(cfg, run.dir("data")),
        "collect": lambda: _collect(cfg, run.dir("data")),
        "sft": lambda: _sft(cfg, run.dir("collect") / "samples.jsonl"),
        "rl": lambda: _rl(cfg, run.dir("sft") / "final", run.dir("data") / "rl.jsonl"),
        "eval": lambda: _eval(cfg, {"base": cfg.model, "sft": str(run.dir("sft") / "final"),
                                    "rl": str(run.dir("rl") / "final")}, run.dir("data") / "eval.jsonl"),
        "report": lambda: _report(run),
    }
    for name in STAGES:
        if name in wanted:
            run.stage(name, plan[name]())
    return run.root
