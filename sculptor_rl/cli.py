"""The `sculptor-rl` command line. Each subcommand parses its arguments and calls one library function."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from . import logs
from .toolcalls import PARSERS

log = logging.getLogger("sculptor_rl")
DEFAULT_PIPELINE = "configs/quickstart.yaml"


def _param(text: str) -> tuple[str, object]:
    """`k=v` with v parsed as JSON when it is JSON (numbers, booleans, lists), else kept as a string."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _count(text: str) -> int:
    """A count flag: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _template(args) -> dict:
    """The chat-template settings of a command line (`--chat-template`, `--chat-template-kwarg`, `--parser`)."""
    return {"chat_template": args.chat_template, "chat_template_kwargs": dict(args.chat_template_kwarg) or None,
            "parser": args.parser}


def cmd_tools_schemas(args) -> None:
    from .acm import TOOL_SCHEMAS

    print(json.dumps(TOOL_SCHEMAS, indent=2))


def cmd_model_prepare(args) -> None:
    from .models import prepare_default_model

    print(prepare_default_model(force=args.force))


def cmd_data_generate(args) -> None:
    from .envs.tasks import generate
    from .jsonl import write_jsonl

    records = generate(args.task, args.num, args.seed, environment=args.environment, **dict(args.param))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(records, args.out)
    print(f"wrote {len(records)} {args.task} tasks to {args.out}")


def _imported(args) -> list[dict]:
    """The records of `--format`/`--in`/`--param` (data import, data check): the importer of the environment
    package that owns the format (`envs.registry`)."""
    from .envs.registry import import_records

    return import_records(args.format, args.inp, **dict(args.param))


def cmd_data_import(args) -> None:
    from .jsonl import write_jsonl

    records = _imported(args)
    write_jsonl(records, args.out)
    print(f"wrote {len(records)} {args.format} tasks to {args.out}")


def cmd_data_check(args) -> None:
    from .envs.check import check, report

    result = check(_imported(args))
    print(report(result, f"{args.format} {args.inp}"))
    if result["gold_below_1"] or result["unique_ids"] < result["records"]:
        sys.exit(1)


def cmd_memory_build(args) -> None:
    from .agent.chat import ChatFormat
    from .crossepisode import DriverConfig, run_rounds
    from .envs.llm import endpoint_llm, policy_llm
    from .envs.tasks import load_tasks
    from .models import resolve_model
    from .rollout import rollout_engine

    cfg = _rollout_config(args, args.engine, "memtoolagent")  # an environment that keeps a memory across episodes
    tasks = load_tasks(args.inp, limit=args.limit, environment=cfg.environment)
    fmt = ChatFormat.of(resolve_model(cfg.model), cfg.loop)
    engine = rollout_engine(cfg, fmt, tasks)
    llm = None  # rules (and none): the environment's offline critique
    if args.reflect == "policy":
        llm = policy_llm(engine, fmt)
    elif args.reflect == "openai":
        if not (args.reflect_base_url and args.reflect_model):
            raise ValueError("--reflect openai needs --reflect-base-url and --reflect-model")
        llm = endpoint_llm(args.reflect_base_url, args.reflect_model, args.api_key)
    driver = DriverConfig(memory=args.memory, out=args.out, rounds=args.rounds, environment=cfg.environment,
                          environment_params=cfg.environment_params, num_generations=cfg.num_generations,
                          loop=cfg.loop, reward=cfg.reward, seed=cfg.seed)
    store, rounds = run_rounds(tasks, engine, fmt, driver, llm, critique=args.reflect != "none")
    right = [sum(t.score == 1.0 for t in trajs) / len(trajs) for trajs in rounds]
    print(f"{len(rounds)} rounds, outcome accuracy per round: {', '.join(f'{r:.2f}' for r in right)}; "
          f"{args.memory} holds {len(store)} entries")


def _asked_llm(args):
    """`--llm policy|endpoint` of the memory commands: the LLM the environment's workflow asks (`envs.llm`), and
    the engine to close after (the policy's)."""
    from .agent.chat import ChatFormat
    from .engines import SamplingConfig, make_engine
    from .envs.llm import endpoint_llm, policy_llm
    from .models import resolve_model

    if args.llm == "endpoint":
        if not (args.llm_url and args.llm_model):
            raise ValueError("--llm endpoint needs --llm-url and --llm-model")
        return endpoint_llm(args.llm_url, args.llm_model, args.api_key, args.max_new_tokens), None
    path = resolve_model(args.model)
    fmt = ChatFormat.from_pretrained(path)
    engine = make_engine(args.engine, path, fmt, SamplingConfig(temperature=0.0, seed=0))
    return policy_llm(engine, fmt, args.max_new_tokens), engine


def cmd_memory_induce(args) -> None:
    """ToolMem: induce the memory of tool capabilities from training experiences (the env's `memory: DIR`)."""
    from .envs.toolmem.env import build_memory
    from .envs.toolmem.experiences import generate_experiences
    from .jsonl import iter_jsonl

    experiences = ([row for _, row in iter_jsonl(args.experiences)] if args.experiences
                   else generate_experiences(args.train_tasks, args.seed, "train"))
    llm, engine = _asked_llm(args) if args.induction == "model" else (None, None)
    try:
        summary = build_memory(experiences, args.out, llm, retries=args.retries, max_new_tokens=args.max_new_tokens,
                               induction=args.induction)
    finally:
        if hasattr(engine, "close"):  # a vLLM engine's memory (an HF engine holds only the model)
            engine.close()
    print(json.dumps({k: v for k, v in summary.items() if k != "failed"}, indent=1))
    print(f"wrote the memory to {args.out} (--environment-param memory={args.out})")


def cmd_memory_notes(args) -> None:
    """TA-Mem: the LLM note extractor over the conversations of `--in` (the env's `notes: DIR`)."""
    from .envs.tamem.env import extract_notes
    from .envs.tasks import load_tasks

    tasks = load_tasks(args.inp, environment="tamem")
    llm, engine = _asked_llm(args)
    try:
        report = extract_notes(tasks, llm, args.out, retries=args.retries, max_new_tokens=args.max_new_tokens)
    finally:
        if hasattr(engine, "close"):  # a vLLM engine's memory (an HF engine holds only the model)
            engine.close()
    print(json.dumps(report))
    print(f"wrote the notes to {args.out} (--environment-param notes={args.out})")


def _rollout_config(args, engine: str, environment: str = "acm"):
    """`--config` (YAML, the `RolloutConfig` fields), then the flags given."""
    from .rollout import RolloutConfig

    cfg = RolloutConfig.from_yaml(
        args.config, engine=engine, model=args.model, teacher_model=getattr(args, "teacher_model", None),
        base_url=getattr(args, "base_url", None), api_key=getattr(args, "api_key", None),
        num_generations=args.num_generations, seed=args.seed, environment=args.environment,
        summarizer=args.summarizer, summarizer_url=args.summarizer_url, summarizer_model=args.summarizer_model,
        temperature=args.temperature, top_p=args.top_p, max_tool_calls=args.max_tool_calls,
        max_new_tokens=args.max_new_tokens, max_context_tokens=args.max_context_tokens, schedule=args.schedule,
        **_template(args))
    if not args.config and args.environment is None:
        cfg.environment = environment
    cfg.environment_params = {**cfg.environment_params, **dict(args.environment_param)}
    return cfg


def _run_and_write(args, engine: str, keep=lambda t: True) -> None:
    from .jsonl import write_atomic
    from .metrics import format_table, summarize_by_task
    from .rollout import rollout_to_file
    from .envs.tasks import load_tasks

    cfg = _rollout_config(args, engine)
    tasks = load_tasks(args.inp, limit=args.limit, environment=cfg.environment)
    trajs = rollout_to_file(tasks, cfg, args.out, keep, chunk_size=args.chunk_size)
    summary = summarize_by_task(trajs)
    write_atomic(Path(args.out).with_suffix(".summary.json"), json.dumps(summary, indent=2))
    print(format_table(summary))
    if cfg.environment == "memtool":
        from .envs.memtool import metrics as memtool_metrics

        print(memtool_metrics.format_table(memtool_metrics.summarize(trajs)))
    print(f"wrote {sum(map(keep, trajs))} of {len(trajs)} trajectories to {args.out}")


def cmd_rollout(args) -> None:
    _run_and_write(args, args.engine)


def cmd_collect(args) -> None:
    threshold = args.min_reward
    _run_and_write(args, args.teacher, keep=lambda t: t.reward >= threshold)


def cmd_samples(args) -> None:
    from .agent.chat import ChatFormat
    from .models import resolve_model
    from .samples import policy_samples, write_samples
    from .trajectory import read_trajectories

    # the tokenizer is the trajectories' own; --model only checks that it is that model's
    using = ChatFormat.from_pretrained(resolve_model(args.model), **{**_template(args), "parser": args.parser or "auto"}
                                       ).provenance if args.model else None
    trajs = list(read_trajectories(args.inp))
    if not trajs:
        raise ValueError(f"{args.inp}: no trajectories in it (make them with `sculptor-rl collect` or `rollout`)")
    samples = policy_samples(trajs, using)
    n = write_samples(samples, args.out)
    trained = sum(sum(s.loss_mask) for s in samples)
    print(f"wrote {n} samples ({trained} trained tokens) to {args.out}")


def cmd_inspect(args) -> None:
    from .agent.chat import ChatFormat
    from .models import resolve_model
    from .samples import read_samples

    if (args.path is None) == (args.inp is None):
        raise ValueError("inspect: name the samples file once, as --in FILE (or the positional FILE)")
    path = args.inp or args.path
    fmt = ChatFormat.from_pretrained(resolve_model(args.model))
    samples = list(read_samples(path))
    if not 0 <= args.index < len(samples):
        raise ValueError(f"{path} has {len(samples)} samples; --index must be in [0, {len(samples) - 1}]")
    s = samples[args.index]
    color = sys.stdout.isatty() and not args.plain
    on, off = ("\033[1;32m", "\033[0m") if color else ("[[", "]]")
    print(f"sample {args.index}: rollout {s.rollout_id}, completions {s.completions}, reward {s.reward}, "
          f"{len(s.input_ids)} tokens, {sum(s.loss_mask)} trained ({'green' if color else 'inside [[ ]]'})\n")
    out, start = [], 0
    for k in range(1, len(s.input_ids) + 1):  # decode runs of equal mask together: faithful to the tokens
        if k == len(s.input_ids) or s.loss_mask[k] != s.loss_mask[start]:
            text = fmt.tokenizer.decode(s.input_ids[start:k])
            out.append(f"{on}{text}{off}" if s.loss_mask[start] else text)
            start = k
    print("".join(out))


def cmd_view(args) -> None:
    from .view import serve, write_page

    page = write_page(args.path, args.out, args.environment, args.tasks)
    print(f"wrote {page}")
    if args.serve:
        server = serve(page, args.port)
        print(f"serving it at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


def cmd_eval(args) -> None:
    from .envs import env_class
    from .eval.report import accuracy_table
    from .eval.run import EvalConfig, evaluate

    if args.compare:  # no evaluation: the chart and paired tests of outputs already written
        from .eval.compare import comparison_table, write_comparison

        out = args.out or "runs/eval-compare"
        print(comparison_table(write_comparison(args.compare, out)["comparisons"]))
        print(f"wrote comparison.png, comparison.md and comparison.json to {out}")
        return
    flags = dict(models=args.model, tasks=args.tasks.split(",") if args.tasks else None,
                 modes=args.modes.split(",") if args.modes else None, num=args.num, data=args.inp,
                 checkpoint_modes=args.checkpoint_modes.split(",") if args.checkpoint_modes else None,
                 split=args.split, out=args.out, engine=args.engine, seed=args.seed,
                 context_budget=args.context_budget, environment=args.environment, max_new_tokens=args.max_new_tokens,
                 max_tool_calls=args.max_tool_calls, temperature=args.temperature, chat_template=args.chat_template,
                 chat_template_kwargs=dict(args.chat_template_kwarg) or None, parser=args.parser,
                 summarizer=args.summarizer, summarizer_url=args.summarizer_url, summarizer_model=args.summarizer_model)
    cfg = EvalConfig.from_yaml(args.config, **flags)
    cfg.environment_params = {**cfg.environment_params, **dict(args.environment_param)}
    results = evaluate(cfg)
    print(accuracy_table(results))
    for part in env_class(cfg.environment).report(results):  # the env's own section (MemTool's Table 2)
        print(part)
    print(f"wrote results.json, results.md and plots to {cfg.out}")


HELP = {  # the TRL-parsed commands: what each does (its line in `sculptor-rl --help`, the head of its own --help)
    "sft": "SFT on samples (TRL SFTTrainer, the loss on the trained tokens only); flags override the YAML config.",
    "rl": "GSPO/GRPO with the agent loop's rollouts in an environment (TRL GRPOTrainer); `rl validate` checks a "
          "config (any kind: pipeline, sft, rl, eval, serve) and prints the plan without training; flags override "
          "the YAML config.",
    "serve": "An OpenAI-compatible server running the agent loop in its environment (sculptor-rl serve --model CKPT "
             "[--environment acm|memtool] [--engine vllm|hf] [--host] [--port] [--api-key]); flags override the "
             "YAML config.",
}
# The settings sculptor-rl adds to TRL's, per TRL-parsed command: (module file, class) of each dataclass, read with
# `ast` so that `--help` lists them without importing TRL (seconds); `--help-all` prints TRL's whole parser.
OWN_SETTINGS = {
    "rl": [("train/rl_config.py", "SculptorGRPOConfig"), ("agent/loop.py", "LoopConfig"), ("envs/reward.py",
           "RewardConfig"), ("envs/llm.py", "LLMSettings"), ("train/shared_prefix.py", "BatchSettings")],
    "sft": [("train/sft.py", "SculptorSFTConfig"), ("train/shared_prefix.py", "BatchSettings")],
    "serve": [("serve/config.py", "ServeConfig"), ("envs/llm.py", "LLMSettings")],
}


def _declared(module: str, name: str) -> list[tuple[str, str, str]]:
    """(field, default, help) of each field declared in class `name` of sculptor_rl/`module`: `field(default=...,
    metadata={"help": ...})`, or a plain default with its line's comment."""
    import ast

    source = (Path(__file__).parent / module).read_text()
    lines = source.splitlines()
    cls = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == name)
    out = []
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)) or node.value is None:
            continue
        default, text = ast.get_source_segment(source, node.value), ""
        call = node.value
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "field":
            kw = {k.arg: k.value for k in call.keywords}
            default = ast.get_source_segment(source, kw["default"]) if "default" in kw else "(computed)"
            meta = kw.get("metadata")
            if isinstance(meta, ast.Dict):
                for k, v in zip(meta.keys, meta.values):
                    if isinstance(k, ast.Constant) and k.value == "help":
                        try:
                            text = ast.literal_eval(v)
                        except ValueError:  # a name (a help text shared with another command): its own --help-all
                            text = "see --help-all"
        else:
            text = lines[node.lineno - 1].partition("  # ")[2]
        out.append((node.target.id, " ".join(default.split()), " ".join(text.split())))
    return out


