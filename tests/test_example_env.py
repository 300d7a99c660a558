"""A user's environment as an installed package (`examples/calculator`): found by entry point and by import path in
fresh processes, and trained through them: rollout → samples → one SFT step, then one GSPO step in a 2-process
`accelerate launch` (every rank finds the environment by its entry point's name)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "calculator"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The example installed with pip (from a copy: a build writes into the source folder) into a folder of its own,
    which the processes below put on their path, as a user's virtual environment would hold it."""
    tmp = tmp_path_factory.mktemp("calculator")
    shutil.copytree(EXAMPLE, tmp / "src")
    # the build backend from this environment where it has one (no download), else pip fetches it
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation, "--target",
                    str(tmp / "site"), str(tmp / "src")], check=True, capture_output=True, timeout=300)
    return tmp / "site"


def run(site: Path, args: list[str], cwd: Path, timeout: int = 900, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "TOKENIZERS_PARALLELISM": "false",
           **extra}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


class Adder:
    """A text policy: call `add` on the question's numbers, then reply with what the tool said."""

    max_model_len = None

    def generate(self, requests):
        from sculptor_rl.engines import Completion
        from sculptor_rl.toolcalls import format_tool_call

        out = []
        for r in requests:
            if r.messages[-1]["role"] == "tool":
                out.append(Completion(text=r.messages[-1]["content"]))
            else:
                a, b = map(int, re.findall(r"\d+", r.messages[-1]["content"]))
                out.append(Completion(text=format_tool_call("add", {"a": a, "b": b})))
        return out


def test_the_example_rolls_out_by_import_path(site, fmt, monkeypatch):
    from sculptor_rl.envs import env_class
    from sculptor_rl.rollout import RolloutConfig, rollout
    from sculptor_rl.samples import policy_samples
    from sculptor_rl.toolcalls import HermesParser

    monkeypatch.syspath_prepend(str(site))
    env_cls = env_class("sculptor_calculator:CalculatorEnv")
    from sculptor_calculator import make_tasks

    tasks = make_tasks(4, seed=2)
    env = env_cls(tasks[0])
    assert env.render()[0] == {"role": "system", "content": env_cls.system_prompt}
    assert not env.execute("add", {"a": 1}).ok and env.execute("add", {"a": 1, "b": 2}).text == "3"
    trajs = rollout(tasks, RolloutConfig(environment="sculptor_calculator:CalculatorEnv"), fmt=fmt, engine=Adder(),
                    progress=False)
    assert [t.answer for t in trajs] == [str(t["answer"]) for t in tasks]
    assert all(t.score == 1.0 and t.reward == 1.0 and t.num_tool_calls == 1 for t in trajs)
    assert HermesParser().parse(trajs[0].steps[0].text).calls[0].name == "add"
    samples = policy_samples(trajs, fmt.provenance)
    # no tool modifies the context: one sample per rollout, both completions trained in it
    assert len(samples) == 4 and all(s.completions == [0, 1] for s in samples)


