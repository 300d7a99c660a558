"""JSON Lines IO shared by tasks, trajectories and samples: errors name the file and line.

Every write survives a kill at any moment: a whole file is written to a temp file beside it and renamed over
it (`write_jsonl`, `write_atomic`), and a file that grows during a long job gets whole lines only, with a torn
last line cut off when the job starts again (`append_jsonl`, `resume_jsonl`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


@contextmanager
def _atomic(path: str | Path):
    """A text file handle whose content replaces `path` only when the block ends without an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")  # one fixed name: a killed write leaves no litter behind
    try:
        with tmp.open("w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make a rename or truncation durable (it lives in the directory entry / inode, not the file's data)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | Path, text: str) -> None:
    """`path` holds `text` whole, or what it held before."""
    with _atomic(path) as f:
        f.write(text)


def write_jsonl(objects: Iterable[dict], path: str | Path) -> int:
    """One object per line; the file appears whole or not at all."""
    n = 0
    with _atomic(path) as f:
        for obj in objects:
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
            n += 1
    return n


def append_jsonl(objects: Iterable[dict], path: str | Path) -> int:
    """Append whole lines in one write, on disk when this returns. A kill during it leaves a torn last line,
    which `resume_jsonl` cuts off."""
    text = "".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in objects)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return text.count("\n")


def resume_jsonl(path: str | Path, units: Callable[[list[dict]], int] = len) -> list[dict]:
    """The records a killed job left in `path` (missing: none). A torn last line is cut off; then only the first
    `units(records)` records are kept (a job whose unit of work is several lines drops an unfinished unit) and
    the file is truncated to them, so appending goes on from there."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]  # a line is whole when its newline is there
    records, line_ends, end = [], [], 0
    for number, line in enumerate(whole.split(b"\n")[:-1], 1):
        end += len(line) + 1
        if line.strip():
            try:
                records.append(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise ValueError(f"{path} line {number}: invalid JSON ({e}); delete the file to start over") from None
            line_ends.append(end)
    n = units(records)
    size = line_ends[n - 1] if n else 0
    if size < len(data):
        log.warning("%s: dropped %d bytes a killed run left unfinished (%d whole records kept)",
                    path, len(data) - size, n)
        os.truncate(path, size)
        _fsync_dir(path.parent)
    return records[:n]


def iter_jsonl(path: str | Path) -> Iterator[tuple[str, object]]:
    """(where, object) per non-empty line; `where` is "FILE line N" for error messages."""
    with open(path, "rb") as f:  # decoded line by line, so bytes that are not UTF-8 are reported with their line
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line.decode("utf-8"))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {number}: invalid JSON ({e.msg} at column {e.colno})") from None
            except UnicodeDecodeError as e:
                raise ValueError(f"{path} line {number}: not UTF-8 text ({e.reason} at byte {e.start})") from None
            except RecursionError:
                raise ValueError(f"{path} line {number}: JSON nested too deeply") from None
            yield f"{path} line {number}", obj


def read_jsonl(path: str | Path, parse: Callable[[dict], T], what: str) -> Iterator[T]:
    """Each line parsed by `parse`; a line it cannot parse is a ValueError naming the line and `what`."""
    for where, obj in iter_jsonl(path):
        try:
            yield parse(obj)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{where}: not a {what} ({type(e).__name__}: {e})") from None
