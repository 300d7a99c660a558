"""MemAgent (arXiv 2507.02259): the long context read in chunks, each turn a fresh prompt of problem + memory +
chunk whose reply overwrites the memory (capped), and a last turn that answers from the memory."""

from .env import MemAgentEnv, MemAgentParams

__all__ = ["MemAgentEnv", "MemAgentParams"]