def _short_help(command: str, description: str) -> None:
    """`sculptor-rl rl|sft|serve --help`: our settings, each with its help and default; TRL's behind --help-all."""
    import textwrap

    print(f"usage: sculptor-rl {command}{' [validate]' * (command == 'rl')} [--config FILE] [--key value ...]\n")
    print(textwrap.fill(description, 100) + "\n")
    print("--config FILE: YAML settings (configs/<environment>/); flags override them. Flags are the settings' names, "
          "with dashes or underscores (--max-new-tokens 64 = --max_new_tokens 64).\n")
    if command in SAME_SETTING:  # every command's names for its input and output file
        print("The input and output file, named as in every command: " + ", ".join(
            f"--{name} = --{setting.replace('_', '-')}" for name, setting in SAME_SETTING[command].items()) + "\n")
    seen = set()
    for module, name in OWN_SETTINGS[command]:
        fields = [f for f in _declared(module, name) if f[0] not in seen]
        seen.update(f[0] for f in fields)
        if fields:
            print(f"{name}:")
        for key, default, text in fields:
            flag = f"  --{key.replace('_', '-')}"
            body = f"{text} (default: {default})" if text else f"(default: {default})"
            print(textwrap.fill(body, 100, initial_indent=f"{flag:<34}", subsequent_indent=" " * 34))
    if command != "serve":
        print("\nLoRA: TRL's ModelConfig fields --use-peft, --lora-r, --lora-alpha, --lora-dropout, "
              "--lora-target-modules (default: all-linear), ...")
    print("\nEvery setting of TRL's config and of Transformers' TrainingArguments is accepted too: --help-all lists "
          "them.")


