"""Headless Chromium over the DevTools protocol: open a page, run JavaScript in it, collect its console errors,
take screenshots. What the viewer's tests and its benchmark drive the page with (`websockets`, a dev extra; the
browser from the system's packages, `scripts/setup.sh` installs it).
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect

__all__ = ["CHROMIUM", "Chromium"]

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--remote-debugging-port=0"]


class Chromium:
    """One headless browser with one page. `errors` holds every console error and uncaught exception so far."""

    def __init__(self, executable: str = CHROMIUM, width: int = 1400, height: int = 900, timeout: float = 30):
        self.profile = tempfile.mkdtemp(prefix="sculptor-chromium-")
        self.timeout, self.width, self.height = timeout, width, height
        self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self.profile}",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port = self._port()
            pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout))
            url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
            self._connection = connect(url, max_size=None, open_timeout=timeout)
            self.ws = self._connection.__enter__()
        except BaseException:
            self.close()
            raise
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        self.errors: list[str] = []
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.send(method)

    def _port(self) -> int:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self.proc.returncode}")
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def _event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            self.errors.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(params["entry"]["text"])
        self.events.append(message)

    def send(self, method: str, **params) -> dict:
        """A DevTools command's result (events that arrive meanwhile are recorded)."""
        key = next(self.ids)
        self.ws.send(json.dumps({"id": key, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=self.timeout))
            if message.get("id") == key:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def wait_for(self, method: str) -> dict:
        seen = len(self.events)
        while True:
            for message in self.events[seen:]:
                if message.get("method") == method:
                    return message
            seen = len(self.events)
            self._event(json.loads(self.ws.recv(timeout=self.timeout)))

    def open(self, url: str) -> float:
        """Load `url` and wait for its load event; returns the seconds it took."""
        start = time.perf_counter()
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        return time.perf_counter() - start

    def js(self, expression: str):
        """The value of a JavaScript expression in the page (an exception in it is a RuntimeError)."""
        out = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression[:80]}: {out['exceptionDetails'].get('exception', {}).get('description')}")
        return out["result"].get("value")

    def screenshot(self, path: str | Path, max_height: int = 2200) -> Path:
        """A PNG of the page, as tall as its content up to `max_height` pixels."""
        height = min(int(self.js("document.documentElement.scrollHeight")), max_height)
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=height, deviceScaleFactor=1,
                  mobile=False)
        shot = self.send("Page.captureScreenshot", format="png")
        self.send("Emulation.clearDeviceMetricsOverride")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self._connection.__exit__(None, None, None)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
