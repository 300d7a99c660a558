"""The environment contract and registry (sculptor_rl.envs) and `--environment` on the rollout/collect command line."""

from __future__ import annotations

import json

import pytest

from sculptor_rl import cli
from sculptor_rl.envs.acm import ACM_SYSTEM_PROMPT, AcmEnv
from sculptor_rl.envs import Env, conversation_env, env_class, env_names, make_env_factory
from sculptor_rl.envs.memtool import MemToolEnv
from sculptor_rl.envs.baselines.env import BASELINE_SYSTEM_PROMPT
from sculptor_rl.envs.memtool.env import MEMTOOL_SYSTEM_PROMPT
from sculptor_rl.envs.tasks import generate
from sculptor_rl.trajectory import read_trajectories


def test_registry_builds_each_environment(fmt):
    # the package's own (tests register toy environments of their own beside them)
    assert {name for name in env_names() if env_class(name).__module__.startswith("sculptor_rl.")} == {
        "acm", "memtool", "full", "truncate", "bm25", "memtoolagent", "toolmem", "tamem",
        "fold", "memact", "resum", "mem1", "memagent"}
    acm_task, session = generate("babilong", 1, 0)[0], generate("memtool", 1, 0)[0]
    env = make_env_factory("acm", seed=3)(acm_task, 1)
    assert isinstance(env, AcmEnv) and env.workspace._rng.random() == AcmEnv(acm_task, seed=3 * 1_000_003 + 1) \
        .workspace._rng.random()
    env = make_env_factory("memtool", {"mode": "hybrid", "limit": 64})(session, 0)
    assert isinstance(env, MemToolEnv) and (env.mode, env.limit) == ("hybrid", 64)
    shown = make_env_factory("truncate", {"context_budget": 50}, tokenizer=fmt.tokenizer)(acm_task, 0)
    assert len(fmt.encode(shown.render()[1]["content"])) < len(fmt.encode(shown.original()[1]["content"]))
    assert shown.original()[1] == acm_task["messages"][0] and shown.tools == []


def test_records_carry_no_system_prompt_the_environment_gives_it():
    task = generate("pi_llm", 1, 0)[0]
    assert [m["role"] for m in task["messages"]] == ["user"]
    for name, prompt in (("acm", ACM_SYSTEM_PROMPT), ("full", BASELINE_SYSTEM_PROMPT)):
        assert make_env_factory(name)(task, 0).render() == [{"role": "system", "content": prompt}, *task["messages"]]
    session = generate("memtool", 1, 0)[0]
    assert make_env_factory("memtool")(session, 0).render()[0]["content"].startswith(MEMTOOL_SYSTEM_PROMPT)
    # a user's own record with a system message of its own: the environment's prompt comes first, then it
    own = {**task, "messages": [{"role": "system", "content": "Answer in French."}, *task["messages"]]}
    assert make_env_factory("acm")(own, 0).render()[0]["content"] == f"{ACM_SYSTEM_PROMPT}\n\nAnswer in French."
    served = conversation_env("acm")([{"role": "user", "content": "hi"}], 0).render()
    assert served == [{"role": "system", "content": ACM_SYSTEM_PROMPT}, {"role": "user", "content": "hi"}]


@pytest.mark.parametrize("name,params,message", [
    ("gym", {}, "unknown environment 'gym'"),
    ("acm", {"mode": "workflow"}, "unknown parameter 'mode' of the acm environment .it takes no parameters"),
    ("memtool", {"modes": "workflow"}, "unknown parameter 'modes' of the memtool environment"),
    ("memtool", {"mode": "manual"}, "unknown memtool mode"),
    ("memtool", {"limit": "128"}, "limit must be an integer"),
    ("bm25", {"chunk_tokens": 0}, "chunk_tokens must be an integer >= 1"),
])
def test_bad_environment_or_parameters(name, params, message):
    with pytest.raises(ValueError, match=message):
        make_env_factory(name, params)


def test_the_base_hooks_have_defaults():
    """A bare `Env` is a working no-tool environment: the family's scorer, eq. 4, no tools, one answer."""
    task = generate("babilong", 1, 0)[0]
    env = Env(task)
    assert env.render() == task["messages"] and env.tools == [] and not env.on_answer("x") and env.info() == {}
    result = env.execute("fold_fragment", {})
    assert not result.ok and result.text.startswith("Error:") and len(env.render()) == 1
    assert env.score(None) == 0.0 and env.score(f"The answer is {task['answer']}.") == 1.0


def test_truncate_needs_the_tokenizer():
    with pytest.raises(ValueError, match="needs the policy's tokenizer"):
        make_env_factory("truncate")(generate("babilong", 1, 0)[0], 0)


def test_cli_generate_and_collect_memtool(tmp_path, capsys, model_path):
    data, out = tmp_path / "sessions.jsonl", tmp_path / "teacher.jsonl"
    cli.main(["data", "generate", "--task", "memtool", "--num", "2", "--out", str(data),
              "--param", "requests=3", "--param", "calls_per_request=2"])
    cli.main(["collect", "--environment", "memtool", "--environment-param", "mode=workflow", "--teacher", "scripted",
              "--data", str(data), "--out", str(out), "--max-tool-calls", "40"])
    printed = capsys.readouterr().out
    # the MemTool table (Table 2's columns): 6 requests, all right and with their tools called
    assert "| 1.00 [0.61, 1.00] | 1.00 [0.61, 1.00] | 2 × 3 |" in printed and "wrote 2 of 2 trajectories" in printed
    trajs = list(read_trajectories(out))
    assert [t.info["mode"] for t in trajs] == ["workflow"] * 2 and all(t.reward == 1.0 for t in trajs)
    assert json.loads(out.with_suffix(".summary.json").read_text())["memtool"]["accuracy"] == 1.0
    with pytest.raises(SystemExit):
        cli.main(["collect", "--environment", "memtool", "--environment-param", "mode=manual", "--data", str(data),
                  "--out", str(tmp_path / "other.jsonl")])
    assert "unknown memtool mode" in capsys.readouterr().err


def test_reward_is_eq4_unless_partial_credit():
    from types import SimpleNamespace

    from sculptor_rl.envs import RewardConfig, compute_reward

    def traj(score, stop="answer", errors=0):
        return SimpleNamespace(score=score, stop_reason=stop, format_errors=errors)

    eq4, partial = RewardConfig(), RewardConfig(partial_credit=True)
    assert [compute_reward(traj(s), eq4) for s in (0.0, 2 / 3, 1.0)] == [0.0, 0.0, 1.0]
    assert [compute_reward(traj(s), partial) for s in (0.0, 2 / 3, 1.0)] == [0.0, 2 / 3, 1.0]
    for cfg in (eq4, partial):  # penalties stay
        assert compute_reward(traj(1.0, errors=1), cfg) == -1.0
        assert compute_reward(traj(1.0, stop="max_tool_calls"), cfg) == -1.0
