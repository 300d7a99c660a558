"""Checkpoint evaluation: the ACM environment against the no-tool environments (full, truncate, bm25), or the
MemTool modes."""

from .run import ACM_MODES, EvalConfig, evaluate

__all__ = ["ACM_MODES", "EvalConfig", "evaluate"]
