"""The no-tool baselines on the long-context families: `full` (the whole context), `truncate` and `bm25` (the
context cut to a token budget: its end, or the chunks most like the question)."""

from .env import BASELINE_SYSTEM_PROMPT, BaselineParams, Bm25Env, FullEnv, TruncateEnv

__all__ = ["BASELINE_SYSTEM_PROMPT", "BaselineParams", "Bm25Env", "FullEnv", "TruncateEnv"]
