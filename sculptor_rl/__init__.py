"""sculptor-rl: teach LLM agents Active Context Management (ACM) with SFT and GSPO/GRPO."""

__version__ = "0.1.0"
