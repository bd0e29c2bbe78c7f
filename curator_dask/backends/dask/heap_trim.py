"""The driver's freed memory given back to the operating system while a stream runs.

glibc's allocator keeps what a process frees for its next allocations, and gives back only
the top of its heap on its own. A stream's driver (with the embedded cluster, also the
scheduler and the completion plugin) allocates and frees for every source, and the freed
pages scattered through its heap stayed in its RSS: over 10^6 sources in
``benchmarks/bench_scale.py memory --file-groups`` its anonymous RSS grew by about 65 MiB,
several times what the Python objects still alive held. ``malloc_trim(0)`` returns every free
page of the heap (Dask's workers get the same effect from the ``MALLOC_TRIM_THRESHOLD_`` their
nannies set, which must be set before a process starts). :class:`HeapTrimmer` calls it every
``every`` finished sources: 20 to 40 MiB less peak RSS at 10^6 sources
(``benchmarks/RESULTS.md``, "scale-memory with file groups and a checkpoint"). Where the C
library is not glibc there is nothing to call, and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

TRIM_EVERY = 50_000  # finished sources between two trims


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): no such call
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Give the heap's free pages back to the operating system; whether it could (glibc:
    ``tests/backends/test_heap_trim.py`` sees them leave the RSS)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class HeapTrimmer:
    """Calls :func:`trim_heap` once every ``every`` sources a stream reports finished.

    Example:
        >>> trimmer = HeapTrimmer(every=10)
        >>> [trimmer.finished(4) for _ in range(5)]
        [False, False, True, False, True]
    """

    def __init__(self, every: int = TRIM_EVERY) -> None:
        self.every = every
        self._count = 0

    def finished(self, n: int) -> bool:
        """``n`` more sources finished; whether the heap was trimmed now."""
        before, self._count = self._count, self._count + n
        if before // self.every == self._count // self.every:
            return False
        trim_heap()
        return True
