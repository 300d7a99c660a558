"""Kill -9 at any moment loses nothing: every long job, run as a real `sculptor-rl` subprocess, is killed with
SIGKILL mid-run, started again with the same command, and must end with exactly what an uninterrupted run
writes (same records in the same order; training: resumed from its checkpoint, the same steps).

Each kill waits for an observable point (lines in the output, a checkpoint, a finished run or stage) and the
job has plenty left to do after it; each test then checks the kill did land mid-run and the rerun resumed.
SIGTERM, the polite kill, ends a job after its cleanup: the last test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from sculptor_rl.jsonl import append_jsonl, resume_jsonl, write_jsonl
from sculptor_rl.rollout import RolloutConfig, rollout_to_file
from sculptor_rl.envs.tasks import generate

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "sculptor_rl.cli", *map(str, args)]


def run(cmd: list[str], log: Path) -> str:
    """Run to the end; its output (stdout and stderr) is returned and kept in `log`."""
    with log.open("w") as out:
        code = subprocess.run(cmd, cwd=ROOT, env=ENV, stdout=out, stderr=subprocess.STDOUT, timeout=900).returncode
    text = log.read_text()
    assert code == 0, f"{' '.join(cmd)} failed ({code}):\n{text[-3000:]}"
    return text


@contextmanager
def running_until(cmd: list[str], ready, log: Path, timeout: float = 600):
    """Start `cmd` in a process group of its own and yield it once `ready()` holds; it must not end first. Whatever
    of the group still runs on the way out (the command, or processes it left behind) is SIGKILLed."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, f"ended ({proc.returncode}) before the kill point:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the kill point never came"
            time.sleep(0.05)
        assert proc.poll() is None, "ended before the kill"
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group has ended
            pass
        proc.wait()


def kill_when(cmd: list[str], ready, log: Path, timeout: float = 600) -> None:
    """Start `cmd`, SIGKILL it (its whole process group) as soon as `ready()` holds."""
    with running_until(cmd, ready, log, timeout) as proc:
        os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL


def lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:  # not yet, or no more (a finished run removes its .partial)
        return 0


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def timeless(obj):
    """`obj` without its wall times (which differ from run to run)."""
    if isinstance(obj, dict):
        return {k: timeless(v) for k, v in obj.items() if "time" not in k}
    return [timeless(v) for v in obj] if isinstance(obj, list) else obj


def trainer_state(output_dir: Path) -> dict:
    (last,) = sorted(output_dir.glob("checkpoint-*"), key=lambda d: int(d.name.split("-")[1]))[-1:]
    return json.loads((last / "trainer_state.json").read_text())


