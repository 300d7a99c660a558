"""What the trainer hands the engine: checkpoint-named weights, LoRA adapters merged (and unmerged after)."""

import copy

import torch

from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer
from test_rl_loss import tiny_model_dir


def test_lora_weights_are_merged_under_checkpoint_names(fmt, tmp_path):
    from transformers import AutoModelForCausalLM

    path = tiny_model_dir(len(fmt.tokenizer), tmp_path / "tiny")
    base_names = [n for n, _ in AutoModelForCausalLM.from_pretrained(path).named_parameters()]
    cfg = SculptorGRPOConfig(output_dir=str(tmp_path), tasks="unused.jsonl", engine="hf", num_generations=2,
                             per_device_train_batch_size=2, bf16=False, report_to="none", use_peft=True)
    task = {"id": "t0", "task": "pi_llm", "messages": [{"role": "user", "content": "x"}], "answer": {"k": "v"}}
    from peft import LoraConfig

    trainer = SculptorGRPOTrainer(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), cfg, [task],
                                  fmt.tokenizer, fmt, peft_config=LoraConfig(r=4, target_modules="all-linear"))
    model = trainer.model
    with torch.no_grad():  # a trained adapter: B is zero at initialisation
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    ids = torch.tensor([[5, 6, 7, 8]])
    before = model(input_ids=ids).logits
    merged = copy.deepcopy(model).merge_and_unload()
    weights = trainer.weight_sync.weights(trainer.model)
    assert list(weights) == base_names
    assert all(torch.equal(weights[n], p.to(torch.bfloat16)) for n, p in merged.named_parameters())
    assert not torch.equal(weights["model.layers.0.self_attn.q_proj.weight"],
                           AutoModelForCausalLM.from_pretrained(path).model.layers[0].self_attn.q_proj.weight)
    assert torch.allclose(model(input_ids=ids).logits, before, atol=1e-5)  # the adapters are unmerged again
