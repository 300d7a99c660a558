"""One engine shared by many request threads: whatever is pending goes to the engine in one `generate` call.

Each served request runs the agent loop in its own thread and calls `generate` on a `Caller` (an `Engine`).
A single dispatcher thread takes every pending call off the queue, sends all their requests to the engine at
once (vLLM batches them) and hands each caller its own completions back, in order. While the engine works on
one batch, new calls queue up and form the next one, so no waiting window is needed.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..engines.base import Completion, Engine, Request, SamplingConfig

log = logging.getLogger(__name__)

__all__ = ["Cancelled", "Caller", "MicroBatcher"]


class Cancelled(Exception):
    """The request this call belongs to was abandoned (timeout or client gone): stop its loop."""


@dataclass
class _Call:
    requests: list[Request]
    cancelled: threading.Event
    future: Future = field(default_factory=Future)


class MicroBatcher:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.max_model_len = engine.max_model_len
        self.batches: deque[int] = deque(maxlen=1000)  # requests per engine call, the latest ones
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # orders `submit` against `close`
        self._closed = False
        self._thread = threading.Thread(target=self._dispatch, name="engine-batcher", daemon=True)
        self._thread.start()

    def caller(self, sampling: SamplingConfig | None = None, cancelled: threading.Event | None = None) -> "Caller":
        return Caller(self, sampling, cancelled or threading.Event())

    def submit(self, requests: list[Request], cancelled: threading.Event) -> list[Completion]:
        """Queue `requests` for the next engine call and wait for their completions."""
        call = _Call(requests, cancelled)
        with self._lock:
            if cancelled.is_set() or self._closed:
                raise Cancelled()
            self._queue.put(call)
        return call.future.result()

    def close(self) -> None:
        """Run the calls already queued, then stop; later calls raise `Cancelled` (no thread waits forever)."""
        with self._lock:
            self._closed = True
            self._queue.put(None)
        self._thread.join()

    def _dispatch(self) -> None:
        while True:
            calls = [self._queue.get()]
            while not self._queue.empty():
                calls.append(self._queue.get())
            live = [c for c in calls if c is not None]
            for c in live:
                if c.cancelled.is_set():
                    c.future.set_exception(Cancelled())
            live = [c for c in live if not c.future.done()]
            if live:
                self._run(live)
            if None in calls:
                return

    def _run(self, calls: list[_Call]) -> None:
        batch = [r for c in calls for r in c.requests]
        try:
            outs = self.engine.generate(batch)
            if len(outs) != len(batch):
                raise RuntimeError(f"the engine returned {len(outs)} completions for {len(batch)} requests")
        except Exception as e:  # every caller of this batch sees the engine's error; the dispatcher lives on
            log.exception("engine.generate failed on a batch of %d requests", len(batch))
            for c in calls:
                c.future.set_exception(e)
            return
        self.batches.append(len(batch))
        start = 0
        for c in calls:
            c.future.set_result(outs[start : start + len(c.requests)])
            start += len(c.requests)


@dataclass
class Caller:
    """The `Engine` one served request's loop sees: its sampling settings, its cancellation, the shared batcher."""

    batcher: MicroBatcher
    sampling: SamplingConfig | None
    cancelled: threading.Event

    @property
    def max_model_len(self) -> int | None:
        return self.batcher.max_model_len

    def generate(self, requests: list[Request]) -> list[Completion]:
        for r in requests:
            r.sampling = self.sampling
        return self.batcher.submit(requests, self.cancelled)
