"""`serve` says it is ready only when it is: the URL line appears once the server accepts connections, and the port
listens from the moment it is bound (early clients wait instead of being refused), also on a loaded CPU."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from sculptor_rl.serve.server import bind

TRIES = 3
BUSY_SECONDS = 240  # the load's own bound: it ends by itself even if the test is killed


def test_a_bound_port_accepts_before_the_app_runs():
    sock = bind("127.0.0.1", 0)
    try:  # no server runs yet: the kernel queues the connection in the backlog
        socket.create_connection(sock.getsockname()[:2], timeout=5).close()
    finally:
        sock.close()


@pytest.fixture(scope="module")
def tiny_model(model_path, tmp_path_factory) -> str:
    """A tiny random Llama with the embedded model's tokenizer and chat template: a server that starts in seconds."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny")
    tok = AutoTokenizer.from_pretrained(model_path)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture
def loaded_cpu():
    """Two busy processes, one per core of the machines this runs on: a server that is slow to come up."""
    code = f"import time\nt = time.monotonic() + {BUSY_SECONDS}\nwhile time.monotonic() < t: pass"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    yield
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_the_url_line_means_connections_are_accepted(tiny_model, loaded_cpu):
    refused = []
    for attempt in range(TRIES):
        proc = subprocess.Popen([sys.executable, "-m", "sculptor_rl.cli", "serve", "--engine", "hf",
                                 "--model", tiny_model, "--port", "0", "--served-model-name", "acm",
                                 "--max-new-tokens", "4", "--api-key", "k"], stderr=subprocess.PIPE, text=True)
        try:
            deadline, url, log = time.monotonic() + 180, None, []
            while url is None and time.monotonic() < deadline and proc.poll() is None:
                line = proc.stderr.readline()
                log.append(line)
                m = re.search(r"serving 'acm' at http://(127\.0\.0\.1):(\d+)/v1 ", line)
                if m:  # connect the moment the line appears, before reading anything else
                    url = m.group(1), int(m.group(2))
                    try:
                        socket.create_connection(url, timeout=10).close()
                    except ConnectionRefusedError:
                        refused.append(attempt)
            assert url, "".join(log)
            # the probe's route answers without the key; everything else still asks for it
            base = f"http://{url[0]}:{url[1]}"
            assert httpx.get(base + "/health", timeout=30).status_code == 200
            assert httpx.get(base + "/v1/models", timeout=30).status_code == 401
            assert httpx.post(base + "/health", timeout=30).status_code == 401
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stderr.close()
    assert not refused, f"refused right after the URL line in tries {refused} of {TRIES}"
