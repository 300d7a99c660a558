"""Checkpoint evaluation: the ACM agent against the full-context, truncation and BM25 baselines."""

from .modes import MODES, prepare
from .run import EvalConfig, evaluate

__all__ = ["MODES", "EvalConfig", "evaluate", "prepare"]
