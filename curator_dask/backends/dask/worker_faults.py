"""When the workers cannot finish a chain: Dask's ``KilledWorker`` told in the run's terms, and
the watch that ends a run whose workers all stalled instead of waiting forever.

A stage that needs more memory than a worker has makes Dask's nanny restart the worker (above
``distributed.worker.memory.terminate``, 95 % of its limit); the scheduler gives the task to
another worker, and after ``distributed.scheduler.allowed-failures`` + 1 deaths fails it with
``KilledWorker``, which names a Dask key. :func:`killed_worker_error` names the stages, the
partition's files, the worker's memory limit and what to change instead.

A worker above ``distributed.worker.memory.pause`` (80 %) starts no task until its memory falls;
memory a stage keeps after its task (a cache, a global, an allocator that keeps freed memory)
never falls, and the chains queued for it would wait forever. :class:`StallWatch` ends the run
when every worker has been paused with nothing running (or, on the embedded cluster, when there
has been no worker at all) for ``cluster.stalled-workers-grace`` seconds with no chain finishing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dask.config
from dask.utils import format_bytes

from curator_dask.errors import WorkerFailedError, WorkerMemoryError

logger = logging.getLogger(__name__)

MEMORY_FIX = ("give each worker more memory (DaskExecutor(cluster_kwargs={'memory_limit': "
              "'8GB'}), `dask worker --memory-limit 8GB` for a cluster of your own, or fewer "
              "workers with --workers: the embedded cluster divides the machine's memory among "
              "them), make partitions smaller (files_per_partition= or blocksize= on the "
              "reader), or run with fuse=False (--no-fuse) to tell which of the stages it is")


@dataclass
class Chain:
    """What the driver knows of one chain in flight: its Dask futures (one per fusion group),
    its source ids and the input files of its sources."""

    futures: list[Any]
    ids: list[str]
    files: list[str]


def killed_worker_error(client: Any, error: Any, chains: Sequence[Chain],
                        groups: Sequence[Any]) -> WorkerFailedError:
    """The run's error for a chain that ended with ``KilledWorker``.

    Every chain queued on a worker when it dies counts that death, so a chain that waited
    behind the one that used the memory can fail alongside it. The chain blamed is the one
    whose task the last worker was running (``executing`` at its last heartbeat), else the one
    whose key the error names. It is a :class:`WorkerMemoryError` when the nanny restarted
    that worker for memory (its ``worker-restart-memory`` event), else a
    :class:`WorkerFailedError` (the OS killed it, or it crashed).
    """
    last = error.last_worker
    running = {str(k) for k in (getattr(last, "executing", None) or {})}
    named = _find(chains, {str(error.task)})
    if named is not None and str(named[0].futures[named[1]].key) in running:
        chain, group = named
    else:  # this chain waited behind the one running (if known) when the worker died
        chain, group = _find(chains, running) or named or (chains[0], 0)
    attempts = error.allowed_failures + 1
    tries = (f"{attempts} times (distributed.scheduler.allowed-failures "
             f"{error.allowed_failures} + 1)")
    limit = getattr(last, "memory_limit", None) or None
    kwargs: dict[str, Any] = {
        "stages": list(groups[group].stage_names), "source_files": chain.files,
        "task_ids": chain.ids, "memory_limit": limit, "workers": [last.address]}
    if limit and _restarted_for_memory(client, last.address):
        terminate = dask.config.get("distributed.worker.memory.terminate")
        return WorkerMemoryError(
            f"the worker running it was restarted {tries}, each time for passing "
            f"{terminate:.0%} of its memory limit of {_size(limit)} "
            f"(distributed.worker.memory.terminate); {MEMORY_FIX} (more attempts help only "
            "when other tasks shared the worker's memory)", **kwargs)
    bound = f"its memory limit is {_size(limit)}" if limit else "it has no memory limit"
    return WorkerFailedError(
        f"the worker running it died {tries}, the last {last.address}, with no memory restart "
        f"recorded ({bound}): the operating system killed it (out of memory: the machine has "
        "less than the workers may use) or it crashed (native code); the worker's log says "
        f"which. If it is memory: {MEMORY_FIX}", **kwargs)


def _size(n: int) -> str:
    """Bytes as Dask's log lines give them, and in the decimal units limits are set in."""
    return f"{format_bytes(n)} ({n / 1e9:.3g} GB)"


def _find(chains: Sequence[Chain], keys: set[str]) -> tuple[Chain, int] | None:
    for chain in chains:
        for i, future in enumerate(chain.futures):
            if str(future.key) in keys:
                return chain, i
    return None


