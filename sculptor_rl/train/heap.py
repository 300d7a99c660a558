"""Hand the heap's freed memory back to the OS between training micro-batches.

glibc keeps what a process frees for reuse, and a training step frees gigabytes of activations of a different
shape every micro-batch: resident memory then ratchets up to the sum of what each size class once held, not the
largest micro-batch. `malloc_trim(0)` returns the free pages (measured in bench/rl_memory.py); a no-op where the
C library is not glibc."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl)
        return None


def trim() -> None:
    if (malloc_trim := _malloc_trim()) is not None:
        malloc_trim(0)
