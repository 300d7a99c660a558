"""The RL trainer on the memtool environment: the config (YAML `environment: memtool`, its parameters' checks) and
two real GSPO steps on the `hf` engine (slow). The measured run with vLLM from the SFT checkpoint is in the issue
note."""

import json
import zlib
from pathlib import Path

import pytest
import yaml
from conftest import digest

from sculptor_rl.envs import RewardConfig, register_env
from sculptor_rl.envs.memtool.env import MemToolEnv
from sculptor_rl.train.rl import SculptorGRPOConfig, build_trainer, check_config, main

ROOT = Path(__file__).resolve().parents[1]


def test_yaml_environment_names_the_environment(tmp_path, capsys):
    cfg = yaml.safe_load((ROOT / "configs/memtool/rl_cpu.yaml").read_text())
    assert cfg["environment"] == "memtool" and cfg["environment_params"]["mode"] == "autonomous"
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump({**cfg, "tasks": "t.jsonl"}))
    main(["validate", "--config", str(path)])
    out = capsys.readouterr().out
    assert "environment memtool" in out and "config OK" in out
    # flags still override the file: the acm env takes none of the file's memtool parameters
    with pytest.raises(SystemExit, match="of the acm environment .it takes no parameters"):
        main(["validate", "--config", str(path), "--environment", "acm"])
    with pytest.raises(SystemExit, match="unknown memtool mode 'manual'"):
        main(["validate", "--config", str(path), "--environment_params", '{"mode": "manual"}'])
    # TrlParser's own `env:` (environment variables) is not our environment's name: a clear error, no rewrite
    path.write_text(yaml.safe_dump({"env": "memtool", "tasks": "t.jsonl"}))
    with pytest.raises(SystemExit, match=f"{path}: unknown key 'env' for SculptorGRPOConfig"):
        main(["validate", "--config", str(path)])


@pytest.mark.parametrize("params,message", [
    ({"mode": "manual"}, "unknown memtool mode"),
    ({"limits": 3}, "unknown parameter 'limits' of the memtool environment"),
    ({"loaded_tools_penalty": -1}, "loaded_tools_penalty must be a number >= 0"),
])
def test_check_config_rejects_bad_environment_params(params, message):
    cfg = SculptorGRPOConfig(output_dir="/tmp/unused", tasks="t.jsonl", use_cpu=True, report_to="none",
                             per_device_train_batch_size=8, environment="memtool", environment_params=params)
    with pytest.raises(ValueError, match=message):
        check_config(cfg)


def coin(traj) -> float:
    """A reward term that surely varies within a group (a checksum of the first completion's text, in 1000
    steps: two sampled completions tie on it 1 time in 1000): the untrained embedded model earns the memtool
    reward (task completion) ~never, so this makes the gradient nonzero."""
    return zlib.crc32(traj.steps[0].text.encode()) % 1000 / 1000


@register_env
class CoinMemToolEnv(MemToolEnv):
    """MemTool whose reward adds the coin: another reward is an environment's `reward` hook."""

    name = "memtool-coin"

    def reward(self, traj) -> float:
        return super().reward(traj) + coin(traj)


@pytest.mark.slow
def test_two_rl_steps_on_memtool_sessions(model_path, tmp_path):
    from sculptor_rl.envs.memtool import metrics
    from sculptor_rl.envs.tasks import generate
    from sculptor_rl.jsonl import write_jsonl
    from sculptor_rl.trajectory import read_trajectories

    write_jsonl(generate("memtool", 4, seed=3, requests=2, calls_per_request=1), tmp_path / "tasks.jsonl")
    cfg = SculptorGRPOConfig(
        model=model_path, tasks=str(tmp_path / "tasks.jsonl"), output_dir=str(tmp_path / "rl"),
        environment="memtool-coin", environment_params={"mode": "autonomous", "loaded_tools_penalty": 0.01},
        engine="hf", max_steps=2, num_generations=2, per_device_train_batch_size=2, gradient_accumulation_steps=1,
        gradient_checkpointing=False,  # a group per micro-batch, its shared prompt computed once
        max_new_tokens=24,
        max_tool_calls=4, max_context_tokens=2048, learning_rate=1e-4, lr_scheduler_type="constant", bf16=False,
        report_to="none", save_strategy="no", use_cpu=True, save_rollouts=True, seed=1)
    assert check_config(cfg) == []
    trainer = build_trainer(cfg)
    before = digest(trainer.model)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "reward" in e]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert min(e["frac_reward_zero_std"] for e in logs) < 1, "no group had a learning signal"
    assert digest(trainer.model) != before
    for e in logs:  # calls per task logged for the env's own tools; catalogue calls pooled
        assert {k for k in e if k.startswith("tools/")} == {"tools/Search_Tools", "tools/Remove_Tools", "tools/other"}
        assert e["tools/Search_Tools"] + e["tools/Remove_Tools"] + e["tools/other"] == pytest.approx(
            e["tool_calls_per_task"])
    for step in (1, 2):
        trajs = list(read_trajectories(tmp_path / "rl" / "rollouts" / f"step-{step:06d}.rank0.jsonl"))
        assert len(trajs) == 2 and len({t.task_id for t in trajs}) == 1
        for t in trajs:  # memtool sessions, rewarded once, by the env: the memtool reward plus the coin
            assert t.info["env"] == "memtool" and t.info["mode"] == "autonomous" and t.info["turns"]
            env_reward = metrics.session_reward(t, RewardConfig.of(cfg), loaded_tools_penalty=0.01)
            assert t.reward == pytest.approx(env_reward + coin(t))
        summary = metrics.summarize(trajs)["autonomous"]
        assert summary["sessions"] == 2 and 0.0 <= summary["task_completion"] <= 1.0
    json.dumps(logs)  # the logged metrics are plain numbers
