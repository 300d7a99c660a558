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
from collections.abc import Callable

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


BACKLOG = 2048  # uvicorn's own default


def bind(host: str, port: int) -> socket.socket:
    """A listening socket taken before the (slow) engine start, so a busy port fails at once. It listens at once:
    a client that connects before the app runs waits in the backlog instead of being refused (a bound socket
    that does not listen refuses connections)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn's server calling `on_ready` once it serves: after the app's start-up, with the socket accepted on."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None] | None):
        super().__init__(config)
        self.on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.on_ready is not None:
            self.on_ready()


class Server:
    """An app on uvicorn over a bound socket: `run()` in the foreground, or `with Server(...):` in a thread.
    `on_ready` runs once the server answers requests: the one place to announce it."""

    def __init__(self, app, sock: socket.socket, log_level: str = "info", on_ready: Callable[[], None] | None = None):
        host, port = sock.getsockname()[:2]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"
        self.sock = sock
        # on shutdown, requests still running get a few seconds to finish, then their connections are closed.
        # An idle connection is kept longer than clients keep theirs (httpx and the OpenAI SDK: 5 s, uvicorn's own
        # default too), so that the client drops it first: with equal timeouts a request sent at the 5th second
        # met a connection the server was closing ("connection reset by peer", seen in the serve fuzz test).
        self.uvicorn = _Uvicorn(uvicorn.Config(app, host=host, port=port, log_level=log_level, backlog=BACKLOG,
                                               timeout_graceful_shutdown=10, timeout_keep_alive=65), on_ready)
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
    if cfg.host not in ("127.0.0.1", "localhost", "::1") and not cfg.api_key:
        log.warning("listening on %s without an API key: anyone who can reach this address can use the model "
                    "(set --api-key or %s)", cfg.host, API_KEY_ENV)

    def announce() -> None:  # scripts and tests wait for this line, then connect at once
        log.info("serving %r at %s (OpenAI-compatible: /v1/models, /v1/chat/completions; %s). Ctrl-C stops.", name,
                 server.url, "API key required" if cfg.api_key else "no API key")

    server = Server(build_app(engine, fmt, cfg, name), sock, cfg.log_level, on_ready=announce)
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
