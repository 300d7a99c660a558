"""`train.heap.trim`: freed heap memory leaves the resident set (glibc)."""

import platform
import subprocess
import sys

import pytest

PROBE = r"""
import psutil
from sculptor_rl.train import heap
rss = lambda: psutil.Process().memory_info().rss
blocks = [bytearray(64 * 1024) for _ in range(4096)]  # 256 MiB of heap chunks (under the mmap threshold)
del blocks[::2]  # every other one freed: holes that free() cannot give back at the heap's top
before = rss()
heap.trim()
print(before - rss())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_returns_freed_heap_memory_to_the_os():
    released = int(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout)
    assert released > 100 * 2**20  # of the 128 MiB freed in holes
