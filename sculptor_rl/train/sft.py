"""SFT on Algorithm 1 samples with TRL's SFTTrainer: loss only where the sample's loss mask is 1.

    sculptor-rl sft --config configs/acm/sft_quickstart_cpu.yaml [--learning_rate 1e-5 ...]
    accelerate launch --config_file configs/accelerate/zero2.yaml -m sculptor_rl.train.sft --config ...

Samples are pre-tokenized (`input_ids` + the loss mask as TRL's `assistant_masks` column), so TRL builds the
labels from our masks and never re-renders the chat. Rows of a micro-batch that share a prefix (the system
turn, a rollout's samples up to a context change) compute it once (`shared_prefix`); with
`max_tokens_per_batch` the micro-batches are cut by computed tokens instead of rows, from samples in prefix
order (`TokenBudgetBatches`). The loss is normalized by the trained tokens of the whole optimizer step
(`num_items_in_batch`), so however the samples fall into micro-batches the step's gradient is the same.
The checkpoint is a plain HF directory with the chat template (LoRA adapters are merged into it), ready for
`rollout`, `rl`, `eval` and `serve`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from trl import SFTConfig, SFTTrainer

from .. import logs
from ..agent.chat import ChatFormat
from ..config import parse_command
from ..models import resolve_model, train_bf16, train_on_cpu
from ..samples import check_tokenizer, read_samples, trim
from .checkpoints import fit, last_checkpoint, save_final
from .curves import CurvesCallback
from .lora import LoraSettings, peft_config
from .parent_settings import SFT_REFUSED, refused_settings
from .report_to import HELP as REPORT_TO_HELP
from .report_to import resolve as resolve_report_to
from .shared_prefix import BatchSettings, pack, token_logprobs

log = logging.getLogger(__name__)


@dataclass
class SculptorSFTConfig(SFTConfig, LoraSettings, BatchSettings):
    """SFTConfig with our inputs; LoRA through TRL's `ModelConfig` fields (`use_peft`, `lora_r`, ...)."""

    model: str | None = field(default=None, metadata={"help": "HF id or path; default: the embedded SmolLM2-135M"})
    samples: str = field(default="", metadata={"help": "samples .jsonl made by `sculptor-rl samples`"})
    max_length: int | None = field(default=None, metadata={"help": "longer samples are dropped; None: the "
                                                                     "model's context length"})
    chat_template: str | None = field(default=None, metadata={"help": "the chat template the samples were made "
                                                                      "with (a file or named variant), saved with "
                                                                      "the checkpoint; default: the model's"})
    chat_template_kwargs: dict | str | None = field(default=None, metadata={"help": "the template kwargs the "
                                                                                    "samples were made with"})
    parser: str = field(default="auto", metadata={"help": "the tool-call format (sculptor_rl.toolcalls.PARSERS); "
                                                          "auto: the one the chat template renders"})
    report_to: None | str | list[str] = field(default=None, metadata={"help": REPORT_TO_HELP})

    def __post_init__(self):
        if self.max_tokens_per_batch is not None and self.max_tokens_per_batch < 1:
            raise ValueError("max_tokens_per_batch must be positive (or unset)")
        self.report_to = resolve_report_to(self.report_to)
        self.bf16 = train_bf16(self.bf16)
        self.use_cpu = train_on_cpu(self.use_cpu, self.bf16 is not False or self.fp16)  # None: TRL's bf16
        super().__post_init__()
        refused = refused_settings(self, SFT_REFUSED)  # TRL's settings the trainer does not honour
        if refused:
            raise ValueError("invalid SFT config:\n- " + "\n- ".join(refused))


class TokenBudgetBatches(torch.utils.data.Sampler):
    """Micro-batches of at most `max_tokens` computed tokens (`shared_prefix.pack`), cut from the samples in
    sorted token order so that neighbours share prefixes; the micro-batches come in a seeded random order, a
    new one each epoch."""

    def __init__(self, seqs: list[list[int]], max_tokens: int, shared_prefix: bool, seed: int):
        order = sorted(range(len(seqs)), key=lambda i: seqs[i])
        self.batches = [[order[u] for u in b] for b in pack([[seqs[i]] for i in order], max_tokens, shared_prefix)]
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        shuffle = torch.randperm(len(self.batches), generator=torch.Generator().manual_seed(self.seed + self.epoch))
        return iter([self.batches[i] for i in shuffle.tolist()])


class MaskedSFTTrainer(SFTTrainer):
    """SFTTrainer whose loss runs the LM head only on trained positions (see `masked_lm`), computes shared
    prefixes once (`shared_prefix`) and, with `max_tokens_per_batch`, cuts micro-batches by tokens."""

    def get_train_dataloader(self):
        args = self.args
        if not args.max_tokens_per_batch:
            return super().get_train_dataloader()
        from torch.utils.data import DataLoader

        batches = TokenBudgetBatches(self.train_dataset["input_ids"], args.max_tokens_per_batch, args.shared_prefix,
                                     args.seed)
        dataset = self._remove_unused_columns(self.train_dataset, description="Training")
        return self.accelerator.prepare(DataLoader(dataset, batch_sampler=batches, collate_fn=self.data_collator,
                                                   num_workers=args.dataloader_num_workers))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        logp, mask = token_logprobs(model, inputs["input_ids"], inputs.get("attention_mask"), inputs["labels"],
                                    shared_prefix=self.args.shared_prefix)
        tokens = mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = -logp.sum() / torch.as_tensor(tokens).clamp(min=1)
        if (self.args.average_tokens_across_devices and (self.model_accepts_loss_kwargs or self.compute_loss_func)
                and num_items_in_batch is not None):
            # as transformers' own `compute_loss`: num_items_in_batch counts every rank's tokens, and DDP / DeepSpeed
            # average the ranks' gradients, so each rank's sum over the global count is scaled back by the ranks
            loss_scale = self.accelerator.num_processes // self.get_tp_size()
            loss = loss * (loss_scale if self.args.n_gpu <= 1 else self.args.n_gpu)
        return (loss, None) if return_outputs else loss


