"""What a run's wait loops watch besides their futures: the scheduler connection and the workers.

:func:`completed` yields chains as they finish and gives up when :class:`SchedulerWatch` says
the scheduler is gone (used by the stream, :mod:`.streaming`, and by the head on the cluster,
:mod:`.head`); :class:`WorkerWatch` reports workers that leave as ``worker_lost`` events.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from curator_dask.errors import SchedulerLostError

logger = logging.getLogger(__name__)


class SchedulerWatch:
    """Whether the client's connection to the scheduler is gone for longer than ``grace``.

    A client whose scheduler died keeps reconnecting; its futures then never finish (a result
    download in flight is never delivered), so the run asks this watch instead of waiting.

    Example:
        >>> class Client:  # a stand-in: the client's status is all the watch reads
        ...     status, scheduler = "running", None
        >>> SchedulerWatch(Client(), grace=30).lost() is None
        True
    """

    def __init__(self, client: Any, grace: float) -> None:
        self.client, self.grace = client, grace
        self._since: float | None = None
        self.address = getattr(getattr(client, "scheduler", None), "address", None)

    def lost(self) -> str | None:
        """``None`` while connected, else why the run must give up on its scheduler."""
        if self.client.status == "running":
            self._since = None
            return None
        now = time.monotonic()
        self._since = self._since or now
        if now - self._since < self.grace:
            return None
        return (f"lost the Dask scheduler {self.address}: no connection for {self.grace:.0f} s "
                f"(client status {self.client.status!r})")


def completed(done: Any, lost: Any) -> Any:
    """``(future, result)`` of chains as they finish; raises :class:`SchedulerLostError` when
    ``lost()`` says the scheduler is gone, instead of waiting for futures that cannot finish
    (``lost()`` may also raise the cluster's own error itself).

    ``done`` is a ``distributed.as_completed(with_results=True)`` (or anything with its
    ``has_ready``, ``next_batch``, ``is_empty`` and ``thread_condition``). A chain that raised
    yields its ``(type, error, traceback)``, for the caller to count its sources and raise; a
    cancelled one yields its ``CancelledError`` as the result (a drain or ``stop --force``
    cancelled it).
    """
    while True:
        if done.has_ready():
            yield from done.next_batch(block=False)
            continue
        if done.is_empty():
            return
        reason = lost()
        if reason is not None:
            raise SchedulerLostError(reason)
        with done.thread_condition:
            done.thread_condition.wait(timeout=0.1)


class WorkerWatch:
    """``worker_lost`` events: the scheduler's worker set, compared every 2 s and at the end.

    On an adaptive cluster workers leave as a matter of course (idle worker jobs are released,
    a lost one is replaced): a worker leaving is then an INFO line, not a warning.
    """

    def __init__(self, client: Any, workers: Any, emit: Any, adaptive: bool = False) -> None:
        self.client, self.emit, self.adaptive = client, emit, adaptive
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(set(workers),),
                                        name="curator-dask-workers", daemon=True)
        self._thread.start()

    def _run(self, known: set[str]) -> None:
        while True:
            last = self._done.wait(2.0)
            try:
                now = set(self.client.nthreads())
            except Exception:  # noqa: BLE001 (the run itself reports a lost scheduler)
                return
            for address in sorted(known - now):
                if self.adaptive:
                    logger.info("worker %s left the adaptive cluster", address)
                else:
                    logger.warning("worker %s left the cluster", address)
                self.emit("worker_lost", worker=address, remaining=len(now),
                          adaptive=self.adaptive)
            known = now
            if last:
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=10)
