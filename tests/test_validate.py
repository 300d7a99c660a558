"""`sculptor-rl validate` (and `rl validate`) on every shipped config, each kind checked as its command reads it; and
the bad inputs that used to pass a check and fail later (or never): one `error:` line and exit 2 before any work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sculptor_rl.cli import CONFIG_KINDS, config_kind, main
from test_example_env import tiny_qwen3  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[1]
# every config a command reads (configs/accelerate/ are accelerate's own, read by `accelerate launch`)
SHIPPED = sorted(p for p in (ROOT / "configs").rglob("*.yaml") if p.parent.name != "accelerate")


def test_every_shipped_config_validates(model_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # configs name each other relative to the repository
    kinds = {}
    for path in SHIPPED:
        rel = str(path.relative_to(ROOT))
        kinds[rel] = config_kind(rel)
        main(["validate", "--config", rel])
        out = capsys.readouterr().out
        assert out.startswith(f"{rel}: {kinds[rel]} config") and out.rstrip().endswith("config OK"), out[-2000:]
    assert set(kinds.values()) == set(CONFIG_KINDS)
    assert kinds["configs/quickstart.yaml"] == kinds["configs/paper_protocol_gpu.yaml"] == "pipeline"
    # `rl validate` takes the other kinds too (it used to refuse them: "unknown key 'name'", "unknown key 'samples'")
    for rel in ("configs/quickstart_gpu.yaml", "configs/paper_protocol_gpu.yaml", "configs/acm/sft_qwen3_1.7b.yaml"):
        main(["rl", "validate", "--config", rel])
        assert capsys.readouterr().out.rstrip().endswith("config OK")


def test_a_config_of_no_kind_names_the_closest_ones_bad_key(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump({"model": None, "samples": "s.jsonl", "max_stepz": 3}))
    with pytest.raises(ValueError, match="unknown key 'max_stepz'.*nor of any config kind"):
        config_kind(str(path))


def error_of(args: list[str], capsys) -> str:
    """The one line a bad input gives (exit status 2)."""
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2, args
    lines = capsys.readouterr().err.strip().splitlines()
    return lines[-1]


def test_bad_inputs_stop_before_any_work(tmp_path, capsys, monkeypatch, model_path):
    monkeypatch.chdir(tmp_path)
    main(["data", "generate", "--task", "pi_llm", "--num", "2", "--param", "keys=2", "--param", "updates=4",
          "--out", "pi.jsonl"])
    records = [json.loads(line) for line in Path("pi.jsonl").read_text().splitlines()]
    Path("pi_int.jsonl").write_text("".join(json.dumps({**r, "answer": 7}) + "\n" for r in records))
    Path("empty.jsonl").write_text("")
    Path("sums.jsonl").write_text(json.dumps({"id": "s", "task": "sum", "answer": 3, "messages": [
        {"role": "user", "content": "What is 1 + 2?"}]}) + "\n")
    capsys.readouterr()
    rl = ["rl", "validate", "--model", model_path, "--output_dir", str(tmp_path / "rl")]
    table = [
        (["data", "generate", "--task", "pi_llm", "--num", "-3", "--out", "x.jsonl"],
         "argument --num: expected an integer >= 0, got -3"),
        (["samples", "--in", "empty.jsonl", "--out", "s.jsonl"], "empty.jsonl: no trajectories in it"),
        (["samples", "--in", "empty.jsonl", "--out", "s.jsonl", "--parser", "nosuch"],
         "argument --parser: invalid choice: 'nosuch'"),
        (["collect", "--data", "pi_int.jsonl", "--out", "t.jsonl", "--model", model_path],
         "pi_int.jsonl line 1: field 'answer' of a pi_llm task must be dict, got int 7"),
        ([*rl, "--tasks", "sums.jsonl"], "tasks: sums.jsonl line 1: unknown task 'sum'"),
        ([*rl, "--tasks", "sums.jsonl", "--environment", "acm"], "tasks: sums.jsonl line 1: unknown task 'sum'"),
        ([*rl, "--tasks", "pi.jsonl", "--max_tool_calls", "-1"], "max_tool_calls must be at least 0, got -1"),
    ]
    for args, message in table:
        line = error_of(args, capsys)
        assert message in line, (args, line)
    assert not Path("x.jsonl").exists() and not Path("s.jsonl").exists() and not Path("t.jsonl").exists()


def test_a_broken_pipe_ends_quietly(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "sculptor_rl.cli", "tools", "schemas"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.readline()  # `| head -1`: read a line, then close the pipe
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 0 and "Broken pipe" not in err and "Traceback" not in err, err


def test_an_sft_config_whose_template_renders_no_tool_calls_is_refused(tmp_path, capsys, tiny_qwen3):  # noqa: F811
    plain = tmp_path / "plain.jinja"  # a template that drops the assistant's tool calls
    plain.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
    config = tmp_path / "sft_plain.yaml"
    config.write_text(yaml.safe_dump({"model": tiny_qwen3, "samples": "s.jsonl", "output_dir": str(tmp_path / "o"),
                                      "chat_template": str(plain)}))
    assert "renders no tool calls" in error_of(["validate", "--config", str(config)], capsys)
    config.write_text(yaml.safe_dump({"model": tiny_qwen3, "samples": "s.jsonl", "output_dir": str(tmp_path / "o")}))
    main(["validate", "--config", str(config)])  # the model's own (Qwen3's official) template
    assert "the hermes parser reads both calls back" in capsys.readouterr().out


def test_eval_and_serve_configs_check_the_models_chat_template(tmp_path, capsys, monkeypatch, tiny_qwen3):  # noqa: F811
    """As the SFT and RL configs: the template renders a tool conversation its parser reads back; a checkpoint not
    trained yet or a Hub id offline is NOT checked, at once."""
    import time

    from huggingface_hub import constants

    plain = tmp_path / "plain.jinja"  # a template that drops the assistant's tool calls
    plain.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
    configs = {"eval": {"models": [tiny_qwen3], "tasks": ["pi_llm"], "out": str(tmp_path / "e")},
               "serve": {"model": tiny_qwen3}}
    for kind, values in configs.items():
        config = tmp_path / f"{kind}_plain.yaml"
        config.write_text(yaml.safe_dump({**values, "chat_template": str(plain)}))
        assert "renders no tool calls" in error_of(["validate", "--config", str(config)], capsys), kind
        config.write_text(yaml.safe_dump(values))  # the model's own (Qwen3's official) template
        main(["validate", "--config", str(config)])
        assert "the hermes parser reads both calls back" in capsys.readouterr().out, kind
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    config = tmp_path / "eval_later.yaml"
    config.write_text(yaml.safe_dump({"models": [tiny_qwen3, "runs/sft/later/final", "nosuch-org/nosuch-model"],
                                      "tasks": ["pi_llm"], "out": str(tmp_path / "e")}))
    start = time.perf_counter()
    main(["validate", "--config", str(config)])
    out = capsys.readouterr().out
    assert time.perf_counter() - start < 20, "no Hub retries"
    assert "chat template: NOT checked (model runs/sft/later/final: no such directory)" in out
    assert "chat template: NOT checked (nosuch-org/nosuch-model: offline: HF_HUB_OFFLINE is set" in out
    assert out.count("parser reads both calls back") == 1 and out.rstrip().endswith("config OK")