# the repeatable K=V flags of the argparse commands, and the dict setting each fills in the TRL-parsed ones
DICT_FLAGS = {"environment-param": "environment_params", "chat-template-kwarg": "chat_template_kwargs"}


def _dict_flags(rest: list[str]) -> list[str]:
    """`--environment-param K=V` and `--chat-template-kwarg K=V` (repeatable, either spelling) in `rl`, `sft` and
    `serve` as in every other command: gathered into the one JSON value TRL's parser reads for the dict setting."""
    out, gathered = [], {}
    i = 0
    while i < len(rest):
        name, _, inline = rest[i].removeprefix("--").replace("_", "-").partition("=")
        if rest[i].startswith("--") and name in DICT_FLAGS:
            text = inline if inline else (rest[i + 1] if i + 1 < len(rest) else "")
            i += 1 if inline else 2
            try:
                key, value = _param(text)
            except argparse.ArgumentTypeError as e:
                raise ValueError(f"--{name}: {e}") from None
            gathered.setdefault(DICT_FLAGS[name], {})[key] = value
            continue
        out.append(rest[i])
        i += 1
    return out + [x for setting, values in gathered.items() for x in (f"--{setting}", json.dumps(values))]


# `--in` and `--out`, every command's names for its input and output file, in the TRL-parsed commands: the settings
# they fill there (their own spellings, --samples / --tasks / --output-dir, work as well)
SAME_SETTING = {"sft": {"in": "samples", "out": "output_dir"}, "rl": {"in": "tasks", "out": "output_dir"}}


