"""Serving a tuned model behind an OpenAI-compatible API, with the ACM agent loop it was trained with."""

from .app import build_app
from .batcher import MicroBatcher
from .config import ServeConfig
from .server import Server, bind, serve

__all__ = ["MicroBatcher", "ServeConfig", "Server", "bind", "build_app", "serve"]
