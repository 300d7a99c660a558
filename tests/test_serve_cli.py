"""`sculptor-rl serve` as a user runs it: a subprocess on the embedded model (HF engine), the key from the env."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from openai import OpenAI


@pytest.mark.slow
def test_cli_serves_logs_its_url_and_stops_on_ctrl_c(model_path):
    env = {**os.environ, "SCULPTOR_RL_API_KEY": "from-env"}
    proc = subprocess.Popen([sys.executable, "-m", "sculptor_rl.cli", "serve", "--engine", "hf", "--port", "0",
                             "--served-model-name", "acm", "--max-new-tokens", "16"],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline, url, log = time.monotonic() + 300, None, []
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            line = proc.stderr.readline()
            log.append(line)
            m = re.search(r"serving 'acm' at (http://127\.0\.0\.1:\d+/v1) .*API key required", line)
            url = m and m.group(1)
        assert url, "".join(log)
        assert httpx.get(url + "/models").status_code == 401  # the key from the environment is enforced
        client = OpenAI(base_url=url, api_key="from-env", max_retries=0, timeout=120)
        resp = client.chat.completions.create(model="acm", messages=[{"role": "user", "content": "Say hi."}],
                                              max_tokens=8)
        assert resp.choices[0].message.content and resp.usage.completion_tokens <= 8
        proc.send_signal(signal.SIGINT)
        # uvicorn shuts down gracefully, then re-raises the signal: the exit status is Ctrl-C's, as for any program
        assert proc.wait(timeout=60) in (0, -signal.SIGINT)
        assert "Application shutdown complete" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