def _same_names(command: str, rest: list[str]) -> list[str]:
    """`--in X` / `--in=X` (and `--out`) in `sft` and `rl` become the setting each names there."""
    out = []
    for arg in rest:
        name, eq, value = arg.removeprefix("--").partition("=")
        setting = SAME_SETTING[command].get(name) if arg.startswith("--") else None
        out.append(arg if setting is None else f"--{setting}{eq}{value}")
    return out


def cmd_sft(args, rest: list[str]) -> None:
    from .train.sft import main as sft_main

    rest = _same_names("sft", _dict_flags(rest))
    sft_main(["--config", args.config, *rest] if args.config else rest)


def cmd_rl(args, rest: list[str]) -> None:
    from .train.rl import main as rl_main

    dry_run = rest[:1] == ["validate"]  # `sculptor-rl rl validate --config X`: check and print the plan only
    if dry_run and args.config and len(rest) == 1 and config_kind(args.config) != "rl":  # another kind's config
        validate_config(args.config)
        return
    rest = _same_names("rl", _dict_flags(rest))
    rl_main(["validate"] * dry_run + (["--config", args.config] if args.config else []) + rest[dry_run:])


CONFIG_KINDS = ("pipeline", "sft", "rl", "eval", "serve")


def _config_classes() -> dict:
    from .eval.run import EvalConfig
    from .pipeline import PipelineConfig
    from .serve.config import ServeConfig
    from .train.rl_config import SculptorGRPOConfig
    from .train.sft import SculptorSFTConfig

    return dict(zip(CONFIG_KINDS, (PipelineConfig, SculptorSFTConfig, SculptorGRPOConfig, EvalConfig, ServeConfig)))


def config_kind(path: str) -> str:
    """Which command a config file is for: its file name's prefix (sft_, rl_, eval_, serve_), else the one kind
    whose settings hold all its keys (a pipeline's first); ValueError naming the closest kind's unknown key."""
    from .config import check_values, read_yaml

    prefix = Path(path).name.split("_")[0]
    if prefix in CONFIG_KINDS[1:]:
        return prefix
    values, errors = read_yaml(path), []
    for kind, cls in _config_classes().items():
        try:
            check_values(cls, values, path)
            return kind
        except ValueError as e:
            errors.append(str(e))
    raise ValueError(f"{min(errors, key=len)} (nor of any config kind: {', '.join(CONFIG_KINDS)})")


def check_chat(model: str | None, cfg, environment: str = "acm") -> None:
    """Print whether the chat format `cfg` names (`chat_template`, `chat_template_kwargs`, `parser`) renders a
    two-step tool conversation with the environment's tools and reads its calls back (`check_template`, as `rl
    validate` checks it); NOT checked at once for a Hub id offline or a checkpoint not trained yet. ValueError where
    the template fails."""
    from .acm import TOOL_SCHEMAS
    from .agent.chat import ChatFormat
    from .envs import env_class
    from .models import resolve_model, unreachable
    from .train.preflight import check_template

    try:
        model = resolve_model(model)
    except FileNotFoundError as e:  # a checkpoint a later stage writes
        print(f"check        chat template: NOT checked ({e})")
        return
    if why := unreachable(model):
        print(f"check        chat template: NOT checked ({model}: {why})")
        return
    tools = getattr(env_class(environment), "tools", None)  # a class-level list; else set per task (ACM's)
    tools = tools if isinstance(tools, list) else TOOL_SCHEMAS
    print(f"check        {check_template(ChatFormat.of(model, cfg), tools)}")


def validate_config(path: str, kind: str | None = None) -> None:
    """Check a config of any kind as its command would read it, without any work: keys, types, ranges and what it
    names (environment, tasks, model, chat template) where that can be read here; what cannot is said NOT checked."""
    from .config import load_config, parse_command

    kind = kind or config_kind(path)
    print(f"{path}: {kind} config")
    if kind == "pipeline":
        from .pipeline import PipelineConfig, dry_run

        dry_run(PipelineConfig.from_yaml(path))
    elif kind == "rl":
        from .train.rl import main as rl_main

        rl_main(["validate", "--config", path])
        return
    elif kind == "sft":
        from .train.sft import SculptorSFTConfig

        cfg = parse_command(SculptorSFTConfig, ["--config", path], prog="sculptor-rl sft")
        check_chat(cfg.model, cfg)  # the template the samples are rendered with, saved with the checkpoint
        if cfg.samples and not Path(cfg.samples).exists():
            print(f"warning: samples file {cfg.samples} does not exist yet (make it with `sculptor-rl samples`)")
    elif kind == "eval":
        from .eval.run import EvalConfig, check_config

        cfg = load_config(EvalConfig, path)
        check_config(cfg)
        for model in dict.fromkeys(cfg.models):
            check_chat(model, cfg, cfg.environment)
    elif kind == "serve":
        from .envs import params_of
        from .serve.config import ServeConfig

        cfg = parse_command(ServeConfig, ["--config", path], prog="sculptor-rl serve")
        params_of(cfg.environment, cfg.environment_params)
        check_chat(cfg.model, cfg, cfg.environment)
    else:
        raise ValueError(f"unknown config kind {kind!r} (known: {', '.join(CONFIG_KINDS)})")
    print("config OK")


def cmd_validate(args) -> None:
    validate_config(args.config, args.kind)


def cmd_serve(args, rest: list[str]) -> None:
    from .serve.server import main as serve_main

    rest = _dict_flags(rest)
    serve_main(["--config", args.config, *rest] if args.config else rest)


def cmd_slurm(args) -> None:
    import subprocess

    from .slurm import SlurmConfig, render

    cfg = SlurmConfig.from_yaml(args.config)
    script = render(cfg)
    out = Path(args.out or f"runs/slurm/{cfg.name}.sbatch")
    if args.what == "render" and not args.out:
        print(script, end="")
        return
    if args.dry_run:  # what submit would write and run
        print(f"# would write {out} and run: sbatch {out}\n{script}", end="")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(script)
    print(f"wrote {out}")
    if args.what == "submit":
        subprocess.run(["sbatch", str(out)], check=True)


