"""The rollout reward (design eq. 4): +1 correct, -1 on a format error or a broken cap, 0 otherwise.

`partial_credit` (off by default; configs for real models keep eq. 4) rewards a finished rollout with its task
score instead (pi_llm: the fraction of keys right), a denser signal for a small model whose groups would
otherwise mostly tie at 0."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["RewardConfig", "compute_reward"]


@dataclass
class RewardConfig:
    correct_threshold: float = 1.0  # a task score at or above this counts as correct (pi_llm scores per key)
    format_error_penalty: float = -1.0  # an unparseable call or an unknown tool name anywhere in the rollout
    cap_penalty: float = -1.0  # more than max_tool_calls calls, or more than max_context_tokens tokens
    partial_credit: bool = False  # reward a finished rollout with its task score, not 1/0 at correct_threshold

    @classmethod
    def of(cls, cfg) -> "RewardConfig":
        """The reward settings of a config that has them among its fields (rl, eval)."""
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})


def compute_reward(traj, cfg: RewardConfig = RewardConfig()) -> float:
    if traj.format_errors:
        return cfg.format_error_penalty
    if traj.stop_reason != "answer":
        return cfg.cap_penalty
    if cfg.partial_credit:
        return float(traj.score)
    return 1.0 if traj.score >= cfg.correct_threshold else 0.0
