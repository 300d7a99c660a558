"""One grammar for every command: every parser walked (no command run). Each subcommand says what it does, every flag
has help text, flags are spelled with dashes (each answering to its underscore spelling too, as the TRL-parsed
commands and the YAML keys spell it), a flag name means one thing (one type, one dest) wherever it appears, and
every command that reads a config file says so in its help."""

from __future__ import annotations

import argparse
from collections import defaultdict

from sculptor_rl.cli import build_parser


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser, help) of every command and subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, helps.get(name)
                yield from commands(sub, (*path, name))


def leaves():
    return [(path, sub, text) for path, sub, text in commands(build_parser())
            if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)]


def test_every_command_and_flag_says_what_it_is():
    missing = []
    for path, sub, text in commands(build_parser()):
        if not text:
            missing.append(" ".join(path))
        for action in sub._actions:
            if action.option_strings and action.help in (None, "") and action.dest != "help":
                missing.append(f"{' '.join(path)} {'/'.join(action.option_strings)}")
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction) and not action.help:
                missing.append(f"{' '.join(path)} <{action.dest}>")
    assert not missing, "without help text: " + ", ".join(missing)


def test_flags_are_dashed_and_answer_to_their_underscore_spelling():
    for path, sub, _ in leaves():
        for action in sub._actions:
            for flag in action.option_strings:
                if not flag.startswith("--"):
                    continue
                assert "_" not in flag, f"{' '.join(path)} {flag}: dash style"
                alias = "--" + flag[2:].replace("-", "_")
                assert sub._option_string_actions.get(alias) is action, f"{' '.join(path)} {alias}"
    args = build_parser().parse_args(["collect", "--data", "t.jsonl", "--out", "o.jsonl", "--max_new_tokens", "64",
                                      "--chat_template_kwarg", "enable_thinking=false", "--environment_param", "k=1"])
    assert args.max_new_tokens == 64 and args.chat_template_kwarg == [("enable_thinking", False)]
    assert args.environment_param == [("k", 1)]
    for spelling in ("--out", "--output-dir", "--output_dir"):  # the output's name in sft and rl too
        assert build_parser().parse_args(["data", "generate", "--task", "pi_llm", spelling, "x.jsonl"]).out == "x.jsonl"


def test_one_flag_one_meaning():
    seen = defaultdict(set)
    for path, sub, _ in leaves():
        for action in sub._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    kind = getattr(action.type, "__name__", str(action.type))
                    seen[flag].add((action.dest, kind))  # store or append: eval compares several --model
    several = {flag: ways for flag, ways in seen.items() if len(ways) > 1}
    assert not several, f"a flag spelled one way means different things: {several}"
    # one spelling per idea: the environment's parameters, the chat settings, the config file
    assert "--environment-params" not in seen and "--chat-template-kwargs" not in seen
    assert {"--environment-param", "--chat-template-kwarg", "--chat-template", "--parser", "--config"} <= set(seen)


def test_every_command_that_reads_a_config_says_so():
    takes = {" ".join(path) for path, sub, _ in leaves() if "--config" in sub._option_string_actions}
    assert {"rollout", "collect", "memory build", "eval", "pipeline", "sft", "rl", "serve", "validate",
            "slurm render", "slurm submit"} <= takes
    for path, sub, _ in leaves():
        if "--config" in sub._option_string_actions:
            assert sub._option_string_actions["--config"].help, " ".join(path)


def test_the_trl_commands_help_is_ours_short_and_fast():
    import subprocess
    import sys
    import time

    for command, own in (("rl", "--tasks"), ("sft", "--samples"), ("serve", "--environment")):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "sculptor_rl.cli", command, "--help"], capture_output=True,
                             text=True, timeout=60)
        seconds = time.perf_counter() - start
        assert out.returncode == 0 and seconds < 3, (command, seconds, out.stderr[-2000:])
        lines = out.stdout.splitlines()
        assert lines[0].startswith(f"usage: sculptor-rl {command}") and len(lines) < 200, command
        assert own in out.stdout and "--config FILE" in out.stdout and "--help-all" in out.stdout, command
        if command != "serve":
            assert f"--in = {own}" in out.stdout and "--out = --output-dir" in out.stdout, command
    out = subprocess.run([sys.executable, "-m", "sculptor_rl.cli", "rl", "validate", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert "rl validate" in out.stdout and "[validate]" in out.stdout.splitlines()[0]


def test_dict_settings_take_one_key_value_form_in_every_command():
    import json

    from sculptor_rl.cli import _dict_flags

    rest = _dict_flags(["--max_steps", "2", "--environment-param", "mode=workflow", "--environment_param=limit=8",
                        "--chat-template-kwarg", "enable_thinking=false"])
    assert rest[:2] == ["--max_steps", "2"]
    assert json.loads(rest[rest.index("--environment_params") + 1]) == {"mode": "workflow", "limit": 8}
    assert json.loads(rest[rest.index("--chat_template_kwargs") + 1]) == {"enable_thinking": False}


READS_A_FILE = {"rollout", "collect", "memory build", "memory notes", "eval", "samples", "data import", "data check",
                "inspect"}  # and sft / rl, TRL-parsed: below


def test_every_command_that_reads_an_input_file_takes_it_as_in():
    takes = {" ".join(path) for path, sub, _ in leaves() if "--in" in sub._option_string_actions}
    assert READS_A_FILE <= takes, f"no --in: {READS_A_FILE - takes}"
    for path, sub, _ in leaves():  # an input under another name is an alias of --in, never a second flag
        for old in ("--data", "--samples"):
            if old in sub._option_string_actions:
                assert sub._option_string_actions[old] is sub._option_string_actions["--in"], (path, old)
    parse = build_parser().parse_args
    for spelling in ("--in", "--data"):
        assert parse(["collect", spelling, "t.jsonl", "--out", "o.jsonl"]).inp == "t.jsonl"
        assert parse(["eval", spelling, "t.jsonl"]).inp == "t.jsonl"
    assert parse(["inspect", "--in", "s.jsonl"]).inp == parse(["inspect", "s.jsonl"]).path == "s.jsonl"


def test_sft_and_rl_read_in_and_out_as_their_own_settings():
    from sculptor_rl.cli import _same_names
    from sculptor_rl.config import parse_command
    from sculptor_rl.train.rl_config import SculptorGRPOConfig
    from sculptor_rl.train.sft import SculptorSFTConfig

    cpu = ["--use_cpu", "true", "--bf16", "false"]
    cfg = parse_command(SculptorGRPOConfig, _same_names("rl", ["--in", "t.jsonl", "--out=runs/x", *cpu]))
    assert (cfg.tasks, cfg.output_dir) == ("t.jsonl", "runs/x")
    cfg = parse_command(SculptorGRPOConfig, _same_names("rl", ["--tasks", "t.jsonl", "--output-dir", "runs/x", *cpu]))
    assert (cfg.tasks, cfg.output_dir) == ("t.jsonl", "runs/x")  # the old spellings still work
    cfg = parse_command(SculptorSFTConfig, _same_names("sft", ["--in=s.jsonl", "--out", "runs/y", *cpu]))
    assert (cfg.samples, cfg.output_dir) == ("s.jsonl", "runs/y")
    assert _same_names("rl", ["--inline", "x", "--tasks_limit", "2"]) == ["--inline", "x", "--tasks_limit", "2"]
