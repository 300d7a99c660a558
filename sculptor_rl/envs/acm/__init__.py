"""ACM: the task's conversation in an ACM workspace (`sculptor_rl.acm`, the six context tools) over the
long-context task families (`sculptor_rl.longcontext`): the environment (`env`) and its scripted teacher
(`teacher`)."""

from .env import ACM_SYSTEM_PROMPT, AcmEnv

__all__ = ["ACM_SYSTEM_PROMPT", "AcmEnv"]
