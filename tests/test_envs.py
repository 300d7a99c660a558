"""The environment registry (sculptor_rl.envs) and `--env` on the rollout/collect command line."""

from __future__ import annotations

import json

import pytest

from sculptor_rl import cli
from sculptor_rl.acm import Workspace
from sculptor_rl.envs import ENVS, make_env_factory
from sculptor_rl.memtool import MemToolEnv
from sculptor_rl.tasks import generate
from sculptor_rl.trajectory import read_trajectories


def test_registry_builds_each_environment():
    assert set(ENVS) == {"acm", "memtool"}
    acm_task, session = generate("babilong", 1, 0)[0], generate("memtool", 1, 0)[0]
    ws = make_env_factory("acm", 3)(acm_task, 1)
    assert isinstance(ws, Workspace) and ws.render() == acm_task["messages"]
    env = make_env_factory("memtool", 0, mode="hybrid", limit=64)(session, 0)
    assert isinstance(env, MemToolEnv) and (env.mode, env.limit) == ("hybrid", 64)
    assert env.render() == [{"role": "system", "content": env.render()[0]["content"]}, session["messages"][1]]


@pytest.mark.parametrize("name,params,message", [
    ("gym", {}, "unknown environment 'gym'"),
    ("acm", {"mode": "workflow"}, "takes no parameters"),
    ("memtool", {"modes": "workflow"}, "unknown memtool parameter 'modes'"),
    ("memtool", {"mode": "manual"}, "unknown memtool mode"),
    ("memtool", {"limit": "128"}, "limit must be an integer"),
])
def test_bad_environment_or_parameters(name, params, message):
    with pytest.raises(ValueError, match=message):
        make_env_factory(name, 0, **params)


def test_cli_generate_and_collect_memtool(tmp_path, capsys, model_path):
    data, out = tmp_path / "sessions.jsonl", tmp_path / "teacher.jsonl"
    cli.main(["data", "generate", "--task", "memtool", "--num", "2", "--out", str(data),
              "--param", "requests=3", "--param", "calls_per_request=2"])
    cli.main(["collect", "--env", "memtool", "--env-param", "mode=workflow", "--teacher", "scripted",
              "--data", str(data), "--out", str(out), "--max-tool-calls", "40"])
    printed = capsys.readouterr().out
    assert "| workflow | 2 | 1.000 | 1.000 |" in printed and "wrote 2 of 2 trajectories" in printed
    trajs = list(read_trajectories(out))
    assert [t.info["mode"] for t in trajs] == ["workflow"] * 2 and all(t.reward == 1.0 for t in trajs)
    assert json.loads(out.with_suffix(".summary.json").read_text())["memtool"]["accuracy"] == 1.0
    with pytest.raises(SystemExit, match="unknown memtool mode"):
        cli.main(["collect", "--env", "memtool", "--env-param", "mode=manual", "--data", str(data),
                  "--out", str(out)])
