"""The rollout reward (design eq. 4): +1 correct, -1 on a format error or a broken cap, 0 otherwise."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["RewardConfig", "compute_reward"]


@dataclass
class RewardConfig:
    correct_threshold: float = 1.0  # a task score at or above this counts as correct (pi_llm scores per key)
    format_error_penalty: float = -1.0  # an unparseable call or an unknown tool name anywhere in the rollout
    cap_penalty: float = -1.0  # more than max_tool_calls calls, or more than max_context_tokens tokens

    @classmethod
    def of(cls, cfg) -> "RewardConfig":
        """The reward settings of a config that has them among its fields (rl, eval)."""
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})


def compute_reward(traj, cfg: RewardConfig = RewardConfig()) -> float:
    if traj.format_errors:
        return cfg.format_error_penalty
    if traj.stop_reason != "answer":
        return cfg.cap_penalty
    return 1.0 if traj.score >= cfg.correct_threshold else 0.0
