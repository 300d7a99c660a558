"""A store of memory entries (plain JSON objects) that outlives episodes, and immutable snapshots of it.

The store grows between rounds (`add`); a rollout never sees it directly but a `Snapshot` (`frozen()`): the
entries deep-frozen (read-only mappings, tuples), so every rollout of one GRPO group sees the same memory even if
the store changes meanwhile. On disk a store is JSONL, one entry per line, written atomically; a snapshot is
loaded once per file version (`load_snapshot` caches by path, size and mtime), since every env of a run reads it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from ..jsonl import iter_jsonl, write_jsonl

__all__ = ["MemoryStore", "Snapshot", "load_snapshot", "thaw"]


def _freeze(value):
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value):
    """A frozen entry (or any part of one) as plain, mutable JSON values."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


class Snapshot:
    """An immutable view of a store at one moment: `entries` is a tuple of read-only mappings."""

    __slots__ = ("entries",)

    def __init__(self, entries: Iterable[Mapping] = ()):
        object.__setattr__(self, "entries", tuple(_freeze(e) for e in entries))

    def __setattr__(self, name, value):
        raise AttributeError("a memory snapshot is immutable")

    def __len__(self) -> int:
        return len(self.entries)

    def save(self, path: str | Path) -> int:
        return write_jsonl((thaw(e) for e in self.entries), path)


class MemoryStore:
    """Entries in the order they were added. `check(entry)` (optional) validates each entry on `add` and `load`:
    it raises ValueError/TypeError/KeyError on a bad one."""

    def __init__(self, entries: Iterable[dict] = (), check: Callable[[dict], object] | None = None):
        self.check = check
        self.entries: list[dict] = []
        for e in entries:
            self.add(e)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: dict) -> None:
        if not isinstance(entry, dict):
            raise TypeError(f"a memory entry is a JSON object (dict), got {type(entry).__name__}")
        if self.check:
            self.check(entry)
        self.entries.append(thaw(entry))  # a copy: the caller's later edits do not reach the store

    def remove(self, drop: Callable[[dict], bool]) -> int:
        """Drop the entries `drop` picks (ToolMem's M \\ M_context); how many were dropped."""
        kept = [e for e in self.entries if not drop(e)]
        dropped, self.entries = len(self.entries) - len(kept), kept
        return dropped

    def save(self, path: str | Path) -> int:
        """Write every entry, one JSON object per line; the file is replaced whole or not at all."""
        return write_jsonl(self.entries, path)

    @classmethod
    def load(cls, path: str | Path, check: Callable[[dict], object] | None = None) -> "MemoryStore":
        """The store saved at `path` (ValueError naming the file and line of a bad record)."""
        store = cls(check=check)
        for where, obj in iter_jsonl(path):
            try:
                store.add(obj)
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{where}: not a memory entry ({e})") from None
        return store

    def frozen(self) -> Snapshot:
        return Snapshot(self.entries)


@lru_cache(maxsize=8)
def _cached(path: str, size: int, mtime_ns: int, check) -> Snapshot:
    return MemoryStore.load(path, check).frozen()


def load_snapshot(path: str | Path, check: Callable[[dict], object] | None = None) -> Snapshot:
    """The snapshot saved at `path`, read once per file version (the store writes atomically, so a new version
    has a new mtime)."""
    path = os.path.abspath(path)
    st = os.stat(path)
    return _cached(path, st.st_size, st.st_mtime_ns, check)
