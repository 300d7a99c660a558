"""MemTool (Lumer et al., 2025), the task family: the agent manages its own tool set over a session of requests.

`catalogue` (5,000 `get_<metric>_<ticker>` tools, deterministic outputs, BM25 search), `sessions` (the `memtool`
task family: sessions of T requests), `metrics` (removal ratios, residual tools, correctness, completion,
reward, plot). The environment is `sculptor_rl.envs.memtool.MemToolEnv`, its scripted teacher
`sculptor_rl.envs.memtool_teacher`.
"""

from .catalogue import Catalogue, catalogue

__all__ = ["Catalogue", "catalogue"]
