"""ReSum (arXiv 2509.13313): no context tool; when the prompt reaches 90 % of the budget, a summarizer condenses the
conversation and the context restarts from the question and the summary."""

from .env import RESUM_SYSTEM_PROMPT, ReSumEnv

__all__ = ["RESUM_SYSTEM_PROMPT", "ReSumEnv"]