def _setting(text: str) -> tuple[list[str], object]:
    """`key.sub=value` of `--set`: the key's path, and the value read as YAML (numbers, booleans, lists, null)."""
    import yaml

    if "=" not in text or not text.split("=", 1)[0]:
        raise argparse.ArgumentTypeError(f"expected key.sub=value, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key.split("."), yaml.safe_load(value)
    except yaml.YAMLError:
        return key.split("."), value


def _settings(pairs) -> dict:
    """The `--set` pairs as one nested dict."""
    out: dict = {}
    for path, value in pairs:
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"--set {'.'.join(path)}: {part} is set to a value, not a section")
        node[path[-1]] = value
    return out


def cmd_pipeline(args) -> None:
    from .pipeline import PipelineConfig, dry_run, run_pipeline, starting_config

    flags = {"name": args.name, "model": args.model, "environment": args.environment,
             "environment_params": dict(args.environment_param) or None, **_template(args)}
    overrides = {**{k: v for k, v in flags.items() if v is not None}, **_settings(args.set)}
    # the quickstart's recipe is ACM's: another environment starts from PipelineConfig's defaults
    default = DEFAULT_PIPELINE if args.environment in (None, "acm") else None
    config, overrides, why = starting_config(args.config, default, overrides)
    print(why, flush=True)
    cfg = PipelineConfig.from_yaml(config, overrides)
    if args.dry_run:
        dry_run(cfg)
        print("dry run: every stage's config checked; nothing was run")
        return
    root = run_pipeline(cfg, args.only)
    print(f"run folder: {root}")


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, as the commands' own are (`error: ...`, exit 2): the usage is
    one `--help` away."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (--help for usage)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="sculptor-rl", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log more, and a user error's traceback")
    sub = p.add_subparsers(dest="command", required=True)

    tools = sub.add_parser("tools", help="the ACM tools").add_subparsers(dest="what", required=True)
    tools.add_parser("schemas", help="print the six tool schemas (OpenAI format) as JSON").set_defaults(
        fn=cmd_tools_schemas)

    model = sub.add_parser("model", help="the embedded default model").add_subparsers(dest="what", required=True)
    prep = model.add_parser("prepare", help="convert the shipped SmolLM2-135M-Instruct GGUF to an HF checkpoint")
    prep.add_argument("--force", action="store_true", help="convert again even if the cache has it")
    prep.set_defaults(fn=cmd_model_prepare)

    data = sub.add_parser("data", help="tasks").add_subparsers(dest="what", required=True)
    gen = data.add_parser("generate", help="generate tasks offline (deterministic by seed)")
    from .envs.registry import family_names, importer_names  # nothing imported: the help lists every name
    gen.add_argument("--task", required=True, metavar="FAMILY",
                     help=f"a task family: built-in ({', '.join(sorted(family_names()))}) or one a user's "
                     "environment lists in its task_families (--environment, or an installed entry point)")
    gen.add_argument("--environment", default=None, help="the environment whose generate hook makes --task's "
                     "tasks: package.module:Class or an entry point (default: the built-in family's, else the "
                     "installed environment that lists it)")
    gen.add_argument("--num", type=_count, default=100, help="how many tasks (default: 100)")
    gen.add_argument("--seed", type=int, default=0, help="default: 0")
    gen.add_argument("--out", required=True, help="tasks .jsonl")
    gen.add_argument("--param", type=_param, action="append", default=[], metavar="K=V",
                     help="a generator parameter, e.g. keys=4 updates=16 (repeatable)")
    gen.set_defaults(fn=cmd_data_generate)
    source = argparse.ArgumentParser(add_help=False)
    source.add_argument("--format", required=True, choices=importer_names(), help="the release format of --in")
    source.add_argument("--in", dest="inp", required=True, metavar="FILE",
                        help=".jsonl, .json, .parquet, .csv, .tsv, a datasets "
                        "save_to_disk directory, or the release's own folder (workbench, nestful)")
    source.add_argument("--param", type=_param, action="append", default=[], metavar="K=V",
                        help="frames: articles=FILE (the Wikipedia texts); babilong: task=qa1 length=4k "
                        "prompts=FILE; workbench: database=DIR; nestful: spec=FILE (repeatable)")
    imp = data.add_parser("import", parents=[source], help="a published benchmark in its own release format → "
                          "tasks (README: Published benchmarks)")
    imp.add_argument("--out", required=True, help="tasks .jsonl")
    imp.set_defaults(fn=cmd_data_import)
    chk = data.add_parser("check", parents=[source], help="import, then score each record's gold answer, an empty "
                          "and a wrong one: a table per group and every disagreement (exit 1 when a gold scores "
                          "below 1 or ids repeat)")
    chk.set_defaults(fn=cmd_data_check)

    template = argparse.ArgumentParser(add_help=False)
    template.add_argument("--chat-template", default=None, metavar="FILE|VARIANT",
                          help="a chat template file, or a named append-only variant (agent.chat.TEMPLATE_VARIANTS: "
                               "qwen3_, qwen3_5_, mistral_nemo_, mistral_small_3_2_, deepseek_v3_, deepseek_r1_, "
                               "deepseek_v3_1_, hermes3_, gpt_oss_, glm4_6_append_only); default: the model's own")
    template.add_argument("--chat-template-kwarg", type=_param, action="append", default=[], metavar="K=V",
                          help="passed to the chat template, e.g. enable_thinking=false (repeatable)")
    template.add_argument("--parser", default=None, choices=["auto", *PARSERS], metavar="PARSER",
                          help=f"the tool-call format: auto (the chat template's; default) or {', '.join(PARSERS)}")
    llm = argparse.ArgumentParser(add_help=False)  # what the environments ask for an LLM (envs.llm)
    llm.add_argument("--summarizer", default=None, choices=["extractive", "policy", "endpoint"],
                     help="summarize_fragment's LLM: the offline extractive stand-in (default), the policy's own "
                          "engine, or an OpenAI-compatible endpoint")
    llm.add_argument("--summarizer-url", default=None, help="summarizer endpoint: its base URL")
    llm.add_argument("--summarizer-model", default=None, help="summarizer endpoint: the served model name")
    run = argparse.ArgumentParser(add_help=False, parents=[template, llm])
    run.add_argument("--model", default=None, help="HF model id or path (default, or `default`: the embedded "
                     "SmolLM2-135M)")
    run.add_argument("--in", "--data", dest="inp", required=True, metavar="FILE",
                     help="tasks: .jsonl, .parquet or a datasets name")
    run.add_argument("--out", required=True, help="trajectories .jsonl (a .summary.json is written beside it); "
                     "a run killed and started again resumes from OUT.partial")
    run.add_argument("--chunk-size", type=int, default=64, help="tasks per chunk: a finished chunk is saved, "
                     "a restarted run skips it")
    run.add_argument("--limit", type=int, default=None, help="use the first N tasks")
    run.add_argument("--config", help="YAML settings (RolloutConfig's fields: the loop's, the reward's, "
                     "environment, ... under the names eval and rl use); the flags below override them")
    run.add_argument("--num-generations", type=int, help="rollouts per task (default 1)")
    run.add_argument("--seed", type=int, help="default 0")
    run.add_argument("--temperature", type=float, help="default 1.0")
    run.add_argument("--top-p", type=float, help="default 1.0")
    run.add_argument("--max-new-tokens", type=int, help="per completion (default 512)")
    run.add_argument("--max-tool-calls", type=int, help="default 20")
    run.add_argument("--max-context-tokens", type=int, help="default 131072")
    run.add_argument("--environment", default=None, help="the environment: a built-in (acm, memtool, tamem, "
                     "memtoolagent, toolmem, full, truncate, bm25), an import path package.module:Class or an installed "
                     "entry point (default: acm; memory build: memtoolagent)")
    # agent.loop.SCHEDULES, spelled out: the loop (transformers and all) loads only when a command runs
    run.add_argument("--schedule", choices=("auto", "per-rollout", "lockstep"),
                     help="per-rollout: each rollout sends its next request as soon as its tools have run; lockstep: "
                     "all live rollouts per step; auto (default): per-rollout where the engine gains (vLLM on a GPU, openai)")
    run.add_argument("--environment-param", type=_param, action="append", default=[], metavar="K=V",
                     help="an environment parameter, e.g. mode=workflow limit=128 (memtool; repeatable)")

    ro = sub.add_parser("rollout", parents=[run], help="multi-turn ACM rollouts of a model")
    ro.add_argument("--engine", choices=["vllm", "hf", "openai"], help="default: vllm")
    ro.add_argument("--base-url", help="openai engine: the endpoint, e.g. http://127.0.0.1:8000/v1")
    ro.add_argument("--teacher-model", help="openai engine: the served model name")
    ro.add_argument("--api-key", help="openai engine (default: EMPTY)")
    ro.set_defaults(fn=cmd_rollout)

    co = sub.add_parser("collect", parents=[run], help="teacher trajectories for SFT (successful ones kept)")
    co.add_argument("--teacher", default="scripted", choices=["scripted", "openai"],
                    help="scripted: the environment's scripted teacher (default); openai: a model behind an "
                    "OpenAI-compatible endpoint")
    co.add_argument("--base-url", help="openai teacher: the endpoint")
    co.add_argument("--teacher-model", help="openai teacher: the served model name")
    co.add_argument("--api-key", help="openai teacher (default: EMPTY)")
    co.add_argument("--min-reward", type=float, default=1.0, help="keep trajectories with at least this reward")
    co.set_defaults(fn=cmd_collect)

    mem = sub.add_parser("memory", help="the memory environments keep across episodes: MemToolAgent's (build), "
                         "ToolMem's (induce), TA-Mem's notes").add_subparsers(dest="what",
                                                                                              required=True)
    mb = mem.add_parser("build", parents=[run], help="run memtoolagent tasks in rounds, the memory (--memory "
                        "JSONL) updated between rounds; --out holds each round's snapshot")
    mb.add_argument("--memory", required=True, help="the memory store (JSONL): read if it exists, saved each round")
    mb.add_argument("--rounds", type=int, default=2, help="the tasks are run in this many consecutive chunks")
    mb.add_argument("--engine", choices=["vllm", "hf", "openai", "scripted"], help="default: vllm")
    mb.add_argument("--base-url", help="openai engine: the endpoint")
    mb.add_argument("--teacher-model", help="openai engine: the served model name")
    mb.add_argument("--api-key", help="openai engine (default: EMPTY)")
    mb.add_argument("--reflect", default="policy", choices=["policy", "openai", "rules", "none"],
                    help="who writes a failed episode's reflection: the policy's engine, an OpenAI-compatible "
                    "endpoint, the offline rule critique (no LLM), or nobody")
    mb.add_argument("--reflect-base-url", help="--reflect openai: the endpoint")
    mb.add_argument("--reflect-model", help="--reflect openai: the served model name")
    mb.set_defaults(fn=cmd_memory_build)
    asks = argparse.ArgumentParser(add_help=False)  # the memory workflows that ask an LLM (envs.llm)
    asks.add_argument("--llm", default="policy", choices=["policy", "endpoint"],
                      help="the model asked: --model on an engine of this machine, or an OpenAI-compatible endpoint")
    asks.add_argument("--model", default=None, help="--llm policy: HF id or path (default: the embedded model)")
    asks.add_argument("--engine", default="vllm", choices=["vllm", "hf"], help="--llm policy: the engine")
    asks.add_argument("--llm-url", help="--llm endpoint: its base URL")
    asks.add_argument("--llm-model", help="--llm endpoint: the served model name")
    asks.add_argument("--api-key", default=None, help="--llm endpoint (default: $OPENAI_API_KEY)")
    asks.add_argument("--out", required=True, help="the directory the environment reads")
    asks.add_argument("--retries", type=int, default=1, help="a malformed answer is asked again this many times")
    mi = mem.add_parser("induce", parents=[asks], help="ToolMem: induce the memory of tool capabilities from "
                        "training experiences (the toolmem env's memory=DIR)")
    mi.add_argument("--experiences", help="experiences (.jsonl: `data import --format biggen`, your own); default: "
                    "generated from --train-tasks long-context tasks x the 4 context strategies")
    mi.add_argument("--train-tasks", type=_count, default=8, help="long-context tasks the experiences are "
                    "generated from, without --experiences (default: 8)")
    mi.add_argument("--seed", type=int, default=0, help="default: 0")
    mi.add_argument("--induction", default="model", choices=["model", "rules"],
                    help="the paper's LLM induction, or the deterministic rules (offline, no model)")
    mi.add_argument("--max-new-tokens", type=int, default=256, help="per answer of the LLM (default: 256)")
    mi.set_defaults(fn=cmd_memory_induce)
    mn = mem.add_parser("notes", parents=[asks], help="TA-Mem: extract the notes of --in's conversations with an "
                        "LLM (the tamem env's notes=DIR)")
    mn.add_argument("--in", "--data", dest="inp", required=True, metavar="FILE",
                    help="tamem tasks (.jsonl: `data generate --task tamem`, "
                    "`data import --format locomo`)")
    mn.add_argument("--max-new-tokens", type=int, default=2048, help="per answer of the LLM (default: 2048)")
    mn.set_defaults(fn=cmd_memory_notes)

    sa = sub.add_parser("samples", parents=[template],
                        help="Algorithm 1: trajectories → training samples with loss masks")
    sa.add_argument("--in", dest="inp", required=True, metavar="FILE",
                    help="trajectories .jsonl (`collect`, `rollout`)")
    sa.add_argument("--out", required=True, help="samples .jsonl (the input of `sft`)")
    sa.add_argument("--model", default=None, help="check that the trajectories were made by this model's tokenizer "
                    "(and chat template); the samples take the trajectories' own either way")
    sa.set_defaults(fn=cmd_samples)

    ins = sub.add_parser("inspect", help="print a sample with its trained tokens highlighted")
    ins.add_argument("--in", dest="inp", metavar="FILE", help="samples .jsonl")
    ins.add_argument("path", nargs="?", metavar="FILE", help="the same as --in")
    ins.add_argument("--index", type=int, default=0, help="which sample, from 0 (default: 0)")
    ins.add_argument("--model", default=None, help="the tokenizer to decode with (default: the embedded model's)")
    ins.add_argument("--plain", action="store_true", help="mark trained text with [[ ]] even on a terminal")
    ins.set_defaults(fn=cmd_inspect)

    vw = sub.add_parser("view", help="one self-contained HTML page of a run folder, a trajectories file or a "
                        "samples file: each trajectory as a timeline of its context, compare, training curves, eval")
    vw.add_argument("path", help="a run folder (pipeline, RL output_dir, eval out), a trajectories or samples file")
    vw.add_argument("--out", help="the page (default: view.html in the folder, or beside the file as .html)")
    vw.add_argument("--environment", help="the environment whose hooks draw the spans (default: ACM's where the "
                    "trajectories call its tools, an eval mode's own, else the contract's defaults)")
    vw.add_argument("--tasks", help="the task records (.jsonl) the trajectories ran on, for the text of folded "
                    "fragments (default: task files found in the folder)")
    vw.add_argument("--serve", action="store_true", help="also serve the page on 127.0.0.1")
    vw.add_argument("--port", type=int, default=0, help="with --serve (default: a free one)")
    vw.set_defaults(fn=cmd_view)

    ev = sub.add_parser("eval", parents=[template, llm],
                        help="evaluate checkpoints in an environment's modes: ACM vs full/truncate/bm25 "
                        "baselines (default), MemTool's modes, ...; tables, plots")
    ev.add_argument("--config", help="YAML settings (configs/<environment>/eval_*.yaml); the flags below override them")
    ev.add_argument("--model", action="append", help="HF id or checkpoint dir; repeat to compare several "
                    "(default, or `default`: the embedded SmolLM2-135M)")
    ev.add_argument("--environment", help="a registered environment (default: acm; memtool, tamem, memtoolagent, "
                    "toolmem, ...); it sets the modes and task families")
    ev.add_argument("--environment-param", type=_param, action="append", default=[], metavar="K=V",
                    help="an environment parameter merged over each mode's, e.g. limit=128 (memtool; repeatable)")
    ev.add_argument("--tasks", help="comma-separated families (default: the environment's, or all in --in)")
    ev.add_argument("--modes", help="comma-separated, of the environment's modes (acm: acm,full,truncate,bm25; "
                    "memtool: autonomous,workflow,hybrid); default: all of them")
    ev.add_argument("--checkpoint-modes", help="comma-separated modes of the models after the first (the "
                    "checkpoints trained from it), e.g. acm: the baselines on the base model only (default: --modes)")
    ev.add_argument("--num", type=_count, help="tasks per family (default: 8 generated; all of --in)")
    ev.add_argument("--in", "--data", dest="inp", metavar="FILE",
                    help="your tasks (.jsonl, .parquet or a datasets name) instead of generated ones")
    ev.add_argument("--split", help="the datasets split of --in (default: test)")
    ev.add_argument("--out", help="output directory; runs already in it are skipped (default: runs/eval)")
    ev.add_argument("--engine", choices=["vllm", "ray", "hf"], help="default: vllm; ray: vLLM in Ray actors "
                    "(engine_kwargs in --config: num_workers, ray_address)")
    ev.add_argument("--seed", type=int, help="default: 0")
    ev.add_argument("--max-new-tokens", type=int, help="per completion (default: 512)")
    ev.add_argument("--max-tool-calls", type=int, help="per rollout, or per request of a session that goes on "
                    "(memtool); more stops it (default: 20)")
    ev.add_argument("--temperature", type=float, help="sampling temperature (default: 0.0, greedy)")
    ev.add_argument("--context-budget", type=int, help="tokens of context truncate and bm25 keep (default: 1500)")
    ev.add_argument("--compare", nargs="+", metavar="DIR", help="evaluate nothing: compare eval outputs (one per "
                    "--context-budget, of the paradigms' modes) in one chart of accuracy against peak prompt tokens "
                    "and a table of paired tests, written to --out (default: runs/eval-compare)")
    ev.set_defaults(fn=cmd_eval)

    pipe = sub.add_parser("pipeline", parents=[template], help="data → teachers → SFT → GSPO → eval → report for a "
                          "model and an environment (default: the quickstart)")
    pipe.add_argument("--config", default=None, help=f"YAML settings (PipelineConfig's fields; default: on a CPU "
                      f"{DEFAULT_PIPELINE} for the acm environment, PipelineConfig's defaults for another; on a GPU "
                      "PipelineConfig's defaults with the SFT and RL configs of the model's size class, "
                      "docs/models.md)")
    pipe.add_argument("--model", default=None, help="HF model id or path (default: the config's; the embedded "
                      "SmolLM2-135M)")
    pipe.add_argument("--environment", default=None, help="a built-in (acm, memtool, ...), package.module:Class or "
                      "an installed entry point (default: the config's; acm); it makes and teaches its tasks")
    pipe.add_argument("--environment-param", type=_param, action="append", default=[], metavar="K=V",
                      help="an environment parameter (repeatable)")
    pipe.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY.SUB=VALUE",
                      help="any config key, e.g. rl.max_steps=2 train_tasks=8 (a section's keys one by one; "
                      "repeatable)")
    pipe.add_argument("--name", default=None, help="run name (folder under runs/); default from the config")
    pipe.add_argument("--only", nargs="+", default=None, metavar="STAGE", help="run only these stages")
    pipe.add_argument("--dry-run", action="store_true", help="check every stage's config (and a task of each "
                      "family, the model's tokenizer and template) and exit before any work")
    pipe.set_defaults(fn=cmd_pipeline)

    val = sub.add_parser("validate", help="check a config of any kind (pipeline, sft, rl, eval, serve) as its "
                         "command would read it, before any work; offline, what needs the Hub is said NOT checked")
    val.add_argument("--config", required=True, help="the YAML file")
    val.add_argument("--kind", choices=CONFIG_KINDS, default=None,
                     help="the command it is for (default: from its file name's prefix, else from its keys)")
    val.set_defaults(fn=cmd_validate)

    sft = sub.add_parser("sft", help=HELP["sft"], add_help=False)
    sft.add_argument("--config", default=None, help="YAML settings (configs/<environment>/sft_*.yaml: "
                     "SculptorSFTConfig's fields); the flags after it override them (TRL's parser: --key value, "
                     "dashes or underscores)")
    sft.set_defaults(fn=cmd_sft, passthrough=True)

    rl = sub.add_parser("rl", help=HELP["rl"], add_help=False)
    rl.add_argument("--config", default=None, help="YAML settings (configs/<environment>/rl_*.yaml: "
                    "SculptorGRPOConfig's fields); the flags after it override them (TRL's parser: --key value, "
                    "dashes or underscores)")
    rl.set_defaults(fn=cmd_rl, passthrough=True)

    slurm = sub.add_parser("slurm", help="sbatch scripts from slurm/*.yaml: multi-node SFT, RL on training + "
                           "rollout nodes").add_subparsers(dest="what", required=True)
    for what, text in (("render", "print the script (or write it to --out)"), ("submit", "write it and sbatch it")):
        cmd = slurm.add_parser(what, help=text)
        cmd.add_argument("--config", required=True, help="e.g. slurm/rl_qwen3_8b_ray.yaml")
        cmd.add_argument("--out", help="the script's path (submit: default runs/slurm/<name>.sbatch)")
        cmd.add_argument("--dry-run", action="store_true", help="print the script instead of writing or submitting")
        cmd.set_defaults(fn=cmd_slurm)

    srv = sub.add_parser("serve", help=HELP["serve"], add_help=False)
    srv.add_argument("--config", default=None, help="YAML settings (configs/<environment>/serve_*.yaml: "
                     "ServeConfig's fields); the flags after it override them")
    srv.set_defaults(fn=cmd_serve, passthrough=True)
    _underscore_aliases(p)
    return p


