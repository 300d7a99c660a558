"""`sculptor-rl serve`: bind the port, start the engine, run the app on uvicorn (or in a thread: `Server`).

    sculptor-rl serve --model CKPT [--engine vllm|hf] [--host 127.0.0.1] [--port 8000] [--api-key KEY]
    sculptor-rl serve --model CKPT --environment memtool --environment_params '{"mode": "autonomous"}'
    sculptor-rl serve --config configs/acm/serve_cpu.yaml [--port 9000 ...]
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time

import uvicorn

from ..agent.chat import ChatFormat
from ..engines import SamplingConfig, make_engine
from ..config import parse_command
from ..envs import params_of
from ..models import DEFAULT_MODEL, check_context_length, resolve_model
from .app import build_app
from .config import ServeConfig

log = logging.getLogger(__name__)

__all__ = ["Server", "bind", "serve", "main"]

API_KEY_ENV = "SCULPTOR_RL_API_KEY"


def bind(host: str, port: int) -> socket.socket:
    """A listening address taken before the (slow) engine start, so a busy port fails at once."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


class Server:
    """An app on uvicorn over a bound socket: `run()` in the foreground, or `with Server(...):` in a thread."""

    def __init__(self, app, sock: socket.socket, log_level: str = "info"):
        host, port = sock.getsockname()[:2]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"
        self.sock = sock
        # on shutdown, requests still running get a few seconds to finish, then their connections are closed.
        # An idle connection is kept longer than clients keep theirs (httpx and the OpenAI SDK: 5 s, uvicorn's own
        # default too), so that the client drops it first: with equal timeouts a request sent at the 5th second
        # met a connection the server was closing ("connection reset by peer", seen in the serve fuzz test).
        self.uvicorn = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                                     timeout_graceful_shutdown=10, timeout_keep_alive=65))
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        self.uvicorn.run(sockets=[self.sock])

    def __enter__(self) -> "Server":
        self._thread = threading.Thread(target=self.run, name="uvicorn", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server at {self.url} did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.uvicorn.should_exit = True
        self._thread.join(timeout=30)


def serve(cfg: ServeConfig) -> None:
    cfg.api_key = cfg.api_key or os.environ.get(API_KEY_ENV) or None
    params_of(cfg.environment, cfg.environment_params)  # bad parameters fail before the (slow) engine start
    path = resolve_model(cfg.model)
    log.info(check_context_length(path, cfg.max_model_len))  # vLLM would refuse a longer one after loading
    sock = bind(cfg.host, cfg.port)
    name = cfg.served_model_name or cfg.model or DEFAULT_MODEL
    fmt = ChatFormat.of(path, cfg)
    kwargs = {}
    if cfg.engine == "vllm":
        kwargs = {k: v for k, v in (("gpu_memory_utilization", cfg.gpu_memory_utilization),
                                    ("kv_cache_memory_bytes", cfg.kv_cache_memory_bytes)) if v is not None}
    log.info("starting the %s engine on %s", cfg.engine, path)
    engine = make_engine(cfg.engine, path, fmt, SamplingConfig(cfg.temperature, cfg.top_p, seed=cfg.seed),
                         max_model_len=cfg.max_model_len, **kwargs)
    server = Server(build_app(engine, fmt, cfg, name), sock, cfg.log_level)
    if cfg.host not in ("127.0.0.1", "localhost", "::1") and not cfg.api_key:
        log.warning("listening on %s without an API key: anyone who can reach this address can use the model "
                    "(set --api-key or %s)", cfg.host, API_KEY_ENV)
    log.info("serving %r at %s (OpenAI-compatible: /v1/models, /v1/chat/completions; %s). Ctrl-C stops.", name,
             server.url, "API key required" if cfg.api_key else "no API key")
    server.run()


def main(argv: list[str] | None = None) -> None:
    try:
        cfg = parse_command(ServeConfig, list(sys.argv[1:] if argv is None else argv), prog="sculptor-rl serve")
    except ValueError as e:  # an unknown key or a wrong type, or ServeConfig's own checks
        sys.exit(f"error: {e}")
    try:
        serve(cfg)
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