def _restarted_for_memory(client: Any, address: str, wait: float = 1.0) -> bool:
    """Whether the scheduler recorded a memory restart of ``address``. The nanny sends that
    event just before it stops the worker, and the two messages race: waited for briefly."""
    deadline = time.monotonic() + wait
    while True:
        try:
            events = client.get_events("worker-restart-memory")
        except Exception as exc:  # noqa: BLE001 (no evidence then: the general error)
            logger.debug("could not read the scheduler's memory restarts: %s", exc)
            return False
        if any(msg.get("worker") == address for _, msg in events):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


class StallWatch:
    """Raises when no chain can progress: every worker paused for memory with no task
    running, or (``embedded``) no worker at all, for ``grace`` seconds with no chain finishing.
    The scheduler is asked only after ``every`` seconds without a chain finishing, and then
    every ``every`` seconds (a busy run never asks); ``grace=None`` never raises.

    Example:
        >>> watch = StallWatch(client=None, grace=None, embedded=True)
        >>> watch.check(finished=0, waiting=list) is None
        True
    """

    def __init__(self, client: Any, grace: float | None, embedded: bool,
                 groups: Sequence[Any] = (), every: float = 2.0) -> None:
        self.client, self.embedded, self.every = client, embedded, every
        self.grace = None if grace is None else float(grace)
        self.groups = groups
        self._finished = -1
        self._since: float | None = None
        self._asked = float("-inf")

    def check(self, finished: int, waiting: Callable[[], list[tuple[Chain, int]]]) -> None:
        """``finished``: chains finished so far; ``waiting()``: the chains in flight, each with
        the index of the group it waits at (only called to build the error)."""
        now = time.monotonic()
        if self.grace is None:
            return
        if finished != self._finished:  # progress: nothing is stalled
            self._finished, self._since, self._asked = finished, None, now
            return
        if now - self._asked < self.every:
            return
        self._asked = now
        try:
            workers = self.client.scheduler_info(n_workers=-1)["workers"]
        except Exception:  # noqa: BLE001 (a lost scheduler is SchedulerWatch's to report)
            return
        stalled = self._stalled(workers)
        if stalled is None:
            self._since = None
            return
        self._since = self._since if self._since is not None else now
        if now - self._since >= self.grace:
            raise _stall_error(stalled, workers, self.grace, waiting(), self.groups)

    def _stalled(self, workers: dict[str, Any]) -> str | None:
        if not workers:
            return "none" if self.embedded else None
        for info in workers.values():
            counts = (info.get("metrics") or {}).get("task_counts") or {}
            if info.get("status") != "paused" or counts.get("executing") or counts.get(
                    "long-running"):
                return None
        return "paused"


def _stall_error(kind: str, workers: dict[str, Any], grace: float,
                 waiting: list[tuple[Chain, int]], groups: Sequence[Any]) -> WorkerFailedError:
    stages: list[str] = []
    for _, group in waiting:
        stages += [s for s in groups[group].stage_names if s not in stages]
    files = [f for chain, _ in waiting for f in chain.files]
    ids = [i for chain, _ in waiting for i in chain.ids]
    wait = f"{len(waiting)} chains of partitions in flight would wait forever"
    if kind == "none":
        return WorkerFailedError(
            f"the embedded cluster has had no worker for {grace:.0f} s (its workers were lost "
            f"and not restarted; the log above says why), so the {wait}; run again to process "
            "them (cluster.stalled-workers-grace sets the wait)",
            stages=stages, source_files=files, task_ids=ids)
    limits = {a: w.get("memory_limit") or 0 for a, w in workers.items()}
    used = "; ".join(f"{a} at {format_bytes((w.get('metrics') or {}).get('memory') or 0)} of "
                     f"{_size(limits[a])}" for a, w in sorted(workers.items()))
    pause = dask.config.get("distributed.worker.memory.pause")
    return WorkerMemoryError(
        f"every Dask worker has been paused for memory with no task running for {grace:.0f} s "
        f"({used}): Dask pauses a worker above distributed.worker.memory.pause ({pause:.0%}) of "
        "its memory limit, and memory a stage keeps after its task (a cache, a global, an "
        f"allocator that keeps freed memory) holds it there, so the {wait}; {MEMORY_FIX}",
        stages=stages, source_files=files, task_ids=ids,
        memory_limit=max(limits.values(), default=0) or None, workers=sorted(workers))
