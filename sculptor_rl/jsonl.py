"""JSON Lines IO shared by tasks, trajectories and samples: errors name the file and line."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def write_jsonl(objects: Iterable[dict], path: str | Path) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for obj in objects:
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
            n += 1
    return n


def iter_jsonl(path: str | Path) -> Iterator[tuple[str, object]]:
    """(where, object) per non-empty line; `where` is "FILE line N" for error messages."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield f"{path} line {number}", json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {number}: invalid JSON ({e.msg} at column {e.colno})") from None


def read_jsonl(path: str | Path, parse: Callable[[dict], T], what: str) -> Iterator[T]:
    """Each line parsed by `parse`; a line it cannot parse is a ValueError naming the line and `what`."""
    for where, obj in iter_jsonl(path):
        try:
            yield parse(obj)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{where}: not a {what} ({type(e).__name__}: {e})") from None
