"""MemAct (arXiv 2510.12635): the agent prunes its own context with `prune_context(memory, delete_ids)`; every tool
result carries a short id."""

from .env import MEMACT_SYSTEM_PROMPT, PRUNE_CONTEXT, MemActEnv

__all__ = ["MEMACT_SYSTEM_PROMPT", "PRUNE_CONTEXT", "MemActEnv"]