def saved(checkpoint: Path) -> bool:
    """The Trainer writes trainer_state.json last, in place: whole once it parses."""
    try:
        return "global_step" in json.loads((checkpoint / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False


def killed_and_resumed(train, tmp_path: Path, max_steps: int) -> tuple[dict, dict]:
    """`train(output_dir)` (a command) run uninterrupted, then killed once its first checkpoint is saved and run
    again: the rerun must resume from a checkpoint the kill left and end at the same step. Returns the last
    trainer state of the uninterrupted and of the resumed run."""
    run(train(tmp_path / "ref"), tmp_path / "ref.log")
    out = tmp_path / "out"
    kill_when(train(out), lambda: saved(out / "checkpoint-1"), tmp_path / "killed.log")
    assert not (out / "final").exists()
    log = run(train(out), tmp_path / "rerun.log")
    resumed = int(log.split("resuming from ")[1].split("checkpoint-")[1].split()[0])
    assert 1 <= resumed < max_steps  # from a checkpoint the kill left, not from scratch
    ref, got = trainer_state(tmp_path / "ref"), trainer_state(out)
    assert got["global_step"] == ref["global_step"] == max_steps
    assert (out / "final" / "model.safetensors").exists()
    return ref, got


# ---- the file formats themselves (fast) ----

def test_resume_jsonl_cuts_a_torn_line_and_an_unfinished_unit(tmp_path):
    path = tmp_path / "log.jsonl"
    assert resume_jsonl(path) == []
    append_jsonl([{"unit": 0, "k": 0}, {"unit": 0, "k": 1}], path)
    append_jsonl([{"unit": 1, "k": 0}], path)
    with path.open("a") as f:
        f.write('{"unit": 1, "k"')  # a write the kill cut short
    whole_units = lambda recs: sum(1 for r in recs if r["unit"] == 0)  # noqa: E731 (unit 1 needs two lines)
    assert resume_jsonl(path, whole_units) == [{"unit": 0, "k": 0}, {"unit": 0, "k": 1}]
    assert path.read_text().count("\n") == 2 and path.read_text().endswith("}\n")  # truncated to the unit
    append_jsonl([{"unit": 1, "k": 0}, {"unit": 1, "k": 1}], path)
    assert [r["unit"] for r in resume_jsonl(path)] == [0, 0, 1, 1]


def test_write_jsonl_replaces_a_file_whole_or_not_at_all(tmp_path):
    path = tmp_path / "out.jsonl"
    write_jsonl([{"a": 1}], path)

    def failing():
        yield {"a": 2}
        raise RuntimeError("killed mid-way")

    with pytest.raises(RuntimeError):
        write_jsonl(failing(), path)
    assert records(path) == [{"a": 1}] and sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_rollout_to_file_redoes_an_unfinished_chunk_and_matches_a_straight_run(tmp_path, fmt):
    """A partial file as a kill leaves it (two finished chunks, then a torn one): the rerun keeps the finished
    chunks, runs the rest and writes exactly what one uninterrupted run writes."""
    tasks = generate("pi_llm", 7, seed=5, keys=2, updates=4)
    cfg = RolloutConfig(engine="scripted", num_generations=2, seed=3)
    reference = rollout_to_file(tasks, cfg, tmp_path / "ref.jsonl", chunk_size=2, fmt=fmt)
    ref_lines = (tmp_path / "ref.jsonl").read_text().splitlines(keepends=True)
    assert len(ref_lines) == 14 and not (tmp_path / "ref.jsonl.partial").exists()

    partial = tmp_path / "out.jsonl.partial"
    partial.write_text("".join(ref_lines[:4 * 2 + 1]) + ref_lines[9][:50])  # chunks 0-1, 1 line of 2, a torn one
    again = rollout_to_file(tasks, cfg, tmp_path / "out.jsonl", chunk_size=2, fmt=fmt)
    assert (tmp_path / "out.jsonl").read_text() == "".join(ref_lines)
    assert [t.rollout_id for t in again] == [t.rollout_id for t in reference]

    partial.write_text(ref_lines[2])  # another run's file: refused, not mixed in
    with pytest.raises(ValueError, match="delete it to start over"):
        rollout_to_file(tasks, cfg, tmp_path / "out.jsonl", chunk_size=2, fmt=fmt)


def test_training_resumes_from_the_last_whole_checkpoint(tmp_path):
    """A kill during a save leaves a checkpoint without (or with a torn) trainer_state.json, written last."""
    from sculptor_rl.train.checkpoints import last_checkpoint

    assert last_checkpoint(str(tmp_path / "none")) is None
    for step, state in [(1, '{"global_step": 1}'), (2, '{"global_step": 2}'), (10, '{"global_st'), (11, None)]:
        (tmp_path / f"checkpoint-{step}").mkdir()
        if state is not None:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    assert last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-2")


# ---- each long job killed for real ----

@pytest.mark.slow
def test_collect_killed_mid_run_resumes_to_the_same_file(tmp_path):
    """`collect` and `rollout` write through the same `rollout_to_file`; the scripted teacher keeps it fast and
    deterministic (an engine's own greedy rollouts resume the same way: the fast test above)."""
    tasks = tmp_path / "tasks.jsonl"
    write_jsonl(generate("pi_llm", 100, seed=1, keys=2, updates=8), tasks)

    def collect(out):
        return cli("collect", "--teacher", "scripted", "--data", tasks, "--out", out, "--num-generations", 2,
                   "--chunk-size", 2, "--min-reward", 1.0)

    run(collect(tmp_path / "ref.jsonl"), tmp_path / "ref.log")
    out = tmp_path / "out.jsonl"
    partial = out.with_name("out.jsonl.partial")
    kill_when(collect(out), lambda: lines(partial) >= 20, tmp_path / "killed.log")
    assert not out.exists() and 20 <= lines(partial) < 200  # killed mid-run
    log = run(collect(out), tmp_path / "rerun.log")
    assert "tasks done in an earlier run; resuming" in log
    assert out.read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    assert len(records(out)) == 200 and not partial.exists()
    assert (tmp_path / "out.summary.json").read_text() == (tmp_path / "ref.summary.json").read_text()


@pytest.mark.slow
def test_sft_killed_mid_run_resumes_from_its_checkpoint(tmp_path, fmt, model_path):
    from sculptor_rl.samples import Sample, write_samples

    head = fmt.head_ids([{"role": "user", "content": "Say hi."}], None)
    samples = [Sample(f"r/{k}", head + fmt.completion_ids(text), [0] * len(head) + [1] * len(fmt.completion_ids(text)),
                      [0], None, 1.0, fmt.provenance) for k, text in enumerate(["hi", "hello", "hey there", "good day"])]
    write_samples(samples, tmp_path / "samples.jsonl")

    def sft(out):
        return cli("sft", "--model", model_path, "--samples", tmp_path / "samples.jsonl", "--output_dir", out,
                   "--max_steps", 2, "--per_device_train_batch_size", 1, "--learning_rate", "1e-4",
                   "--save_strategy", "steps", "--save_steps", 1, "--save_total_limit", 1, "--logging_steps", 1,
                   "--optim", "sgd",  # no optimizer state: cheaper saves, the same resume
                   "--report_to", "none", "--use_cpu", "true", "--seed", 0)

    ref, got = killed_and_resumed(sft, tmp_path, max_steps=2)
    losses = lambda state: [(h["step"], round(h["loss"], 3)) for h in state["log_history"] if "loss" in h]  # noqa: E731
    assert losses(got) == losses(ref)  # every step once, and the resumed steps train as the uninterrupted ones


@pytest.mark.slow
def test_rl_killed_mid_run_resumes_from_its_checkpoint(tmp_path, model_path):
    tasks = tmp_path / "tasks.jsonl"
    write_jsonl(generate("pi_llm", 8, seed=3, keys=1, updates=1), tasks)

    def rl(out):
        return cli("rl", "--model", model_path, "--tasks", tasks, "--output_dir", out, "--engine", "hf",
                   "--environment", "full",  # short prompts: a cheap step (resuming is the same in every env)
                   "--max_steps", 2, "--num_generations", 2, "--per_device_train_batch_size", 2,
                   "--gradient_accumulation_steps", 1, "--max_new_tokens", 12,
                   "--max_context_tokens", 2048, "--learning_rate", "1e-5", "--save_strategy", "steps",
                   "--save_steps", 1, "--save_total_limit", 1, "--logging_steps", 1, "--report_to", "none",
                   "--optim", "sgd", "--use_cpu", "true", "--bf16", "false", "--seed", 0)

    ref, got = killed_and_resumed(rl, tmp_path, max_steps=2)
    steps = lambda state: [h["step"] for h in state["log_history"] if "reward" in h]  # noqa: E731
    assert steps(got) == steps(ref) == [1, 2]  # each step once: none lost, none repeated
    # killed after its last checkpoint, before the final save: the rerun saves that checkpoint, with no step 3
    # (transformers alone would train one more step before it checks max_steps)
    shutil.rmtree(tmp_path / "out" / "final")
    log = run(rl(tmp_path / "out"), tmp_path / "again.log")
    assert "already holds all 2 steps" in log and trainer_state(tmp_path / "out")["global_step"] == 2
    assert (tmp_path / "out" / "final" / "model.safetensors").exists()


@pytest.mark.slow
def test_eval_killed_mid_run_keeps_its_finished_runs(tmp_path, model_path):
    tasks, config = tmp_path / "tasks.jsonl", tmp_path / "eval.yaml"
    write_jsonl(generate("pi_llm", 1, seed=4, keys=1, updates=1), tasks)
    config.write_text(json.dumps({"max_new_tokens": 8, "max_tool_calls": 1, "context_budget": 64}))

    def evaluate(out):
        return cli("eval", "--config", config, "--engine", "hf", "--model", model_path, "--data", tasks,
                   "--modes", "acm,full,truncate", "--out", out)

    run(evaluate(tmp_path / "ref"), tmp_path / "ref.log")
    out = tmp_path / "out"
    runs = out / "runs" / Path(model_path).name
    kill_when(evaluate(out), lambda: (runs / "acm" / "summary.json").exists(), tmp_path / "killed.log")
    assert not (out / "results.json").exists() and not (runs / "truncate" / "summary.json").exists()
    log = run(evaluate(out), tmp_path / "rerun.log")
    assert "acm: results in" in log  # the finished run is kept, not redone
    ref_runs = tmp_path / "ref" / "runs" / Path(model_path).name
    for mode in ("acm", "full", "truncate"):
        assert records(runs / mode / "trajectories.jsonl") == records(ref_runs / mode / "trajectories.jsonl")
    got, ref = (json.loads((d / "results.json").read_text())["runs"] for d in (out, tmp_path / "ref"))
    assert timeless(got) == timeless(ref) and len(got) == 3


@pytest.mark.slow
def test_pipeline_killed_mid_stage_resumes_from_its_finished_stages(tmp_path, model_path):
    """Killed in the SFT stage: the finished stages are skipped, and their outputs are as in an uninterrupted run
    (which stops before SFT: the SFT test above compares a resumed training with an uninterrupted one)."""
    config = tmp_path / "pipeline.yaml"
    config.write_text(json.dumps({
        "name": "t", "runs_dir": str(tmp_path / "runs"), "model": model_path, "task_params": {"keys": 1, "updates": 2},
        "train_tasks": 1, "eval_tasks": 1, "rl_tasks": 1, "teacher_tasks": 3,
        "sft": {"max_steps": 1, "gradient_accumulation_steps": 1, "bf16": True, "logging_steps": 1},
    }))
    only = ["--only", "data", "teachers", "collect", "sft"]
    run(cli("pipeline", "--config", config, "--name", "ref", *only[:-1]), tmp_path / "ref.log")
    root = tmp_path / "runs" / "t"
    kill_when(cli("pipeline", "--config", config, *only), lambda: (root / "collect" / "done.json").exists(),
              tmp_path / "killed.log")
    assert not (root / "sft" / "done.json").exists()
    log = run(cli("pipeline", "--config", config, *only), tmp_path / "rerun.log")
    for stage in ("data", "teachers", "collect"):
        assert f"{stage}: done already" in log
    ref = tmp_path / "runs" / "ref"
    for stage, name in [("data", "train.jsonl"), ("teachers", "trajectories.jsonl"),
                        ("collect", "trajectories.jsonl"), ("collect", "samples.jsonl")]:
        assert (root / stage / name).read_bytes() == (ref / stage / name).read_bytes(), (stage, name)
    assert log.count("sft ...") == 1 and (root / "sft" / "done.json").exists()
    assert (root / "sft" / "final" / "model.safetensors").exists()


@pytest.mark.slow
def test_sigterm_ends_a_job_with_its_vllm_engine_processes(tmp_path, model_path):
    """`kill PID` (SIGTERM) mid-rollout: the command exits with 143 and the vLLM engine processes it started end
    with it (with Python's default SIGTERM they went on computing, orphaned). On the per-rollout schedule (the
    default for vLLM; named so it stays tested): the signal lands in an event loop with requests in flight."""
    import psutil

    tasks = tmp_path / "tasks.jsonl"
    write_jsonl(generate("pi_llm", 64, seed=4, keys=2, updates=24), tasks)
    log = tmp_path / "rollout.log"
    rollout = cli("rollout", "--model", model_path, "--data", tasks, "--out", tmp_path / "out.jsonl", "--chunk-size", 2,
                  "--max-new-tokens", 32, "--max-tool-calls", 2, "--max-context-tokens", 4096,
                  "--schedule", "per-rollout")
    # ready once the engine is up and its first chunk is written
    with running_until(rollout, lambda: lines(tmp_path / "out.jsonl.partial") > 0, log) as proc:
        engine = psutil.Process(proc.pid).children(recursive=True)
        assert any("VLLM" in " ".join(p.cmdline()) for p in engine), [p.cmdline() for p in engine]
        proc.terminate()  # the command alone, as `kill PID` does
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM, log.read_text()[-3000:]
        _, alive = psutil.wait_procs(engine, timeout=60)  # checked before the way out kills what is left
        assert not alive, [p.cmdline() for p in alive]