def test_found_by_entry_point_and_import_path(site, tmp_path):
    code = ("from sculptor_rl.envs import env_class, env_names\n"
            "a, b = env_class('calculator'), env_class('sculptor_calculator:CalculatorEnv')\n"
            "print(a is b, a.__module__, 'calculator' in env_names())\n"
            "for bad in ('sculptor_calculator:Nope', 'no_such_pkg.mod:Env', 'json:dumps', 'calculater'):\n"
            "    try:\n        env_class(bad)\n    except ValueError as e:\n        print(e)\n")
    out = run(site, ["-c", code], tmp_path, 120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "True sculptor_calculator True"
    assert "'sculptor_calculator:Nope' does not import" in lines[1]
    assert "'no_such_pkg.mod:Env' does not import" in lines[2] and "No module named 'no_such_pkg'" in lines[2]
    assert "not a subclass of sculptor_rl.envs.Env" in lines[3]
    assert "unknown environment 'calculater'" in lines[4] and "calculator" in lines[4]


def test_a_bad_environment_stops_rl_before_any_engine(site, tmp_path, model_path):
    (tmp_path / "sums.jsonl").write_text("")
    out = run(site, ["-m", "sculptor_rl.cli", "rl", "validate", "--model", model_path, "--tasks",
                     str(tmp_path / "sums.jsonl"), "--output_dir", str(tmp_path / "rl"), "--environment",
                     "sculptor_calculator:Calculator"], tmp_path, 300)
    assert out.returncode != 0
    assert "environment 'sculptor_calculator:Calculator'" in out.stderr and "does not import" in out.stderr


@pytest.mark.slow
def test_trained_by_import_path_and_entry_point(site, tmp_path, model_path):
    tasks = run(site, ["-c", "import json, sys; from sculptor_calculator import make_tasks; "
                             "[print(json.dumps(t)) for t in make_tasks(4, seed=1)]"], tmp_path, 120)
    (tmp_path / "sums.jsonl").write_text(tasks.stdout)
    # rollout by import path, on the HF engine (the 2 cores hold no vLLM engine beside the trainers)
    out = run(site, ["-m", "sculptor_rl.cli", "rollout", "--environment", "sculptor_calculator:CalculatorEnv",
                     "--engine", "hf", "--model", model_path, "--data", "sums.jsonl", "--out", "traj.jsonl",
                     "--max-new-tokens", "24", "--max-tool-calls", "2", "--temperature", "0"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    trajs = [json.loads(line) for line in (tmp_path / "traj.jsonl").read_text().splitlines()]
    assert len(trajs) == 4 and all(t["steps"] for t in trajs)
    out = run(site, ["-m", "sculptor_rl.cli", "samples", "--in", "traj.jsonl", "--out", "samples.jsonl"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "samples.jsonl").read_text().count("\n") >= 4
    common = ["--learning_rate", "1e-4", "--bf16", "false", "--report_to", "none", "--per_device_train_batch_size",
              "1", "--max_steps", "1", "--logging_steps", "1", "--save_strategy", "no"]
    out = run(site, ["-m", "sculptor_rl.cli", "sft", "--model", model_path, "--samples", "samples.jsonl",
                     "--output_dir", "sft", "--use_cpu", "true", *common], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    # one GSPO step in two ranks, each finding `calculator` by its entry point
    launch = ["-m", "accelerate.commands.launch", "--config_file", str(ROOT / "configs/accelerate/zero2.yaml"),
              "--num_processes", "2", "--main_process_port", "29541", "-m", "sculptor_rl.train.rl",
              "--model", model_path, "--tasks", str(tmp_path / "sums.jsonl"), "--output_dir", str(tmp_path / "rl"),
              "--engine", "hf",
              "--environment", "calculator", "--num_generations", "2", "--gradient_accumulation_steps", "2",
              "--max_new_tokens", "16", "--max_tool_calls", "1", "--max_context_tokens", "1024", "--save_rollouts",
              "true", "--ddp_backend", "gloo", *common]
    # from the repository: the accelerate config names its DeepSpeed config relative to it
    out = run(site, launch, ROOT, 1200, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    assert out.returncode == 0, out.stderr[-4000:]
    rollouts = sorted((tmp_path / "rl" / "rollouts").glob("*.jsonl"))
    assert rollouts, list((tmp_path / "rl").iterdir())
    saved = [json.loads(line) for f in rollouts for line in f.read_text().splitlines()]
    assert {t["task_id"].rsplit("-", 1)[0] for t in saved} == {"sum-1"}


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory) -> str:
    from tiny_qwen3 import tiny_qwen3_dir

    return tiny_qwen3_dir(tmp_path_factory.mktemp("tiny") / "qwen3")


def test_it_makes_its_tasks_and_teaches_them_from_the_command_line(site, tmp_path, tiny_qwen3):
    """data generate → collect --teacher scripted → samples, each a fresh process finding the example by its entry
    point: the environment's own `generate` and `teach` hooks, through the commands a built-in goes through."""
    cli = ["-m", "sculptor_rl.cli"]
    out = run(site, [*cli, "data", "generate", "--task", "sum", "--num", "4", "--seed", "1", "--param", "high=10",
                     "--out", "sums.jsonl"], tmp_path, 120)
    assert out.returncode == 0, out.stderr
    tasks = [json.loads(line) for line in (tmp_path / "sums.jsonl").read_text().splitlines()]
    assert [t["id"] for t in tasks] == [f"sum-1-{i}" for i in range(4)] and all(t["answer"] < 19 for t in tasks)
    out = run(site, [*cli, "collect", "--teacher", "scripted", "--environment", "calculator", "--model", tiny_qwen3,
                     "--data", "sums.jsonl", "--out", "teacher.jsonl"], tmp_path, 300)
    assert out.returncode == 0, out.stderr[-3000:]
    trajs = [json.loads(line) for line in (tmp_path / "teacher.jsonl").read_text().splitlines()]
    assert len(trajs) == 4 and all(t["reward"] == 1.0 and t["answer"] == str(task["answer"])
                                   for t, task in zip(trajs, tasks))
    assert all(step["calls"][0]["name"] == "add" for t in trajs for step in t["steps"][:1])
    out = run(site, [*cli, "samples", "--in", "teacher.jsonl", "--out", "samples.jsonl"], tmp_path, 120)
    assert out.returncode == 0, out.stderr[-3000:]
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(samples) >= 4 and all(sum(s["loss_mask"]) > 0 for s in samples)
    # a family its class does not list: the error says what to add, before any rollout
    (tmp_path / "products.jsonl").write_text(json.dumps({**tasks[0], "id": "p-0", "task": "product"}) + "\n")
    out = run(site, [*cli, "collect", "--environment", "calculator", "--model", tiny_qwen3, "--data",
                     "products.jsonl", "--out", "p.jsonl"], tmp_path, 120)
    assert out.returncode == 2 and "add 'product' to CalculatorEnv.task_families (now: sum)" in out.stderr
    out = run(site, [*cli, "data", "generate", "--task", "product", "--out", "p.jsonl"], tmp_path, 120)
    assert out.returncode == 2 and "unknown task 'product'" in out.stderr and "task_families" in out.stderr
