"""MemTool (Lumer et al., 2025): the agent manages its own tool set over a session of requests.

`env` (the environment, its three modes, the history manager and judge), `catalogue` (5,000
`get_<metric>_<ticker>` tools, deterministic outputs, BM25 search), `sessions` (the `memtool` task family: sessions
of T requests), `metrics` (removal ratios, residual tools, correctness, completion, reward, plot; the report's
table), `teacher` (the scripted teacher).
"""

from .env import MODES, MemToolParams, MemToolEnv

__all__ = ["MODES", "MemToolParams", "MemToolEnv"]
