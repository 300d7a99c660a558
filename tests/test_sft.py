"""SFT on Algorithm 1 samples: the masked loss, and a real short run of `sculptor-rl sft` that resumes."""

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sculptor_rl.samples import Sample, write_samples
from sculptor_rl.train.masked_lm import masked_token_logprobs


def tiny_model():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


def test_masked_loss_equals_the_models_own_loss_on_the_same_labels():
    model = tiny_model()
    ids = torch.randint(0, 97, (2, 24))
    labels = torch.full_like(ids, -100)
    labels[0, 5:9], labels[0, 20:24], labels[1, 12:17] = ids[0, 5:9], ids[0, 20:24], ids[1, 12:17]
    mask = torch.ones_like(ids)
    logp, m = masked_token_logprobs(model, ids, mask, labels)
    ours = -logp.sum() / m.sum()
    assert m.sum() == (labels != -100).sum()  # position 0 is never a target: every label here is trained
    assert torch.allclose(ours, model(input_ids=ids, attention_mask=mask, labels=labels).loss, atol=1e-6)
    ours.backward()  # gradients flow through the kept positions only
    assert model.lm_head.weight.grad.abs().sum() > 0


@pytest.mark.slow
def test_sft_runs_saves_a_servable_checkpoint_and_resumes(tmp_path, fmt, model_path):
    from sculptor_rl.cli import main

    head = fmt.head_ids([{"role": "user", "content": "Say hi."}], None)
    completion = fmt.completion_ids("hi")
    samples = [Sample("r/0", head + completion, [0] * len(head) + [1] * len(completion), [0], None, 1.0,
                      fmt.provenance)] * 4
    write_samples(samples, tmp_path / "samples.jsonl")
    args = ["sft", "--samples", str(tmp_path / "samples.jsonl"), "--output_dir", str(tmp_path / "out"),
            "--per_device_train_batch_size", "2", "--learning_rate", "1e-4", "--save_strategy", "steps",
            "--save_steps", "1", "--save_total_limit", "1",  # one checkpoint on disk (~1.6 GB with Adam state)
            "--logging_steps", "1", "--report_to", "none", "--use_cpu", "true"]
    main(args + ["--max_steps", "1"])
    final = tmp_path / "out" / "final"
    assert (final / "model.safetensors").exists() and (final / "chat_template.jinja").exists()
    state = json.loads((tmp_path / "out" / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1 and state["log_history"][0]["loss"] > 0

    main(args + ["--max_steps", "2"])  # resumes from checkpoint-1 instead of starting over
    state = json.loads((tmp_path / "out" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and [h["step"] for h in state["log_history"] if "loss" in h] == [1, 2]
    assert not (tmp_path / "out" / "checkpoint-1").exists()


def test_loss_over_every_ranks_tokens_is_scaled_back_as_transformers_does(fmt, tmp_path, monkeypatch):
    """With num_items_in_batch counted over all ranks (average_tokens_across_devices), transformers' own
    `compute_loss` multiplies by the number of processes (DDP and DeepSpeed average the ranks' gradients); ours the
    same, so 2 ranks train with the 1-rank gradient (without it: half of it, and another clip)."""
    from accelerate import Accelerator
    from datasets import Dataset
    from transformers import Trainer

    from sculptor_rl.train.sft import MaskedSFTTrainer, SculptorSFTConfig

    model = tiny_model()
    rows = [{"input_ids": list(range(3, 15)), "assistant_masks": [0] * 6 + [1] * 6}]
    cfg = SculptorSFTConfig(output_dir=str(tmp_path), bf16=False, report_to="none",
                            gradient_checkpointing=False)
    trainer = MaskedSFTTrainer(model=model, args=cfg, train_dataset=Dataset.from_list(rows),
                               processing_class=fmt.tokenizer)
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    labels = torch.full_like(ids, -100)
    labels[0, 4:9], labels[1, 10:16] = ids[0, 4:9], ids[1, 10:16]
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    monkeypatch.setattr(Accelerator, "num_processes", property(lambda self: 2))
    n = torch.tensor(40)  # the step's trained tokens on every rank
    assert trainer.model_accepts_loss_kwargs and cfg.average_tokens_across_devices
    ours = trainer.compute_loss(model, dict(inputs), num_items_in_batch=n)
    theirs = Trainer.compute_loss(trainer, model, dict(inputs), num_items_in_batch=n)
    assert torch.allclose(ours, theirs, atol=1e-6)
    single = Trainer.compute_loss(trainer, model, dict(inputs), num_items_in_batch=n) / 2
    assert not torch.allclose(ours, single)
