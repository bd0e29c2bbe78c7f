"""The driver's freed memory given back during a stream (:mod:`curator_dask.backends.dask.
heap_trim`): on glibc, pages freed in the middle of the heap leave the process's RSS only once
the heap is trimmed; the stream trims every ``TRIM_EVERY`` finished sources."""

from __future__ import annotations

import platform

import pytest

from curator_dask.backends.dask.heap_trim import HeapTrimmer, trim_heap

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")


def _rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@glibc
def test_freed_pages_in_the_heap_leave_the_rss():
    # blocks of 4 KiB come from glibc's heap (Python's own allocator takes 512 bytes or less);
    # one in 64 is kept, so the heap's top never becomes free and glibc keeps the rest
    blocks = [bytearray(4096) for _ in range(40_000)]  # about 160 MiB
    kept = blocks[::64]
    del blocks
    before = _rss()
    assert trim_heap() is True
    after = _rss()
    assert before - after > 100 * 2**20, (before, after)
    assert len(kept) == 625


def test_the_trimmer_counts_finished_sources():
    trimmer = HeapTrimmer(every=100)
    assert [trimmer.finished(n) for n in (40, 40, 40, 150, 1, 29)] == [
        False, False, True, True, False, True]
