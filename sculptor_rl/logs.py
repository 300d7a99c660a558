"""Logging for every entry point (the CLI, `python -m sculptor_rl.train.rl`, `python -m sculptor_rl.train.sft`):
the project's INFO lines on stderr, each prefixed with the process's rank where a launcher started several
(`accelerate launch`, torchrun and DeepSpeed set RANK), so that under SLURM they reach the job's log and say which
rank wrote them. A process that configured logging itself keeps its own (`logging.basicConfig` adds nothing then)."""

from __future__ import annotations

import logging
import os

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup(verbose: bool = False) -> None:
    rank = os.environ.get("RANK")
    prefix = f"[rank {rank}] " if rank is not None else ""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=prefix + FORMAT)


def log_start(command: str) -> None:
    """One INFO line naming the command and the versions that run it (the first thing to compare between ranks or
    between a cluster's log and a laptop's)."""
    import torch
    import transformers
    import trl

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    logging.getLogger("sculptor_rl").info("sculptor-rl %s: torch %s, transformers %s, trl %s on %s (world size %s)",
                                          command, torch.__version__, transformers.__version__, trl.__version__,
                                          device, os.environ.get("WORLD_SIZE", "1"))
