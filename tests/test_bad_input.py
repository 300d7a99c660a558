"""Bad input ends in one clear error naming the file, line or field — never a traceback, never a half-written output.

Task files (JSONL, Parquet, `datasets` directories), trajectory and sample files, model paths and tokenizers go
through the real `sculptor-rl` entry point in-process (an escaping exception fails the test); config files too,
plus one through a subprocess of the command line, as a user runs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from sculptor_rl.agent.chat import ChatFormat
from sculptor_rl.cli import main
from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.models import resolve_model
from sculptor_rl.samples import Sample, read_samples, write_samples
from sculptor_rl.envs.tasks import generate, load_tasks
from sculptor_rl.records import write_parquet
from sculptor_rl.trajectory import Step, Trajectory, read_trajectories, write_trajectories


def cli_error(capsys, *argv: str) -> str:
    """Run the CLI in-process; it must exit with status 2 and print exactly one `error:` line, which is returned."""
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def tasks():
    return generate("pi_llm", 3, 0, keys=2, updates=4)


def _lines(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ---- task files -------------------------------------------------------------------------------------------------


def test_truncated_and_undecodable_jsonl_name_the_line(tmp_path, tasks, capsys):
    path = _lines(tmp_path / "tasks.jsonl", tasks)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # a copy cut short mid-record
    with pytest.raises(ValueError, match=r"tasks.jsonl line 3: invalid JSON"):
        load_tasks(path)
    path.write_bytes(data.replace(b"pi_llm", b"pi\xffllm", 1))
    with pytest.raises(ValueError, match=r"tasks.jsonl line 1: not UTF-8 text"):
        load_tasks(path)
    path.write_bytes(data + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl line 4: JSON nested too deeply"):
        load_tasks(path)
    path.write_bytes(b"\n\n")
    with pytest.raises(ValueError, match="no task records"):
        load_tasks(path)
    # through the CLI: one line, status 2, and nothing written
    path.write_bytes(data[: len(data) - 40])
    out = tmp_path / "out" / "teacher.jsonl"
    line = cli_error(capsys, "collect", "--teacher", "scripted", "--data", str(path), "--out", str(out))
    assert "tasks.jsonl line 3: invalid JSON" in line
    assert not out.parent.exists() or not any(out.parent.iterdir())


WRONG_RECORDS = {
    "not an object": ([1, 2], "a record must be a JSON object, got list"),
    "no answer": ({"answer": None}, "missing required field 'answer'"),
    "id a number": ({"id": 7}, "field 'id' must be a non-empty string"),
    "unknown task": ({"task": "chess"}, "unknown task 'chess'"),
    "messages a string": ({"messages": "hello"}, "field 'messages' must be a non-empty list"),
    "bad role": ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0] must be"),
    "content a number": ({"messages": [{"role": "user", "content": 3}]}, "messages[0] must be"),
    "meta a list": ({"meta": [1]}, "field 'meta' must be an object"),
}


@pytest.mark.parametrize("case", list(WRONG_RECORDS))
def test_a_record_of_the_wrong_shape_names_line_and_field(tmp_path, tasks, case):
    change, message = WRONG_RECORDS[case]
    bad = change if isinstance(change, list) else {**tasks[1], **change}
    path = _lines(tmp_path / "tasks.jsonl", [tasks[0], bad, tasks[2]])
    with pytest.raises(ValueError) as e:
        load_tasks(path)
    assert str(e.value).startswith(f"{path} line 2: ") and message in str(e.value)
    if case in ("no answer", "unknown task", "bad role", "meta a list"):  # those a Parquet column can hold
        path = tmp_path / "tasks.parquet"
        _write_unchecked_parquet([tasks[0], bad, tasks[2]], path)
        with pytest.raises(ValueError) as e:
            load_tasks(path)
        assert str(e.value).startswith(f"{path} row 1: ") and message in str(e.value)


def _write_unchecked_parquet(records: list[dict], path: Path) -> None:
    """`write_parquet`'s layout without its field access, so wrong records get written too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"id": r["id"], "task": r["task"], "messages": r["messages"],
                                          "answer_json": json.dumps(r["answer"]), "meta_json": json.dumps(r["meta"])}
                                         for r in records]), path)


