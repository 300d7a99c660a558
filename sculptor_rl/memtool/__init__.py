"""MemTool (Lumer et al., 2025): an environment where the agent manages its own tool set.

`catalogue` (5,000 `get_<metric>_<ticker>` tools, deterministic outputs, BM25 search), `sessions` (the `memtool`
task family: sessions of T requests), `env` (`MemToolEnv`: management tools, limit, modes, history window),
`teacher` (the scripted policy for SFT data), `metrics` (removal ratios, residual tools, correctness,
completion, reward, plot).
"""

from .catalogue import Catalogue, catalogue
from .env import MODES, MemToolConfig, MemToolEnv

__all__ = ["Catalogue", "MODES", "MemToolConfig", "MemToolEnv", "catalogue"]
