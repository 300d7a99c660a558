"""SFT on Algorithm 1 samples with TRL's SFTTrainer: loss only where the sample's loss mask is 1.

    sculptor-rl sft --config configs/sft/quickstart_cpu.yaml [--learning_rate 1e-5 ...]
    accelerate launch --config_file configs/accelerate/zero2.yaml -m sculptor_rl.train.sft --config ...

Samples are pre-tokenized (`input_ids` + the loss mask as TRL's `assistant_masks` column), so TRL builds the
labels from our masks and never re-renders the chat. The checkpoint is a plain HF directory with the chat
template (LoRA adapters are merged into it), ready for `rollout`, `rl`, `eval` and `serve`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from trl import SFTConfig, SFTTrainer, TrlParser

from ..models import resolve_model
from ..samples import read_samples
from .curves import CurvesCallback
from .masked_lm import masked_token_logprobs

log = logging.getLogger(__name__)


@dataclass
class SculptorSFTConfig(SFTConfig):
    model: str | None = field(default=None, metadata={"help": "HF id or path; default: the embedded SmolLM2-135M"})
    samples: str = field(default="", metadata={"help": "samples .jsonl made by `sculptor-rl samples`"})
    max_length: int | None = field(default=None, metadata={"help": "longer samples are dropped; None: the "
                                                                     "model's context length"})
    use_peft: bool = field(default=False, metadata={"help": "train LoRA adapters (merged into the saved model)"})
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: list[str] = field(default_factory=lambda: ["all-linear"])


class MaskedSFTTrainer(SFTTrainer):
    """SFTTrainer whose loss runs the LM head only on trained positions (see `masked_lm`)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        logp, mask = masked_token_logprobs(model, inputs["input_ids"], inputs.get("attention_mask"), inputs["labels"])
        tokens = mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = -logp.sum() / torch.as_tensor(tokens).clamp(min=1)
        return (loss, None) if return_outputs else loss


def load_sample_dataset(path: str, max_length: int | None):
    """Samples → a `datasets.Dataset` with `input_ids` and `assistant_masks`; over-long ones are dropped
    (truncating would cut the trained completions, which come last)."""
    from datasets import Dataset

    rows = [{"input_ids": s.input_ids, "assistant_masks": s.loss_mask} for s in read_samples(path)]
    if not rows:
        raise ValueError(f"{path} holds no samples")
    kept = [r for r in rows if max_length is None or len(r["input_ids"]) <= max_length]
    if not kept:
        raise ValueError(f"all {len(rows)} samples in {path} are longer than max_length={max_length}")
    if len(kept) < len(rows):
        log.warning("dropped %d of %d samples longer than max_length=%d", len(rows) - len(kept), len(rows), max_length)
    return Dataset.from_list(kept)


def build_trainer(cfg: SculptorSFTConfig) -> MaskedSFTTrainer:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not cfg.samples:
        raise ValueError("set `samples:` in the config (or --samples): the .jsonl written by `sculptor-rl samples`")
    model_path = resolve_model(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    cfg.max_length = cfg.max_length or getattr(model.config, "max_position_embeddings", None)
    dataset = load_sample_dataset(cfg.samples, cfg.max_length)
    trainer = MaskedSFTTrainer(model=model, args=cfg, train_dataset=dataset, processing_class=tokenizer,
                               peft_config=lora_config(cfg), callbacks=[CurvesCallback()])
    check_process_group(trainer.accelerator)
    return trainer


def train(cfg: SculptorSFTConfig) -> Path:
    trainer = build_trainer(cfg)
    resume = _last_checkpoint(cfg.output_dir) if cfg.resume_from_checkpoint is None else cfg.resume_from_checkpoint
    if resume:
        log.info("resuming from %s", resume)
    trainer.train(resume_from_checkpoint=resume)
    return save_final(trainer, trainer.processing_class, Path(cfg.output_dir) / "final")


def check_process_group(accelerator) -> None:
    """DeepSpeed on CPU: without a GPU accelerate picks no backend and reports one process per rank while
    DeepSpeed's gloo group spans them all, so every rank would train on the same rows; `ddp_backend: gloo`
    makes accelerate use that group."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() != accelerator.num_processes:
        raise ValueError(f"accelerate sees {accelerator.num_processes} process(es) but the process group has "
                         f"{dist.get_world_size()}: without GPUs, set `ddp_backend: gloo` (DeepSpeed on CPU)")


def lora_config(cfg):
    """The LoRA adapters a config asks for (`use_peft` and the `lora_*` fields, shared by SFT and RL), or None."""
    if not cfg.use_peft:
        return None
    from peft import LoraConfig

    targets = cfg.lora_target_modules
    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets[0] if targets == ["all-linear"] else targets, task_type="CAUSAL_LM")


def _last_checkpoint(output_dir: str) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None


def save_final(trainer, tokenizer, out: Path) -> Path:
    """Save a plain HF checkpoint with the tokenizer and chat template; LoRA adapters are merged first."""
    if hasattr(trainer.model, "merge_and_unload"):
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        if trainer.accelerator.is_main_process:
            merged.save_pretrained(out)
            tokenizer.save_pretrained(out)
    else:
        trainer.save_model(str(out))  # gathers ZeRO-3 / FSDP shards; saves the tokenizer too
    trainer.accelerator.wait_for_everyone()
    log.info("saved %s", out)
    return out


def main(argv: list[str] | None = None) -> None:
    (cfg,) = TrlParser((SculptorSFTConfig,)).parse_args_and_config(argv)
    print(train(cfg))


if __name__ == "__main__":
    main()
