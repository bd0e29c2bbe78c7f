"""What a deduplication run cost each Dask worker: peak memory, and bytes written to disk.

The bytes come from distributed's fine performance metrics, which each worker keeps in
``Worker.digests_total``: the P2P shuffle digests ``("p2p", <span>, <where>, "disk-write",
"bytes")`` each time its disk buffer writes shards under the worker's local directory (a
DataFrame shuffle sends every shard through disk, so these bytes are its whole data whether or
not memory was short), and the
worker's memory spill ``("execute"|"get-data"|..., ..., "disk-write", "bytes")`` each time it
pickles a value to disk; and the seconds the P2P shuffle waited because its in-memory buffers
(``distributed.p2p.comm.buffer``, ``distributed.p2p.storage.buffer``) were full
(``("p2p", <span>, <where>, "comms-limiter"|"disk-limiter", "seconds")``): more than 0 when
a shuffle's data did not fit the memory it may hold. These are measured where the writing and
the waiting happen, not estimated. Peak RSS is the kernel's ``VmHWM`` of the process, which
:func:`peak_rss` can reset (Linux's ``/proc/self/clear_refs``) so that each phase gets its own
peak.

Example:
    >>> usage = worker_usage(None)  # on the workers: cluster_usage(client, reset=True)
    >>> len(usage), usage["p2p_disk_bytes"], usage["peak_rss"] > 0
    (6, 0, True)
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

_P2P = "p2p"
_DISK_WRITE = "disk-write"


class WorkerUsage(TypedDict):
    """One worker's counters (cumulative since it started, peak since the last reset)."""

    pid: int
    peak_rss: int
    p2p_disk_bytes: int
    p2p_disk_writes: int
    p2p_limited_seconds: float
    spill_disk_bytes: int


def peak_rss(reset: bool = False) -> int:
    """This process's peak resident memory in bytes (``VmHWM``; 0 where ``/proc`` lacks it);
    with ``reset``, the peak starts again from the current RSS after it is read (where the
    kernel allows it)."""
    try:
        with open("/proc/self/status") as f:
            peak = next((int(line.split()[1]) * 1024 for line in f
                         if line.startswith("VmHWM:")), 0)
    except OSError:
        return 0
    if reset:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # 5: reset the peak RSS ("VmHWM") to the current RSS
        except OSError:
            pass  # not Linux, or not allowed: the peak then covers the process's life
    return peak


def limited_seconds(digests: dict[Any, float]) -> float:
    """Seconds the P2P shuffle waited on its full in-memory buffers, in ``digests_total``.

    Example:
        >>> limited_seconds({("p2p", "s", "foreground", "comms-limiter", "seconds"): 0.5,
        ...                  ("p2p", "s", "foreground", "comms-limiter", "count"): 3.0})
        0.5
    """
    return float(sum(v for k, v in digests.items()
                     if isinstance(k, tuple) and len(k) >= 3 and k[0] == _P2P
                     and str(k[-2]).endswith("-limiter") and k[-1] == "seconds"))


def disk_writes(digests: dict[Any, float]) -> dict[str, int]:
    """The bytes (and P2P write calls) written to disk in a worker's ``digests_total``.

    Example:
        >>> disk_writes({("p2p", "s", "background-disk", "disk-write", "bytes"): 10.0,
        ...              ("p2p", "s", "background-disk", "disk-write", "count"): 1.0,
        ...              ("execute", "s", "x", "disk-write", "bytes"): 4.0})
        {'p2p_disk_bytes': 10, 'p2p_disk_writes': 1, 'spill_disk_bytes': 4}
    """
    p2p = writes = spill = 0.0
    for key, value in digests.items():
        if not isinstance(key, tuple) or len(key) < 3 or key[-2] != _DISK_WRITE:
            continue
        if key[0] == _P2P:
            if key[-1] == "bytes":
                p2p += value
            elif key[-1] == "count":
                writes += value
        elif key[-1] == "bytes":
            spill += value
    return {"p2p_disk_bytes": int(p2p), "p2p_disk_writes": int(writes),
            "spill_disk_bytes": int(spill)}


def worker_usage(dask_worker: Any, reset: bool = False) -> WorkerUsage:
    """One worker's :class:`WorkerUsage`, run on it by ``client.run(worker_usage)``
    (``dask_worker=None``: this process, with no digests); ``reset`` starts a new peak."""
    digests = dict(getattr(dask_worker, "digests_total", None) or {})
    written = disk_writes(digests)
    return WorkerUsage(pid=os.getpid(), peak_rss=peak_rss(reset),
                       p2p_disk_bytes=written["p2p_disk_bytes"],
                       p2p_disk_writes=written["p2p_disk_writes"],
                       p2p_limited_seconds=limited_seconds(digests),
                       spill_disk_bytes=written["spill_disk_bytes"])


def cluster_usage(client: Any, reset: bool = False) -> dict[str, WorkerUsage]:
    """:func:`worker_usage` of every worker of ``client``'s cluster, by worker address."""
    return dict(client.run(worker_usage, reset=reset))


__all__ = ["WorkerUsage", "cluster_usage", "disk_writes", "limited_seconds", "peak_rss",
           "worker_usage"]
