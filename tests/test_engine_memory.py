"""A CPU engine's KV cache is sized in bytes from what it needs and what is free, never as a share of the
machine that other engines already hold; one that cannot fit fails before it starts, in one line."""

import pytest

from sculptor_rl.engines.vllm_engine import (DEFAULT_KV_TOKENS, ENGINE_OVERHEAD, GiB, _weights_bytes,
                                             cpu_kv_cache_bytes, kv_bytes_per_token)

SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
           "head_dim": 64, "max_position_embeddings": 8192}


def test_bytes_per_token_counts_keys_and_values_of_every_layer():
    assert kv_bytes_per_token(SMOLLM2) == 2 * 30 * 3 * 64 * 2  # K and V, layers, kv heads, head dim, bf16
    no_gqa = {k: v for k, v in SMOLLM2.items() if k not in ("num_key_value_heads", "head_dim")}
    assert kv_bytes_per_token(no_gqa) == 2 * 30 * 9 * 64 * 2
    assert kv_bytes_per_token({"text_config": SMOLLM2}) == kv_bytes_per_token(SMOLLM2)


def test_default_budget_is_what_the_engine_needs_not_a_share_of_the_machine(model_path):
    per_token = kv_bytes_per_token(SMOLLM2)
    plenty = 100 * GiB
    assert cpu_kv_cache_bytes(model_path, 8192, available=plenty) == per_token * DEFAULT_KV_TOKENS
    assert cpu_kv_cache_bytes(model_path, 8192, requested=300 << 20, available=plenty) == 300 << 20
    # a window longer than the default budget gets at least one whole sequence
    assert cpu_kv_cache_bytes(model_path, 65536, available=plenty) >= per_token * 65536


def test_budget_shrinks_to_the_free_memory_down_to_one_sequence(model_path):
    fixed = _weights_bytes(model_path) + ENGINE_OVERHEAD
    one_sequence = kv_bytes_per_token(SMOLLM2) * 8192
    tight = fixed + 2 * one_sequence
    size = cpu_kv_cache_bytes(model_path, 8192, available=tight)
    assert one_sequence <= size <= 2 * one_sequence < kv_bytes_per_token(SMOLLM2) * DEFAULT_KV_TOKENS


def test_an_engine_that_cannot_fit_says_so_with_the_numbers(model_path):
    fixed = _weights_bytes(model_path) + ENGINE_OVERHEAD
    with pytest.raises(ValueError) as e:
        cpu_kv_cache_bytes(model_path, 8192, available=fixed + (10 << 20))
    message = str(e.value)
    assert "\n" not in message and "max_model_len 8192" in message and "GiB of memory is free" in message
    assert "lower max_model_len or kv_cache_memory_bytes" in message
    with pytest.raises(ValueError, match="kv_cache_memory_bytes"):
        cpu_kv_cache_bytes(model_path, 8192, requested=4 * GiB, available=fixed + GiB)
