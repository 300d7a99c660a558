"""`sculptor-rl serve` refuses a max_model_len above the model's context before it starts the engine (vLLM would
refuse it only after loading the weights), and configs/acm/serve_gpu.yaml asks for Qwen3-8B's own context."""

from pathlib import Path

import pytest
import yaml

from sculptor_rl.serve.server import main

ROOT = Path(__file__).resolve().parents[1]


def test_serve_refuses_a_window_longer_than_the_models(model_path):
    with pytest.raises(SystemExit) as e:
        main(["--model", model_path, "--port", "0", "--max_model_len", "131072"])
    assert "max_model_len 131072 is above" in str(e.value.code) and "8192 tokens" in str(e.value.code)


def test_gpu_serve_config_fits_qwen3_8b():
    assert yaml.safe_load((ROOT / "configs/acm/serve_gpu.yaml").read_text())["max_model_len"] == 40960