SAME_IDEA = {"--out": ("--output-dir", "--output_dir")}  # the TRL-parsed commands' name of the same idea


def _underscore_aliases(parser: argparse.ArgumentParser) -> None:
    """Every `--dash-flag` of every command also answers to `--dash_flag` (hidden from the help): the spelling the
    TRL-parsed commands (`sft`, `rl`, `serve`) and their YAML keys use, so one spelling works everywhere; and `--out`
    to `--output-dir`, their name for it (`SAME_IDEA`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _underscore_aliases(sub)
        for flag in action.option_strings:
            aliases = ["--" + flag[2:].replace("-", "_"), *SAME_IDEA.get(flag, ())]
            for alias in aliases:
                if flag.startswith("--") and alias != flag and alias not in parser._option_string_actions:
                    parser._option_string_actions[alias] = action


def main(argv: list[str] | None = None) -> None:
    """Run a command. A user's mistake (a bad input file, config or model path) ends in one `error: ...` line and
    exit status 2, as argparse's own errors do; `-v` adds the traceback."""
    import yaml

    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "passthrough", False) and {"-h", "--help"} & set(rest):
        try:
            _short_help(args.command, HELP[args.command])
        except BrokenPipeError:  # `sculptor-rl rl --help | head`
            _quiet_broken_pipe()
        return
    if getattr(args, "passthrough", False) and "--help-all" in rest:
        rest = [a if a != "--help-all" else "--help" for a in rest]
    logs.setup(args.verbose)
    passthrough = getattr(args, "passthrough", False)
    if rest and not passthrough:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    _exit_on_sigterm()
    try:
        args.fn(args, rest) if passthrough else args.fn(args)
    except BrokenPipeError:  # `sculptor-rl tools schemas | head`
        _quiet_broken_pipe()
    except (ValueError, OSError) as e:  # bad JSONL/Parquet/records, config values, paths, models
        _user_error(str(e))
    except yaml.YAMLError as e:  # a config that is not YAML: its message names the file, line and column
        _user_error(" ".join(str(e).split()))
    except SystemExit as e:
        if isinstance(e.code, str):  # a command's own `sys.exit("error: ...")`: the same status as the rest
            _user_error(e.code.removeprefix("error: "))
        raise


def _quiet_broken_pipe() -> None:
    """The reader of our output has all it wanted: exit 0, quietly."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
    sys.exit(0)


def _exit_on_sigterm() -> None:
    """SIGTERM (`kill`, `timeout`, a supervisor's terminate) ends a command as an exception does, so its cleanup
    runs: Python's default dies at once, and a vLLM engine's own processes went on computing without it."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():  # only the main thread may set a handler
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _user_error(message: str) -> None:
    log.debug("the error's traceback", exc_info=True)
    print(f"error: {message}", file=sys.stderr)
    raise UserError(message) from None


class UserError(SystemExit):
    """Exit status 2; `str()` is the `error: ...` line, for callers of `main` in-process."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return f"error: {self.message}"


if __name__ == "__main__":
    main()
