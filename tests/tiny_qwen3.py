"""A tiny Qwen3-shaped model folder, as a user's `--model PATH` would be: a randomly initialised Qwen3 of a few
thousand parameters, a byte-level tokenizer carrying Qwen3's special tokens, Qwen3's official chat template
(tests/data/templates/qwen3.jinja, a byte-exact copy of Qwen/Qwen3-0.6B's: tests/data/templates/PROVENANCE.md) and
Qwen3's generation config (stop on <|im_end|> and <|endoftext|>). Fast to build, to load and to train on a CPU."""

from __future__ import annotations

from pathlib import Path


def tiny_qwen3_dir(path) -> str:
    """The model folder at `path`, built once (the tokenizer of `test_templates`, trained on a few generated tasks)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    from test_templates import tokenizer

    path = Path(path)
    if (path / "config.json").exists():
        return str(path)
    tok = tokenizer("qwen3")
    cfg = AutoConfig.for_model("qwen3", vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=4096,
                               tie_word_embeddings=True, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    GenerationConfig(eos_token_id=tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"]),
                     pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>")).save_pretrained(path)
    return str(path)
