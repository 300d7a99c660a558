"""bf16 only where it is native: on a CPU without AVX512-BF16 or AMX, torch emulates it ~20x slower than fp32,
so engines there run in fp32 (their memory sized for it) and trainers turn a config's bf16 off, saying so."""

import logging

import pytest

from sculptor_rl import models
from sculptor_rl.engines import vllm_engine
from sculptor_rl.engines.vllm_engine import _weights_bytes, cpu_kv_cache_bytes, default_device_settings
from sculptor_rl.train.rl_config import SculptorGRPOConfig
from sculptor_rl.train.sft import SculptorSFTConfig

GiB = 1 << 30


@pytest.mark.parametrize("native", [True, False])
def test_engine_dtype_follows_the_cpu(monkeypatch, native):
    monkeypatch.setattr(vllm_engine, "bf16_is_fast", lambda: native)
    assert default_device_settings()["dtype"] == ("bfloat16" if native else "float32")


def test_an_fp32_engine_is_sized_for_four_byte_values(model_path):
    plenty = 64 * GiB
    assert cpu_kv_cache_bytes(model_path, 8192, available=plenty, dtype="float32") == \
        2 * cpu_kv_cache_bytes(model_path, 8192, available=plenty, dtype="bfloat16")
    # the embedded checkpoint is stored in fp32: an fp32 engine holds the file's size, a bf16 one half of it
    assert _weights_bytes(model_path, "float32") == 2 * _weights_bytes(model_path, "bfloat16") > 0


@pytest.mark.parametrize("config", [
    lambda tmp: SculptorSFTConfig(output_dir=str(tmp), bf16=True, use_cpu=True, report_to=[]),
    lambda tmp: SculptorGRPOConfig(output_dir=str(tmp), bf16=True, use_cpu=True, report_to=[],
                                   per_device_train_batch_size=2, num_generations=2)], ids=["sft", "rl"])
@pytest.mark.parametrize("native", [True, False])
def test_trainers_keep_bf16_only_where_it_is_native(monkeypatch, caplog, tmp_path, config, native):
    monkeypatch.setattr(models, "bf16_is_fast", lambda: native)
    with caplog.at_level(logging.WARNING, logger="sculptor_rl.models"):
        cfg = config(tmp_path)
    assert cfg.bf16 is native
    assert ("bf16 off" in caplog.text) is not native


@pytest.mark.parametrize("cores, preset, expected", [(2, None, "0"), (4, None, "0"), (8, None, None), (2, "1", "1")])
def test_small_cpus_keep_no_core_for_the_vllm_scheduler_unless_told(monkeypatch, cores, preset, expected):
    import os

    from sculptor_rl.engines.vllm_engine import reserve_no_scheduler_core_on_small_cpus

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    if preset is not None:
        monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", preset)
    reserve_no_scheduler_core_on_small_cpus()
    assert os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU") == expected


@pytest.mark.parametrize("config", [SculptorGRPOConfig, SculptorSFTConfig])
def test_bf16_on_a_gpu_without_it_fails_when_the_config_is_read(monkeypatch, tmp_path, config):
    """A pre-Ampere GPU: the choice between fp16 and fp32 is the user's, so the config fails in one line instead of
    training in another precision than it says."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "Tesla V100-SXM2-32GB")
    with pytest.raises(ValueError, match="bf16: Tesla V100-SXM2-32GB does not support it; set `bf16: false`"):
        models.train_bf16(True)
    assert models.train_bf16(False) is False