def test_corrupt_and_truncated_parquet_are_refused(tmp_path, tasks, capsys):
    path = tmp_path / "tasks.parquet"
    write_parquet(tasks, path)
    assert load_tasks(path) == tasks
    data = path.read_bytes()
    for broken in (data[: len(data) // 2], b"hello world" * 20, data[:4] + b"\x00" * 200 + data[204:]):  # truncated,
        # not Parquet at all, a zeroed page
        path.write_bytes(broken)
        with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: not a readable Parquet file"):
            load_tasks(path)
    path.unlink()
    with pytest.raises(FileNotFoundError, match="tasks.parquet: no such file"):
        load_tasks(path)
    path.write_bytes(data[: len(data) // 2])
    line = cli_error(capsys, "rollout", "--engine", "hf", "--data", str(path), "--out", str(tmp_path / "r.jsonl"))
    assert "tasks.parquet: not a readable Parquet file" in line and not (tmp_path / "r.jsonl").exists()


def test_generator_parameters_are_checked(tmp_path, capsys):
    out = tmp_path / "tasks.jsonl"
    line = cli_error(capsys, "data", "generate", "--task", "needlebench", "--param", "needels=3", "--out", str(out))
    assert line == "error: unknown needlebench parameter 'needels' (known: needles, context_tokens)"
    assert not out.exists()


def test_datasets_directories_and_unknown_formats(tmp_path, tasks):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"empty: cannot load it as a datasets name or directory"):
        load_tasks(empty)
    text = tmp_path / "text"
    text.mkdir()
    (text / "notes.txt").write_text("just some notes\n")
    with pytest.raises(ValueError, match=r"text \[train\] row 0: missing required field 'id'"):
        load_tasks(text)
    csv = tmp_path / "tasks.csv"
    csv.write_text("id,task\n1,pi_llm\n")
    with pytest.raises(ValueError, match="tasks.csv: unknown task file format"):
        load_tasks(csv)


# ---- trajectories and samples -----------------------------------------------------------------------------------


def _trajectory(tokenizer: dict | None = None) -> Trajectory:
    call = {"name": "search_context", "arguments": {"query": "x"}, "ok": True, "modified": False,
            "format_error": False, "result": "1 hit"}
    steps = [Step([1, 2, 3], [4, 5], [-0.1, -0.2], "<tool_call>", calls=[call]),
             Step([1, 2, 3, 4, 5, 6, 7], [8], None, "answer")]
    return Trajectory("t0", "pi_llm", steps, [{"role": "user", "content": "q"}], "answer", 1.0, "answer", 10, 10,
                      reward=1.0, rollout_id="t0/0", tokenizer=tokenizer or {})


BAD_TRAJECTORY_STEPS = {
    "completion ids as text": ({"completion_ids": "4 5"}, "steps[0].completion_ids must be list"),
    "a token id a float": ({"completion_ids": [4, 5.5]}, "steps[0].completion_ids[1] must be int"),
    "reuse past the end": ({"prompt_reuse": 99}, "steps[0].prompt_reuse=99 but the step before holds 0 tokens"),
    "call without modified": ({"calls": [{"name": "x", "arguments": {}, "ok": True, "format_error": False,
                                          "result": ""}]}, "steps[0].calls[0] lacks 'modified'"),
    "unknown step field": ({"colour": "red"}, "unknown field steps[0].'colour'"),
}


@pytest.mark.parametrize("case", list(BAD_TRAJECTORY_STEPS))
def test_a_wrong_trajectory_record_names_line_and_field(tmp_path, case):
    path = tmp_path / "teacher.jsonl"
    write_trajectories([_trajectory()] * 2, path)
    assert [t.steps for t in read_trajectories(path)] == [_trajectory().steps] * 2  # the round trip holds
    change, message = BAD_TRAJECTORY_STEPS[case]
    lines = path.read_text().splitlines()
    record = json.loads(lines[1])
    record["steps"][0].update(change)
    path.write_text(lines[0] + "\n" + json.dumps(record) + "\n")
    with pytest.raises(ValueError) as e:
        list(read_trajectories(path))
    assert str(e.value).startswith(f"{path} line 2: not a trajectory record") and message in str(e.value)


def test_samples_command_refuses_a_bad_trajectory_file_and_writes_nothing(tmp_path, capsys, model_path, fmt):
    path = tmp_path / "teacher.jsonl"
    write_trajectories([_trajectory(fmt.provenance)], path)
    path.write_text(path.read_text() + '{"task_id": "t1", "steps": [')  # a run killed mid-line
    out = tmp_path / "samples.jsonl"
    line = cli_error(capsys, "samples", "--in", str(path), "--out", str(out), "--model", model_path)
    assert "teacher.jsonl line 2: invalid JSON" in line and not out.exists()


BAD_SAMPLES = {
    "mask shorter": ({"loss_mask": [0, 1]}, "loss_mask has 2 entries for 3 input_ids"),
    "mask not 0/1": ({"loss_mask": [0, 1, 2]}, "loss_mask holds values other than 0 and 1"),
    "ids as strings": ({"input_ids": ["1", "2", "3"]}, "input_ids[0] must be int"),
    "missing reward": ({"reward": None}, "reward must be float"),
    "logprobs misaligned": ({"logprobs": [0.0]}, "logprobs has 1 entries for 3 input_ids"),
}


@pytest.mark.parametrize("case", list(BAD_SAMPLES))
def test_a_wrong_sample_record_names_line_and_field(tmp_path, case, capsys):
    good = Sample("r/0", [1, 2, 3], [0, 1, 1], [0], [0.0, -0.5, -0.25], 1.0)
    change, message = BAD_SAMPLES[case]
    path = tmp_path / "samples.jsonl"
    write_samples([good], path)
    assert list(read_samples(path)) == [good]
    write_jsonl([asdict(good), {**asdict(good), **change}], path)
    with pytest.raises(ValueError) as e:
        list(read_samples(path))
    assert str(e.value).startswith(f"{path} line 2: not a sample record") and message in str(e.value)
    if case == "mask shorter":  # and through the CLI
        line = cli_error(capsys, "inspect", str(path), "--index", "1")
        assert f"{path} line 2" in line and message in line
        line = cli_error(capsys, "inspect", "--in", str(path), "--index", "1")  # --in, every command's input
        assert f"{path} line 2" in line and message in line
        for twice_or_none in (["--in", str(path), str(path)], []):
            assert "name the samples file once" in cli_error(capsys, "inspect", *twice_or_none)


# ---- models and tokenizers --------------------------------------------------------------------------------------


def test_a_model_path_that_is_not_a_model(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    (tmp_path / "weights.bin").write_bytes(b"\x00" * 8)
    for path, message in ((tmp_path / "missing", "no such directory"), (tmp_path / "notes", "has no config.json"),
                          (tmp_path / "weights.bin", "a file, not a model directory")):
        with pytest.raises((ValueError, FileNotFoundError), match=f"model {re.escape(str(path))}: .*{message}"):
            resolve_model(path)
    samples = tmp_path / "samples.jsonl"
    write_samples([Sample("r/0", [1, 2], [0, 1], [0], None)], samples)
    line = cli_error(capsys, "inspect", str(samples), "--model", str(tmp_path / "notes"))
    assert line == f"error: model {tmp_path / 'notes'}: not a model directory (it has no config.json)"


def test_a_tokenizer_without_chat_template(tmp_path, model_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(model_path) / name, plain / name)
    config = json.loads((plain / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)  # the template lives in chat_template.jinja, which is not copied
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"model {re.escape(str(plain))}: the tokenizer has no chat template"):
        ChatFormat.from_pretrained(str(plain))
    samples = tmp_path / "samples.jsonl"
    write_samples([Sample("r/0", [1, 2], [0, 1], [0], None)], samples)
    line = cli_error(capsys, "inspect", str(samples), "--model", str(plain))
    assert str(plain) in line and "no chat template" in line


# ---- config files, through the command line ----------------------------------------------------------------------

CONFIGS = {  # command, settings that are fine, the bad key, an unknown key's and a wrong type's value
    "sft": (["sft"], {"samples": "s.jsonl", "use_cpu": True}, "num_train_epochs", [1, 2]),
    "rl": (["rl"], {"use_cpu": True}, "num_generations", "four"),
    "eval": (["eval"], {"num": 2}, "modes", "acm"),
    "serve": (["serve"], {"engine": "hf"}, "port", "eighty"),
    "pipeline": (["pipeline"], {"train_tasks": 2}, "rl_tasks", 1.5),
}


def test_config_errors_are_one_line_naming_file_and_key(tmp_path, capsys, monkeypatch):
    """In-process for every command (`cli_error`), and one case through a real subprocess: what a user's shell
    ends in that one line and exit status 2 (no traceback, no argparse page)."""
    cases = []
    for name, (command, fine, key, wrong) in CONFIGS.items():
        for kind, extra, needle in (("unknown", {"colour_scheme": "red"}, "colour_scheme"),
                                    ("type", {key: wrong}, key)):
            path = tmp_path / f"{name}_{kind}.yaml"
            path.write_text(json.dumps({**fine, "output_dir": str(tmp_path / "out"), **extra}
                                       if name in ("sft", "rl") else {**fine, **extra}))
            cases.append((name, kind, [*command, "--config", str(path)], (path.name, needle)))
    nested = tmp_path / "pipeline_nested.yaml"  # a stage's section is checked before the first stage runs
    nested.write_text(json.dumps({"eval": {"max_new_tokens": "lots"}}))
    cases.append(("pipeline", "nested type", ["pipeline", "--config", str(nested), "--only", "data"],
                  ("pipeline_nested.yaml", "max_new_tokens")))
    broken = tmp_path / "broken.yaml"
    broken.write_text("num: [1, 2\n")
    cases.append(("eval", "not yaml", ["eval", "--config", str(broken)], ("broken.yaml", "line")))
    cases.append(("serve", "missing file", ["serve", "--config", str(tmp_path / "nowhere.yaml")], ("nowhere.yaml",)))
    monkeypatch.chdir(tmp_path)  # a command that wrongly started would write runs/ here
    failures = []
    for name, kind, argv, needles in cases:
        error = cli_error(capsys, *argv)
        if not all(n in error for n in needles):
            failures.append(f"{name} ({kind}): {needles} not all in {error!r}")
    assert not failures, "\n".join(failures)
    name, kind, argv, needles = next(c for c in cases if c[:2] == ("rl", "unknown"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "sculptor_rl.cli", *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    err = proc.stderr
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]  # (the libraries' import-time warnings may come first)
    assert proc.returncode == 2 and "Traceback" not in err and "usage:" not in err, err[-3000:]
    assert errors == [lines[-1]] and errors[0].startswith("error:") and all(n in errors[0] for n in needles), err
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()  # no command started writing
