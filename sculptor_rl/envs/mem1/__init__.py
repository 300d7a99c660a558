"""MEM1 (arXiv 2506.15841): each turn the model rewrites an internal state and acts; the next prompt is the task
plus only the last state, action and observation."""

from .env import MEM1_SYSTEM_PROMPT, Mem1Env

__all__ = ["MEM1_SYSTEM_PROMPT", "Mem1Env"]