def load_sample_dataset(path: str, max_length: int | None, tokenizer: dict | None = None):
    """Samples → a `datasets.Dataset` with `input_ids` and `assistant_masks`, each trimmed after its last trained
    token (`samples.trim`); over-long ones are dropped (truncating would cut the trained completions). With
    `tokenizer` (a `ChatFormat.provenance`), samples made by another tokenizer are refused."""
    from datasets import Dataset

    rows = []
    for k, s in enumerate(read_samples(path)):
        if tokenizer is not None:
            check_tokenizer(s.tokenizer, tokenizer, f"{path}: sample {k + 1}")
        s = trim(s)
        rows.append({"input_ids": s.input_ids, "assistant_masks": s.loss_mask})
    if not rows:
        raise ValueError(f"{path} holds no samples")
    kept = [r for r in rows if max_length is None or len(r["input_ids"]) <= max_length]
    if not kept:
        raise ValueError(f"all {len(rows)} samples in {path} are longer than max_length={max_length}")
    if len(kept) < len(rows):
        log.warning("dropped %d of %d samples longer than max_length=%d", len(rows) - len(kept), len(rows), max_length)
    return Dataset.from_list(kept)


def build_trainer(cfg: SculptorSFTConfig) -> MaskedSFTTrainer:
    from transformers import AutoConfig, AutoModelForCausalLM

    if not cfg.samples:
        raise ValueError("set `samples:` in the config (or --samples): the .jsonl written by `sculptor-rl samples`")
    model_path = resolve_model(cfg.model)
    fmt = ChatFormat.of(model_path, cfg)
    tokenizer = fmt.tokenizer
    tokenizer.chat_template = fmt.template  # the checkpoint is served with the template its samples were made with
    cfg.max_length = cfg.max_length or getattr(AutoConfig.from_pretrained(model_path), "max_position_embeddings", None)
    dataset = load_sample_dataset(cfg.samples, cfg.max_length, fmt.provenance)  # before the model: refusals are cheap
    init = dict(cfg.model_init_kwargs or {})
    cfg.model_init_kwargs = None  # applied here: TRL refuses them beside a model it did not load
    init.setdefault("dtype", torch.float32)
    model = AutoModelForCausalLM.from_pretrained(model_path, **init)
    trainer = MaskedSFTTrainer(model=model, args=cfg, train_dataset=dataset, processing_class=tokenizer,
                               peft_config=peft_config(cfg), callbacks=[CurvesCallback()])
    check_process_group(trainer.accelerator)
    trainer.fmt = fmt  # saved with the final checkpoint (`save_final`)
    return trainer


def train(cfg: SculptorSFTConfig) -> Path:
    trainer = build_trainer(cfg)
    resume = last_checkpoint(cfg.output_dir) if cfg.resume_from_checkpoint is None else cfg.resume_from_checkpoint
    if resume:
        log.info("resuming from %s", resume)
    fit(trainer, resume)
    return save_final(trainer, trainer.processing_class, Path(cfg.output_dir) / "final", trainer.fmt)


def check_process_group(accelerator) -> None:
    """DeepSpeed on CPU: without a GPU accelerate picks no backend and reports one process per rank while
    DeepSpeed's gloo group spans them all, so every rank would train on the same rows; `ddp_backend: gloo`
    makes accelerate use that group. DDP on CPU: without `use_cpu` accelerate's state is NO in every rank of a
    gloo group (no DDP wrapper, no reduce), and each rank would train on its own."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() != accelerator.num_processes:
        raise ValueError(f"accelerate sees {accelerator.num_processes} process(es) but the process group has "
                         f"{dist.get_world_size()}: without GPUs, set `ddp_backend: gloo` (DeepSpeed on CPU)")
    if dist.is_initialized() and dist.get_world_size() > 1 and accelerator.distributed_type == "NO":
        # DDP on CPU without use_cpu: accelerate wraps nothing and reduces nothing, each rank trains alone
        raise ValueError(f"the process group has {dist.get_world_size()} ranks but accelerate distributes nothing "
                         "(its distributed type is NO): on CPU set `use_cpu: true` with `ddp_backend: gloo`")


def main(argv: list[str] | None = None) -> None:
    import sys

    logs.setup()
    logs.log_start("sft")
    try:
        cfg = parse_command(SculptorSFTConfig, list(sys.argv[1:] if argv is None else argv), prog="sculptor-rl sft")
    except ValueError as e:  # an unknown key or a wrong type in the config file, or the config's own checks
        sys.exit(f"error: {e}")
    print(train(cfg))


if __name__ == "__main__":
    main()
