"""How much a run may have in flight: sources per Dask task, and source partitions at once.

The stream (:mod:`.streaming`) keeps at most ``window`` chains in flight (one Dask task per
fusion group over a chunk of sources, ``execution.max-in-flight``). :class:`ChunkSizer` says how
many sources a chunk packs; :class:`PartitionCap` (``max_concurrent_partitions``) bounds the
sources across every chain in flight, cutting chunks to fit, so the cap holds for partitions,
not only for Dask tasks.
"""

from __future__ import annotations

from typing import Any


class ChunkSizer:
    """How many sources go into one Dask task.

    One task per source costs a few ms of scheduling and messaging, which dominates when
    sources are tiny. The sizer starts at one source per task and, from the measured time per
    source, grows chunks toward ``target_seconds`` of work each, without exceeding ``limit`` or
    leaving threads idle near the end (at most ``remaining / (2 * threads)`` per chunk).

    Example:
        >>> sizer = ChunkSizer(threads=2)
        >>> sizer.next_size(1000)
        1
        >>> sizer.observe(1, 0.001)
        >>> sizer.next_size(1000)
        100
    """

    def __init__(self, threads: int, limit: int | None = None, target_seconds: float = 0.1):
        self.threads = max(1, threads)
        self.limit = limit if limit is not None else 256
        self.target_seconds = target_seconds
        self.per_source: float | None = None

    def observe(self, n_sources: int, seconds: float) -> None:
        if n_sources <= 0 or seconds <= 0:
            return
        sample = seconds / n_sources
        self.per_source = sample if self.per_source is None else (
            0.7 * self.per_source + 0.3 * sample)

    def next_size(self, remaining: int) -> int:
        if self.per_source is None or self.limit <= 1:
            return 1
        wanted = int(self.target_seconds / self.per_source) if self.per_source > 0 else self.limit
        spread = max(1, remaining // (2 * self.threads))
        return max(1, min(wanted, self.limit, spread))


class PartitionCap:
    """``max_concurrent_partitions``: the most source partitions in flight at once.

    ``"auto"`` sets no cap of its own (the chains of the window carry what the chunk sizer
    packs); a whole number ``n`` lets a chunk take only the room left below ``n`` sources in
    flight, counted from submission until the chain's result is collected on the driver.

    Example:
        >>> cap = PartitionCap(3)
        >>> cap.fit(5)  # a chunk of 5 is cut to 3
        3
        >>> cap.took(3); cap.fit(1)  # full: nothing more until a chain is collected
        0
        >>> cap.released(2); cap.fit(5)
        2
        >>> PartitionCap("auto").fit(5)
        5
    """

    def __init__(self, value: Any) -> None:
        self.limit: int | None = None if value == "auto" else int(value)
        self.in_flight = 0

    def fit(self, size: int) -> int:
        """How many of ``size`` sources the next chunk may take now."""
        if self.limit is None:
            return size
        return max(0, min(size, self.limit - self.in_flight))

    def took(self, n: int) -> None:
        self.in_flight += n

    def released(self, n: int) -> None:
        self.in_flight -= n
