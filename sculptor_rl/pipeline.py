"""The pipeline: tasks → teacher trajectories → samples → SFT → GSPO → eval → report, for any model and environment.

    sculptor-rl pipeline --config configs/quickstart.yaml [--name NAME] [--only STAGE ...]
    sculptor-rl pipeline --model PATH --environment pkg.mod:Class [--set rl.max_steps=2 ...] [--dry-run]

The environment (a built-in, an import path or an entry point) makes the tasks of its families and teaches them
(its registry entry for a built-in, its `generate` and `teach` hooks for a user's: `envs/base.py`); `--dry-run`
builds and checks every stage's config (and a task of each family) and exits before any work.

Every stage writes into `runs/<name>/<stage>/` and a `done.json` (timing, outputs) last; a stage whose
`done.json` exists is skipped, so an interrupted run (even one killed with `kill -9`) resumes where it stopped:
inside a stage the rollouts resume from their finished chunks, the trainers from their last checkpoint and eval
from its finished (model, mode) runs; every file appears whole. Delete a stage's folder to run it again. SFT,
RL and eval take their settings from their own config files (`sft_config`, `rl_config`, `eval`), with the run's
paths filled in.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from .config import check_values, load_config, read_yaml, shipped
from .envs.registry import env_class, family_names, missing_family, params_of
from .jsonl import write_atomic
from .models import parameter_count, resolve_model
from .probe import Probe, RecipeShape

log = logging.getLogger(__name__)

EVAL_MODES = ["acm", "full"]  # the eval stage's modes where the config's `eval` names none
CHECKPOINTS = ["sft", "rl"]  # the stages whose final checkpoints the eval stage can evaluate
RECIPES = ("full", "small", "smaller", "smallest")  # a config's recipe and its nested `small_recipe`s
# docs/models.md's recipes by size class: on a GPU, the SFT and RL configs of a model with up to `up_to` parameters
# (written for the Qwen3 of that size; the pipeline's model, chat settings and paths replace theirs)
SIZE_CLASSES = {
    "0.6B": {"up_to": 1.0e9, "sft_config": "configs/acm/sft_qwen3_0.6b.yaml",
             "rl_config": "configs/acm/rl_qwen3_0.6b_gspo.yaml"},
    "1.7B": {"up_to": 2.5e9, "sft_config": "configs/acm/sft_qwen3_1.7b.yaml",
             "rl_config": "configs/acm/rl_qwen3_1.7b_gspo.yaml"},
    "4B LoRA": {"up_to": 6.0e9, "sft_config": "configs/acm/sft_qwen3_4b_lora.yaml",
                "rl_config": "configs/acm/rl_qwen3_4b_gspo_lora.yaml"},
    "8B cluster": {"up_to": float("inf"), "sft_config": "configs/acm/sft_qwen3_8b.yaml",
                   "rl_config": "configs/acm/rl_qwen3_8b_gspo.yaml"},
}


@dataclass
class PipelineConfig:
    name: str = "quickstart"
    runs_dir: str = "runs"
    seed: int = 0
    model: str | None = None  # None: the embedded SmolLM2-135M-Instruct
    # the model's chat format in every stage (docs/models.md): a template file or named variant, its kwargs, the
    # tool-call parser; the SFT checkpoint keeps the template its samples were made with
    chat_template: str | None = None
    chat_template_kwargs: dict = field(default_factory=dict)
    parser: str = "auto"
    # the environment every stage runs (a built-in, package.module:Class or an entry point) and its parameters
    environment: str = "acm"
    environment_params: dict = field(default_factory=dict)
    task: str = "pi_llm"  # the family trained and evaluated (where `train_mix`/`heldout` are not given)
    task_params: dict = field(default_factory=dict)  # `task`'s generator parameters
    # The paper's protocol: train on a mix of families, evaluate on others (configs/paper_protocol.yaml)
    train_mix: dict[str, float] = field(default_factory=dict)  # family -> weight of the SFT and RL tasks; {}: task
    heldout: list[str] = field(default_factory=list)  # families evaluated (another seed); []: [task]
    family_params: dict[str, dict] = field(default_factory=dict)  # generator parameters of the other families
    train_tasks: int = 40
    eval_tasks: int = 30
    rl_tasks: int = 64
    teacher_tasks: int = 50  # per family, for the teachers' report
    sft_config: str = "configs/acm/sft_quickstart_cpu.yaml"
    sft: dict = field(default_factory=dict)  # SculptorSFTConfig fields overriding sft_config
    rl_config: str = "configs/acm/rl_quickstart_cpu.yaml"
    rl: dict = field(default_factory=dict)  # SculptorGRPOConfig fields overriding rl_config
    eval: dict = field(default_factory=dict)  # EvalConfig fields (modes, checkpoint_modes, temperature, ...)
    # the trained checkpoints the eval stage compares with the base model on the held-out tasks
    eval_checkpoints: list[str] = field(default_factory=lambda: list(CHECKPOINTS))
    # the stages this recipe runs, of STAGES (a smaller recipe may leave out rl); `--only` runs a subset of them
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    # Before the first stage a short probe prints each stage's estimated time on this machine (sculptor_rl/probe.py);
    # where the estimate exceeds `budget_minutes`, the fields of `small_recipe` replace these (a smaller recipe on a
    # slower CPU, said in the log and the report), and where that one would not fit either, the `small_recipe` it
    # holds (`RECIPES` names them). The choice is saved in the run folder: a resumed run keeps it.
    budget_minutes: float | None = None
    small_recipe: dict = field(default_factory=dict)

    @classmethod
    def from_yaml(cls, path: str | None, overrides: dict | None = None) -> "PipelineConfig":
        """The config, its stages' sections (`eval`, `sft`, `rl`) checked too, before any stage runs. `overrides`
        (the command line's: `--set key.sub=value`, `--model`, `--environment`, ...) replace the file's keys, a
        section's keys one by one. An environment given there whose families do not hold the file's `task` brings
        its own first family (and drops the file's family settings)."""
        from .eval.run import EvalConfig
        from .train.rl_config import SculptorGRPOConfig
        from .train.sft import SculptorSFTConfig

        values = read_yaml(path) if path else {}
        overrides = dict(overrides or {})
        if "environment" in overrides and "task" not in overrides:
            families = env_class(overrides["environment"]).task_families
            if families and values.get("task", cls.task) not in families:
                overrides["task"] = families[0]
                for key in ("task_params", "train_mix", "heldout", "family_params"):
                    overrides.setdefault(key, {} if key != "heldout" else [])
        merged = {k: {**values[k], **v} if isinstance(v, dict) and isinstance(values.get(k), dict)
                  and k not in ("train_mix", "task_params", "family_params") else v for k, v in overrides.items()}
        cfg = load_config(cls, path, merged, "the command line", keep_none=True)  # --set key=null: no value
        source = path or "the command line"
        for k, recipe in enumerate(cfg.recipes(source)):
            for section, kind in (("eval", EvalConfig), ("sft", SculptorSFTConfig), ("rl", SculptorGRPOConfig)):
                check_values(kind, getattr(recipe, section), f"{source} ({'small_recipe ' * k}{section})")
            recipe.check()
        return cfg

    @property
    def mix(self) -> dict[str, float]:
        return self.train_mix or {self.task: 1.0}

    @property
    def eval_families(self) -> list[str]:
        return self.heldout or [self.task]

    def params(self, family: str) -> dict:
        return {**self.family_params.get(family, {}), **(self.task_params if family == self.task else {})}

    def check(self) -> None:
        """Unknown families and bad weights fail before any stage runs."""
        env = env_class(self.environment)
        params_of(self.environment, self.environment_params)
        known = [*env.task_families] or family_names()
        for family in [*self.mix, *self.eval_families, *self.family_params]:
            if family not in known:
                raise ValueError(f"unknown task family {family!r} for the {self.environment} environment "
                                 f"(its task_families: {', '.join(known) or 'none'}); "
                                 + missing_family(family, self.environment))
        if any(w < 0 for w in self.mix.values()) or sum(self.mix.values()) <= 0:
            raise ValueError(f"train_mix: weights must be >= 0 with a positive sum, got {self.mix}")
        if not set(self.eval_checkpoints) <= set(CHECKPOINTS):
            raise ValueError(f"eval_checkpoints: a list of {', '.join(CHECKPOINTS)}, got {self.eval_checkpoints}")
        if not set(self.stages) <= set(STAGES):
            raise ValueError(f"stages: a list of {', '.join(STAGES)}, got {self.stages}")
        if left_out := [c for c in self.eval_checkpoints if c not in self.stages]:
            raise ValueError(f"eval_checkpoints: {', '.join(left_out)} is not among this recipe's stages")

    def replaced(self, changes: dict) -> "PipelineConfig":
        """This config with `changes` (fields; the `sft`, `rl`, `eval`, `task_params` and `family_params` sections
        merged key by key)."""
        merged = {k: {**getattr(self, k), **v} if isinstance(v, dict) and k not in ("train_mix", "small_recipe")
                  else v for k, v in changes.items()}
        return dataclasses.replace(self, **merged)

    def recipes(self, source: str = "config") -> list["PipelineConfig"]:
        """This recipe and its smaller ones, largest first (`RECIPES` names them): each `small_recipe`'s fields
        (checked; errors name `source`) replace the recipe before it, and the `small_recipe` it holds is the next."""
        chain, where = [self], "small_recipe"
        while chain[-1].small_recipe:
            if len(chain) == len(RECIPES):
                raise ValueError(f"{source}: small_recipe: at most {len(RECIPES) - 1} nested ({', '.join(RECIPES)})")
            check_values(PipelineConfig, chain[-1].small_recipe, f"{source} ({where})")
            chain.append(chain[-1].replaced({"small_recipe": {}, **chain[-1].small_recipe}))
            where += " small_recipe"
        return chain

    def estimate(self, times: Probe | None = None) -> tuple[dict[str, float], Probe]:
        """Each stage's estimated seconds on this machine, and the probe's timings (probed now unless given)."""
        from .probe import estimate, probe

        shape = recipe_shape(self, self.mixed(4, self.seed), self.heldout_tasks(2))
        times = times or probe(self.model, shape.sample_tokens, shape.prompt_tokens)
        sft, rl = (_section(*_stage_file(self, stage)) for stage in ("sft", "rl"))
        modes = self.eval.get("modes", EVAL_MODES)
        later = self.eval.get("checkpoint_modes") or modes
        n = self.eval_tasks * len(self.eval_families)
        trained = len(self.eval_checkpoints)
        runs = {"once": n * (len(modes) + trained * sum(m != "acm" for m in later)),
                "tools": n * trained * ("acm" in later)}
        rl_steps = rl.get("max_steps", 0) if "rl" in self.stages else 0
        return estimate(times, shape, self.train_tasks, sft.get("num_train_epochs", 3), rl_steps, runs), times

    def heldout_tasks(self, num: int) -> list[dict]:
        """`num` held-out tasks of each evaluated family (another seed than training's: no task is shared)."""
        from .envs.tasks import generate

        return [r for f in self.eval_families
                for r in generate(f, num, self.seed + 1000, environment=self.environment, **self.params(f))]

    def mixed(self, num: int, seed: int) -> list[dict]:
        """`num` tasks of the training mix: each family's share by its weight (largest remainders), interleaved so
        that any prefix of the list (a short RL run) holds the families in proportion."""
        from .envs.tasks import generate

        total = sum(self.mix.values())
        exact = {f: num * w / total for f, w in self.mix.items()}
        counts = {f: int(x) for f, x in exact.items()}
        for f in sorted(exact, key=lambda f: counts[f] - exact[f])[: num - sum(counts.values())]:
            counts[f] += 1
        lists = {f: generate(f, n, seed, environment=self.environment, **self.params(f)) for f, n in counts.items() if n}
        # interleave by position within each family's list: the i-th task of a family sits at (i + 0.5) / n
        keyed = [((i + 0.5) / len(rs), f, r) for f, rs in lists.items() for i, r in enumerate(rs)]
        return [r for _, _, r in sorted(keyed, key=lambda x: x[:2])]


def recipe_shape(cfg: PipelineConfig, train: list[dict], heldout: list[dict]) -> RecipeShape:
    """The scripted teacher on `train` (a few tasks) gives samples per rollout and their length; `heldout`'s first
    prompts give the eval's prompt length."""
    from .agent.chat import ChatFormat
    from .models import resolve_model
    from .rollout import rollout
    from .samples import policy_samples

    teacher = _teacher(cfg)
    fmt = ChatFormat.of(resolve_model(cfg.model), teacher)
    trajs = rollout(train, teacher, fmt=fmt, progress=False)
    samples = policy_samples(trajs, fmt.provenance)
    prompts = [t.steps[0].prompt_ids for t in rollout(heldout, teacher, fmt=fmt, progress=False) if t.steps]
    prompt_tokens = round(statistics.mean(len(p) for p in prompts))
    shared = len(os.path.commonprefix(prompts)) if len(prompts) > 1 else 0
    return RecipeShape(samples_per_rollout=len(samples) / max(len(trajs), 1),
                       sample_tokens=round(statistics.mean(len(s.input_ids) for s in samples)),
                       prompt_tokens=prompt_tokens, prompt_new_tokens=prompt_tokens - shared)


def _section(path: str, overrides: dict) -> dict:
    """A stage's settings as the pipeline will pass them: its config file's, then the pipeline's overrides."""
    import yaml

    return {**(yaml.safe_load(Path(path).read_text()) or {}), **overrides}


def _stage_file(cfg: PipelineConfig, stage: str) -> tuple[str, dict]:
    """A training stage's config file (`sft_config`, `rl_config`) found as `shipped` finds it, and the pipeline's
    overrides of it, with its DeepSpeed file (`configs/deepspeed/...`) found the same way."""
    path = shipped(getattr(cfg, f"{stage}_config"), f"--set {stage}_config=FILE")
    overrides = dict(getattr(cfg, stage))
    deepspeed = _section(path, overrides).get("deepspeed")
    if isinstance(deepspeed, str):
        overrides["deepspeed"] = shipped(deepspeed, f"--set {stage}.deepspeed=FILE")
    return path, overrides


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


def teacher_families(cfg: PipelineConfig) -> list[str]:
    """The families the teachers' report runs: the environment's (every built-in long-context one for acm)."""
    return list(env_class(cfg.environment).task_families) or list(cfg.mix)


def _data(cfg: PipelineConfig):
    from .envs.tasks import generate
    from .jsonl import write_jsonl

    def run(out: Path) -> dict:
        write_jsonl(cfg.mixed(cfg.train_tasks, cfg.seed), out / "train.jsonl")
        write_jsonl(cfg.heldout_tasks(cfg.eval_tasks), out / "eval.jsonl")
        write_jsonl(cfg.mixed(cfg.rl_tasks, cfg.seed + 3000), out / "rl.jsonl")
        for family in teacher_families(cfg):
            write_jsonl(generate(family, cfg.teacher_tasks, cfg.seed + 2000, environment=cfg.environment),
                        out / f"teacher_{family}.jsonl")
        return {"train": str(out / "train.jsonl"), "eval": str(out / "eval.jsonl")}

    return run


def _format(cfg: PipelineConfig) -> dict:
    return {"chat_template": cfg.chat_template, "chat_template_kwargs": cfg.chat_template_kwargs or None,
            "parser": cfg.parser}


def _teacher(cfg: PipelineConfig, **settings):
    """The scripted teachers, writing in the model's chat format."""
    from .rollout import RolloutConfig

    return RolloutConfig(engine="scripted", model=cfg.model, environment=cfg.environment,
                         environment_params=cfg.environment_params, **_format(cfg), **settings)


def _teachers(cfg: PipelineConfig, data: Path):
    """Every family's scripted teacher on its tasks: accuracy and context reduction (issue: foundations)."""
    from .metrics import format_table, summarize_by_task
    from .rollout import rollout_to_file
    from .envs.tasks import load_tasks

    def run(out: Path) -> dict:
        tasks = [t for family in teacher_families(cfg)
                 for t in load_tasks(data / f"teacher_{family}.jsonl", environment=cfg.environment)]
        trajs = rollout_to_file(tasks, _teacher(cfg, seed=cfg.seed), out / "trajectories.jsonl")
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
    from .rollout import rollout_to_file
    from .samples import policy_samples, write_samples
    from .envs.tasks import load_tasks

    def run(out: Path) -> dict:
        teacher = _teacher(cfg)
        fmt = ChatFormat.of(resolve_model(cfg.model), teacher)
        trajs = rollout_to_file(load_tasks(data / "train.jsonl", environment=cfg.environment), teacher,
                                out / "trajectories.jsonl",
                                keep=lambda t: t.reward >= 1.0, fmt=fmt)
        kept = [t for t in trajs if t.reward >= 1.0]
        samples = policy_samples(kept, fmt.provenance)
        write_samples(samples, out / "samples.jsonl")
        tokens = sum(len(s.input_ids) for s in samples)
        print(f"kept {len(kept)}/{len(trajs)} teacher trajectories → {len(samples)} samples, {tokens} tokens")
        return {"trajectories": len(kept), "samples": len(samples), "tokens": tokens}

    return run


def _sft(cfg: PipelineConfig, samples: Path):
    from .train.sft import train

    def run(out: Path) -> dict:
        return {"checkpoint": str(train(_sft_config(cfg, samples, out)))}

    return run


def _rl(cfg: PipelineConfig, start: Path, tasks: Path):
    from .train.rl import train

    def run(out: Path) -> dict:
        return {"checkpoint": str(train(_rl_config(cfg, start, tasks, out)))}

    return run


def _rl_config(cfg: PipelineConfig, start, tasks, out):
    """The RL stage's config: its file's settings, the pipeline's `rl` overrides, the run's paths and environment."""
    from .train.rl_config import SculptorGRPOConfig

    paths = {"output_dir": str(out), "model": str(start) if start else None, "tasks": str(tasks), "seed": cfg.seed,
             "environment": cfg.environment, "environment_params": cfg.environment_params or None, **_format(cfg)}
    path, overrides = _stage_file(cfg, "rl")
    asked = _section(path, overrides)
    if (asked.get("heldout_steps") or asked.get("eval_strategy") == "steps") and not asked.get("heldout_tasks"):
        paths["heldout_tasks"] = str(Path(tasks).with_name("eval.jsonl"))  # held-out evaluation: the run's eval tasks
    return load_config(SculptorGRPOConfig, path, {**overrides, **paths}, "pipeline rl")


def _sft_config(cfg: PipelineConfig, samples, out):
    from .train.sft import SculptorSFTConfig

    paths = {"output_dir": str(out), "model": cfg.model, "samples": str(samples), "seed": cfg.seed,
             **_format(cfg)}  # the chat format the samples were made with: SFT refuses samples of another
    path, overrides = _stage_file(cfg, "sft")
    return load_config(SculptorSFTConfig, path, {**overrides, **paths}, "pipeline sft")


def _eval_config(cfg: PipelineConfig, models: list[str | None], tasks, out):
    from .eval.run import EvalConfig

    modes = EVAL_MODES if cfg.environment == "acm" else None  # None: the environment's own modes
    settings = {"modes": modes, **_format(cfg), **cfg.eval}
    paths = dict(models=models, tasks=cfg.eval_families, data=str(tasks), out=str(out), seed=cfg.seed,
                 environment=cfg.environment, environment_params=cfg.environment_params or None)
    return load_config(EvalConfig, None, {**settings, **paths}, "pipeline eval")


def _eval(cfg: PipelineConfig, models: dict[str, str | None], tasks: Path):
    from .eval.run import evaluate

    def run(out: Path) -> dict:
        results = evaluate(_eval_config(cfg, list(models.values()), tasks, out))
        return {"models": models, "results": str(out / "results.json"), "modes": results["modes"]}

    return run


def _report(run: Run):
    """`report.md` in the run folder: stage times, the teachers' table, the eval table and the plots."""

    def go(out: Path) -> dict:
        parts = [f"# sculptor-rl run `{run.cfg.name}`", "", "## Stages", "", *_stage_table(run)]
        for title, path in [(f"Scripted teachers ({run.cfg.teacher_tasks} tasks per family)",
                             run.dir("teachers") / "teachers.md"),
                            ("Evaluation on held-out tasks (accuracy %)", run.dir("eval") / "results.md")]:
            if path.exists():
                parts += ["", f"## {title}", "", path.read_text().strip()]
        for title, path in [("SFT training curves", run.dir("sft") / "curves.png"),
                            ("RL training curves", run.dir("rl") / "curves.png"),
                            ("Accuracy vs context length", run.dir("eval") / "accuracy_vs_length.png"),
                            ("Tool usage", run.dir("eval") / "tool_usage.png")]:
            if path.exists():
                parts += ["", f"## {title}", "", f"![{title}]({path.relative_to(run.root)})"]
        parts += _rl_effect(run)
        report = run.root / "report.md"
        write_atomic(report, "\n".join(parts) + "\n")
        print(f"report: {report}")
        return {"report": str(report)}

    return go


def _stage_table(run: Run) -> list[str]:
    """Each stage's measured seconds, next to the probe's estimate where the run made one (plan.json)."""
    seconds = {name: json.loads(done.read_text())["seconds"] for name in run.stages[:-1]
               if (done := run.dir(name) / "done.json").exists()}
    plan_file = run.root / "plan.json"
    if not plan_file.exists():
        return ["| stage | seconds |", "|---|---|", *(f"| {k} | {v:.0f} |" for k, v in seconds.items())]
    plan = json.loads(plan_file.read_text())
    estimate = plan["estimate"][plan["recipe"]]
    groups = {"data, teachers, collect": ["data", "teachers", "collect"], "sft": ["sft"], "rl": ["rl"],
              "eval": ["eval"]}
    rows = []
    for group, names in groups.items():
        measured = [seconds[n] for n in names if n in seconds]
        rows.append(f"| {group} | {estimate.get(group, 0):.0f} | {sum(measured):.0f} |" if measured else
                    f"| {group} | {estimate.get(group, 0):.0f} | – |")
    p = plan["probe"]
    return [f"Recipe: **{plan['recipe']}** (budget {plan['budget_minutes']:g} minutes). Probe ({p['precision']}): a "
            f"training step of {p['train_tokens']} tokens {p['train_s']:.2f} s, a forward of {p['prompt_tokens']} "
            f"tokens {p['forward_s']:.2f} s.", "", "| stage | estimated s | measured s |", "|---|---|---|", *rows,
            f"| total | {sum(estimate.values()):.0f} | {sum(seconds.values()):.0f} |"]


def _rl_effect(run: Run) -> list[str]:
    """What the RL stage showed on the held-out tasks, said plainly: the paired SFT → RL comparison in the
    environment's own mode (acm's for ACM)."""
    results = run.dir("eval") / "results.json"
    if not results.exists():
        return []
    if "rl" not in run.cfg.stages:
        return ["", "## What the RL stage showed", "", (
            "This recipe leaves the GSPO stage out (its `stages`): the time goes to SFT and its evaluation. "
            "docs/long-cpu-recipe.md has a run long enough to measure GSPO's effect.")]
    if "rl" not in run.cfg.eval_checkpoints:
        steps = _section(*_stage_file(run.cfg, "rl")).get("max_steps", "its")
        return ["", "## What the RL stage showed", "", (
            f"GSPO ran {steps} steps (its curves above: reward, accuracy and tool use per step): the stage shows "
            "that the loop runs end to end (rollouts, rewards, updates, weight reloads). This recipe does not "
            "evaluate its checkpoint on the held-out tasks: so few steps move accuracy by less than the intervals "
            "can show, and the time goes to the SFT stage instead; docs/long-cpu-recipe.md has a run long enough "
            "to measure GSPO's effect.")]
    results = json.loads(results.read_text())
    if len(results["models"]) < 3:
        return []
    sft, rl = results["models"][1:3]  # base, SFT, RL: the eval stage's order
    modes = results.get("modes") or ["acm"]
    mode = "acm" if "acm" in modes else modes[0]  # the environment's own (tools) mode
    found = [c for c in results.get("comparisons", []) if (c["a"], c["b"], c["mode"]) == (sft, rl, mode)]
    if not found:
        return []
    c = next((c for c in found if c["task"] == "all"), found[0])
    acc = c["accuracy"]
    delta = f"{100 * acc['diff']:+.1f} points [{100 * acc['ci'][0]:+.1f}, {100 * acc['ci'][1]:+.1f}], p = {acc['p']:.3f}"
    if acc["p"] < 0.05:
        text = f"GSPO changed held-out accuracy measurably over SFT: {delta} (paired, {c['n']} tasks)."
    else:
        text = (f"GSPO did not change held-out accuracy measurably over SFT: {delta} (paired, {c['n']} tasks). At "
                "this size the RL stage shows that the loop runs end to end (rollouts, rewards, updates, weight "
                "reloads: its curves above), not a gain; docs/long-cpu-recipe.md has a run long enough to measure one.")
    return ["", "## What the RL stage showed", "", text]


STAGES = ["data", "teachers", "collect", "sft", "rl", "eval", "report"]


def size_class(params: int) -> str:
    """The first of `SIZE_CLASSES` whose `up_to` holds `params`."""
    return next(name for name, c in SIZE_CLASSES.items() if params <= c["up_to"])


def starting_config(config: str | None, default: str | None, overrides: dict,
                    gpu: bool | None = None) -> tuple[str | None, dict, str]:
    """Where a run starts from on this device: the config file (`config`, else `default`; None: PipelineConfig's
    defaults), the overrides to read over it, and one line saying which recipe and why. On a CPU, the file as it is
    (its probe picks the full or a smaller recipe at the start, where it sets `budget_minutes`). On a GPU
    (`gpu`, default `torch.cuda.is_available()`), the model's size class picks the SFT and RL configs
    (`SIZE_CLASSES`), starting from PipelineConfig's defaults where no `config` is given (`default` is the CPU
    recipe); an `sft_config`/`rl_config` in `config` or the overrides wins over the class's."""
    if gpu is None:
        import torch

        gpu = torch.cuda.is_available()
    if not gpu:
        path = shipped(config or default, "--config FILE") if config or default else None
        values = {**(read_yaml(path) if path else {}), **overrides}
        how = (f"the probe picks it or a smaller one at the start (budget_minutes {values['budget_minutes']:g})"
               if values.get("budget_minutes") is not None else "as configured (no budget_minutes: no probe)")
        return path, overrides, f"recipe: CPU (no CUDA device): {path or 'PipelineConfig defaults'}; {how}"
    path = shipped(config, "--config FILE") if config else None
    given = {**(read_yaml(path) if path else {}), **overrides}
    model = given.get("model")
    if "sft_config" in given and "rl_config" in given:
        return path, overrides, (f"recipe: GPU: {path or 'PipelineConfig defaults'} with its sft_config "
                                 f"{given['sft_config']} and rl_config {given['rl_config']} (no size class needed)")
    try:
        params, source = parameter_count(resolve_model(model))
    except (OSError, ValueError) as e:
        raise ValueError(f"{e}; name the recipe with --config FILE or --set sft_config=FILE --set rl_config=FILE "
                         "(docs/models.md, Recipes by size class)") from None
    name = size_class(params)
    chosen = {k: v for k, v in SIZE_CLASSES[name].items() if k != "up_to" and k not in given}
    kept = [f"{k} {given[k]} ({'--set' if k in overrides else '--config'})"
            for k in ("sft_config", "rl_config") if k in given]
    line = (f"recipe: GPU: {model or 'the embedded model'} has {params / 1e9:.2f}B parameters ({source}): size class "
            f"{name}: " + ", ".join([*(f"{k} {v}" for k, v in chosen.items()), *kept])
            + f", from {path or 'PipelineConfig defaults'}")
    return path, {**chosen, **overrides}, line


def choose_recipe(cfg: PipelineConfig) -> PipelineConfig:
    """The recipe this run follows. With `budget_minutes`: the probe's estimate for this machine is printed, and
    where the config's recipe would exceed the budget its `small_recipe` is followed instead (and where that one
    would too, the smaller one it holds); the choice, the probe and the estimates are saved in the run folder
    (`plan.json`), so a resumed run keeps them."""
    if cfg.budget_minutes is None:
        return cfg
    import torch

    if torch.cuda.is_available():  # the probe times the CPU stack
        log.info("budget_minutes: the probe times CPU runs; on this GPU the recipe runs as configured")
        return cfg
    recipes = dict(zip(RECIPES, cfg.recipes()))
    path = Path(cfg.runs_dir) / cfg.name / "plan.json"
    if path.exists():
        name = json.loads(path.read_text())["recipe"]
        if name not in recipes:
            raise ValueError(f"{path}: recipe {name!r}, which this config does not hold; delete the run folder to "
                             "start it again")
        print(f"recipe: {name}, as chosen when this run started ({path})", flush=True)
        return recipes[name]
    print(f"probing this machine to estimate the stages' times (budget {cfg.budget_minutes:g} minutes) ...", flush=True)
    times, saved = None, {"recipe": None, "budget_minutes": cfg.budget_minutes, "probe": None, "estimate": {}}
    for name, recipe in recipes.items():
        seconds, times = recipe.estimate(times)
        if saved["recipe"] is None:
            print(f"probe ({times.seconds:.0f} s, {times.precision}): a training step of {times.train_tokens} "
                  f"tokens {times.train_s:.2f} s, a forward of {times.prompt_tokens} tokens {times.forward_s:.2f} s",
                  flush=True)
        else:
            changes = recipes[saved["recipe"]].small_recipe
            print(f"the {saved['recipe']} recipe would take longer than {cfg.budget_minutes:g} minutes on this "
                  f"machine: following the {name} recipe "
                  f"({', '.join(f'{k}: {v}' for k, v in changes.items() if k != 'small_recipe')})", flush=True)
        print(_estimate_line(f"{name} recipe", seconds), flush=True)
        saved["recipe"], saved["estimate"][name] = name, seconds
        if sum(seconds.values()) <= 60 * cfg.budget_minutes:
            break
    else:
        log.warning("this machine is slower than the budget allows: expect ~%.0f minutes",
                    sum(seconds.values()) / 60)
    saved["probe"] = dataclasses.asdict(times)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(saved, indent=2))
    return recipes[saved["recipe"]]


def _estimate_line(name: str, stages: dict[str, float]) -> str:
    parts = ", ".join(f"{k} {v / 60:.1f}" for k, v in stages.items())
    return f"estimated minutes, {name}: {parts}; total {sum(stages.values()) / 60:.1f}"


def dry_run(cfg: PipelineConfig) -> list[str]:
    """Every stage's config built and checked as the run would build it, for every recipe the probe may choose,
    before any work: a task of each family generated and its teacher found, the SFT, RL and eval configs built (the
    RL one validated against the model's tokenizer, chat template and the environment's tools: the SFT checkpoint
    keeps them). Nothing is trained or written. Returns the lines it printed; ValueError naming the recipe and stage."""
    from .envs.registry import teacher
    from .envs.tasks import generate
    from .eval.run import check_config as check_eval
    from .train.rl_config import validate

    root, lines = Path(cfg.runs_dir) / cfg.name, []

    def say(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    for name, recipe in zip(RECIPES, cfg.recipes()):
        at = f"{name} recipe" if recipe is not cfg else "config"
        stage = "data"
        try:
            recipe.check()
            families = list(dict.fromkeys([*recipe.mix, *recipe.eval_families, *teacher_families(recipe)]))
            for family in families:
                generate(family, 1, recipe.seed, environment=recipe.environment, **recipe.params(family))
                teacher(family, recipe.environment)
            say(f"{at}: data, teachers: {recipe.environment} environment; a task of {', '.join(families)} made and "
                "its scripted teacher found")
            stage = "sft"
            if "sft" in recipe.stages:
                sft = _sft_config(recipe, root / "collect" / "samples.jsonl", root / "sft")
                say(f"{at}: sft: {recipe.sft_config} OK ({sft.num_train_epochs:g} epochs, bf16 {sft.bf16})")
            stage = "rl"
            if "rl" in recipe.stages:  # on the base model: the SFT checkpoint keeps its tokenizer and template
                rl = _rl_config(recipe, recipe.model, root / "data" / "rl.jsonl", root / "rl")
                validate(rl)
                say(f"{at}: rl: {recipe.rl_config} OK ({rl.max_steps} steps)")
            stage = "eval"
            if "eval" in recipe.stages:
                ev = _eval_config(recipe, [recipe.model], root / "data" / "eval.jsonl", root / "eval")
                check_eval(ev)
                say(f"{at}: eval: modes {', '.join(ev.modes)} on {', '.join(recipe.eval_families)} OK")
        except (ValueError, TypeError, OSError) as e:
            raise ValueError(f"{at}, {stage} stage: {e}") from None
    return lines


def run_pipeline(cfg: PipelineConfig, only: list[str] | None = None) -> Path:
    for recipe in cfg.recipes():  # the one the probe may choose fails before any stage, like the others
        recipe.check()
    cfg = choose_recipe(cfg)
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
        "eval": lambda: _eval(cfg, {"base": cfg.model, **{name: str(run.dir(name) / "final")
                                                            for name in CHECKPOINTS if name in cfg.eval_checkpoints}},
                              run.dir("data") / "eval.jsonl"),
        "report": lambda: _report(run),
    }
    for name in STAGES:
        if name in wanted and name not in cfg.stages:
            print(f"[{STAGES.index(name) + 1}/{len(STAGES)}] {name}: not in this recipe, skipped", flush=True)
        elif name in wanted:
            run.stage(name, plan[name]())
    return run.root
