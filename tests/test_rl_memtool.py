"""The RL trainer on the memtool environment: the config (YAML `env: memtool`, env_params checks) and two real
GSPO steps on the `hf` engine (slow). The measured run with vLLM from the SFT checkpoint is in the issue note."""

import json
import zlib
from pathlib import Path

import pytest
import yaml
from conftest import digest

from sculptor_rl.envs import env_flag_from_config
from sculptor_rl.train.rl import SculptorGRPOConfig, build_trainer, check_config, loop_reward, main

ROOT = Path(__file__).resolve().parents[1]


def test_yaml_env_names_the_environment(tmp_path, capsys):
    cfg = yaml.safe_load((ROOT / "configs/rl/memtool_cpu.yaml").read_text())
    assert cfg["env"] == "memtool" and cfg["env_params"]["mode"] == "autonomous"
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump({**cfg, "tasks": "t.jsonl"}))
    args, copy = env_flag_from_config(["--config", str(path), "--max_steps", "2"])
    assert args[:2] == ["--env", "memtool"] and args[-2:] == ["--max_steps", "2"] and "env" not in yaml.safe_load(
        Path(copy).read_text())
    Path(copy).unlink()
    assert env_flag_from_config(["--max_steps", "2"]) == (["--max_steps", "2"], None)
    main(["validate", "--config", str(path)])
    out = capsys.readouterr().out
    assert "env memtool" in out and "config OK" in out
    # flags still override the file: the acm env takes none of the file's memtool parameters
    with pytest.raises(SystemExit, match="the acm environment takes no parameters"):
        main(["validate", "--config", str(path), "--env", "acm"])
    with pytest.raises(SystemExit, match="unknown memtool mode 'manual'"):
        main(["validate", "--config", str(path), "--env_params", '{"mode": "manual"}'])


@pytest.mark.parametrize("params,message", [
    ({"mode": "manual"}, "unknown memtool mode"),
    ({"limits": 3}, "unknown memtool parameter 'limits'"),
    ({"loaded_tools_penalty": -1}, "loaded_tools_penalty must be a number >= 0"),
])
def test_check_config_rejects_bad_env_params(params, message):
    cfg = SculptorGRPOConfig(output_dir="/tmp/unused", tasks="t.jsonl", use_cpu=True, report_to="none",
                             per_device_train_batch_size=8, env="memtool", env_params=params)
    with pytest.raises(ValueError, match=message):
        check_config(cfg)


def coin(trajectories, **kwargs) -> list[float]:
    """A reward that surely varies within a group (a checksum of the first completion's text): the untrained
    embedded model earns the loop's memtool reward (task completion) ~never, so this makes the gradient nonzero."""
    return [float(zlib.crc32(t.steps[0].text.encode()) % 2) for t in trajectories]


@pytest.mark.slow
def test_two_rl_steps_on_memtool_sessions(model_path, tmp_path):
    from sculptor_rl.memtool import metrics
    from sculptor_rl.tasks import generate, write_jsonl
    from sculptor_rl.trajectory import read_trajectories

    write_jsonl(generate("memtool", 4, seed=3, requests=2, calls_per_request=1), tmp_path / "tasks.jsonl")
    cfg = SculptorGRPOConfig(
        model=model_path, tasks=str(tmp_path / "tasks.jsonl"), output_dir=str(tmp_path / "rl"), env="memtool",
        env_params={"mode": "autonomous", "loaded_tools_penalty": 0.01}, engine="hf", max_steps=2,
        num_generations=4, per_device_train_batch_size=1, gradient_accumulation_steps=4, max_completion_length=24,
        max_tool_calls=4, max_context_tokens=2048, learning_rate=1e-4, lr_scheduler_type="constant", bf16=False,
        report_to="none", save_strategy="no", use_cpu=True, save_rollouts=True, seed=1)
    assert check_config(cfg) == []
    trainer = build_trainer(cfg, reward_funcs=[loop_reward, coin])
    before = digest(trainer.model)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "reward" in e]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert min(e["frac_reward_zero_std"] for e in logs) < 1, "no group had a learning signal"
    assert digest(trainer.model) != before
    for e in logs:  # calls per task logged for the env's own tools; catalogue calls pooled
        assert {k for k in e if k.startswith("tools/")} == {"tools/search_tools", "tools/remove_tools", "tools/other"}
        assert e["tools/search_tools"] + e["tools/remove_tools"] + e["tools/other"] == pytest.approx(
            e["tool_calls_per_task"])
    for step in (1, 2):
        trajs = list(read_trajectories(tmp_path / "rl" / "rollouts" / f"step-{step:06d}.rank0.jsonl"))
        assert len(trajs) == 4 and len({t.task_id for t in trajs}) == 1
        for t in trajs:  # memtool sessions, rewarded by the env's reward plus the coin
            assert t.info["env"] == "memtool" and t.info["mode"] == "autonomous" and t.info["turns"]
            env_reward = metrics.session_reward(t, cfg.reward_config(), loaded_tools_penalty=0.01)
            assert t.reward == pytest.approx(env_reward + coin([t])[0])
        summary = metrics.summarize(trajs)["autonomous"]
        assert summary["sessions"] == 4 and 0.0 <= summary["task_completion"] <= 1.0
    json.dumps(logs)  # the logged metrics are plain numbers
