"""Checkpoints and resume, for SFT and RL alike: which checkpoint a run resumes from, training resumed from it,
and the final plain HF checkpoint (LoRA merged) that rollout, eval and serve read."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .weight_sync import named_weights

log = logging.getLogger(__name__)


def last_checkpoint(output_dir: str) -> str | None:
    """The newest whole `checkpoint-N` in `output_dir`. The Trainer writes `trainer_state.json` last, so a
    checkpoint a kill cut short has none (or a torn one) and the one before it is used."""
    def whole(d: Path) -> bool:
        try:
            json.loads((d / "trainer_state.json").read_text())
            return True
        except (OSError, ValueError):
            log.warning("%s is incomplete (a killed save?); resuming from an earlier checkpoint", d)
            return False

    if not Path(output_dir).is_dir():
        return None
    found = [d for d in Path(output_dir).glob(f"{PREFIX_CHECKPOINT_DIR}-*")
             if d.is_dir() and d.name.split("-")[-1].isdigit()]
    return next((str(d) for d in sorted(found, key=lambda d: -int(d.name.split("-")[-1])) if whole(d)), None)


def fit(trainer, resume: str | None) -> None:
    """`trainer.train`, resumed from `resume`. A checkpoint that already holds `max_steps` is loaded, not trained
    on: transformers checks max_steps only after a step, so a run killed between its last checkpoint and its
    final save would otherwise come back one step longer."""
    from transformers import TrainerState

    if resume and trainer.args.max_steps > 0 and not trainer.is_deepspeed_enabled:
        done = TrainerState.load_from_json(str(Path(resume) / "trainer_state.json")).global_step
        if done >= trainer.args.max_steps:
            log.info("%s already holds all %d steps: loaded, not trained further", resume, trainer.args.max_steps)
            trainer._load_from_checkpoint(resume)
            return
    trainer.train(resume_from_checkpoint=resume)


def save_final(trainer, tokenizer, out: Path, fmt=None) -> Path:
    """Save a plain HF checkpoint with the tokenizer and chat template, and `fmt`'s template kwargs and parser
    (`ChatFormat.save_settings`: rl, eval and serve read them back); LoRA adapters are merged first. Under
    ZeRO-3 each rank holds a shard of every weight (PEFT's merge would add the adapters to empty shards: "size of
    tensor a (0)"), so the weights are gathered and merged (`weight_sync.named_weights`, every rank takes part)
    and the main process saves them."""
    from trl.distributed import DistributedBackend

    model = trainer.accelerator.unwrap_model(trainer.model)
    dist = DistributedBackend(trainer.accelerator)
    if hasattr(model, "merge_and_unload") and dist.is_zero3:
        main = trainer.accelerator.is_main_process
        state = {name: p.to("cpu", copy=True) for name, p in named_weights(model, dist) if main}
        if main:
            model.get_base_model().save_pretrained(out, state_dict=state)
            tokenizer.save_pretrained(out)
    elif hasattr(model, "merge_and_unload"):
        merged = model.merge_and_unload()
        if trainer.accelerator.is_main_process:
            merged.save_pretrained(out)
            tokenizer.save_pretrained(out)
    else:
        trainer.save_model(str(out))  # gathers ZeRO-3 / FSDP shards; saves the tokenizer too
    if fmt is not None and trainer.accelerator.is_main_process:
        fmt.save_settings(out)
    trainer.accelerator.wait_for_everyone()
    log.info("saved %s", out)
    return out
