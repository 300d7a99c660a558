"""The command line, as a user runs it: tools → data → collect (scripted teacher) → samples → inspect."""

import json
import subprocess
import sys

import pytest

from sculptor_rl.cli import main
from sculptor_rl.samples import read_samples
from sculptor_rl.trajectory import read_trajectories


def test_tools_schemas_prints_the_six_tools():
    out = subprocess.run([sys.executable, "-m", "sculptor_rl.cli", "tools", "schemas"], capture_output=True,
                         text=True, check=True).stdout
    names = [t["function"]["name"] for t in json.loads(out)]
    assert names == ["fragment_context", "fold_fragment", "summarize_fragment", "restore_fragment",
                     "search_context", "get_search_detail"]


def test_generate_collect_samples_inspect(tmp_path, capsys, model_path):
    tasks = tmp_path / "tasks.jsonl"
    main(["data", "generate", "--task", "pi_llm", "--num", "4", "--seed", "3", "--out", str(tasks),
          "--param", "keys=2", "--param", "updates=24"])
    records = [json.loads(line) for line in tasks.read_text().splitlines()]
    assert len(records) == 4 and records[0]["meta"]["keys"] == 2

    trajs = tmp_path / "teacher.jsonl"
    main(["collect", "--teacher", "scripted", "--data", str(tasks), "--out", str(trajs)])
    out = capsys.readouterr().out
    assert "| pi_llm | 4 | 1.000 |" in out and "wrote 4 of 4 trajectories" in out
    kept = list(read_trajectories(trajs))
    assert all(t.reward == 1.0 and t.steps[-1].calls == [] for t in kept)
    assert json.loads(trajs.with_suffix(".summary.json").read_text())["pi_llm"]["n"] == 4

    samples = tmp_path / "samples.jsonl"
    main(["samples", "--in", str(trajs), "--out", str(samples)])
    got = list(read_samples(samples))
    assert len(got) == sum(sum(s.modified for s in t.steps) + 1 for t in kept)
    assert sum(sum(s.loss_mask) for s in got) == sum(t.generated_tokens for t in kept)

    capsys.readouterr()
    main(["inspect", str(samples), "--index", "1", "--plain"])
    shown = capsys.readouterr().out
    assert "[[<tool_call>" in shown and "<|im_end|>]]" in shown  # the trained completion, end-of-turn included


def test_bad_input_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "task": "pi_llm"}\n')
    with pytest.raises(SystemExit, match="messages"):
        main(["collect", "--teacher", "scripted", "--data", str(bad), "--out", str(tmp_path / "o.jsonl")])
    with pytest.raises(SystemExit):
        main(["data", "generate", "--task", "nope", "--num", "1", "--out", str(tmp_path / "x.jsonl")])


def test_generate_help_names_every_family(capsys):
    from sculptor_rl.envs.registry import family_names

    with pytest.raises(SystemExit):
        main(["data", "generate", "--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in family_names())


def test_rollout_commands_read_a_config_and_flags_override_it(tmp_path, capsys):
    """`collect`/`rollout`/`memory build` load their settings as every command does: YAML (`--config`, checked key
    by key), then the flags given."""
    from sculptor_rl.envs.tasks import generate
    from sculptor_rl.jsonl import write_jsonl
    from sculptor_rl.trajectory import read_trajectories

    write_jsonl(generate("pi_llm", 2, 0, keys=1, updates=64), tmp_path / "t.jsonl")  # the teacher makes 2 calls
    (tmp_path / "c.yaml").write_text("num_generations: 3\nmax_tool_calls: 1\nenvironment: acm\n")
    main(["collect", "--config", str(tmp_path / "c.yaml"), "--num-generations", "2", "--min-reward", "-1",
          "--data", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "out.jsonl")])
    trajs = list(read_trajectories(tmp_path / "out.jsonl"))
    assert len(trajs) == 4  # the flag's 2 rollouts per task, not the file's 3
    assert all(t.stop_reason == "max_tool_calls" for t in trajs)  # the file's cap of 1 call
    (tmp_path / "bad.yaml").write_text("max_tool_call: 1\n")
    with pytest.raises(SystemExit):
        main(["collect", "--config", str(tmp_path / "bad.yaml"), "--data", str(tmp_path / "t.jsonl"),
              "--out", str(tmp_path / "o2.jsonl")])
    assert "unknown key 'max_tool_call' for RolloutConfig (did you mean 'max_tool_calls'?)" in capsys.readouterr().err
