"""A run's stop: its :class:`StopSignal`, and the registry of the runs in progress in this process.

Every way to stop a run ends at the ``StopSignal.request`` of that run (docs/design/architecture.md,
"The stop path"):

- ``stop JOB`` writes the job's stop-request file; the job's heartbeat (``JobRun``) calls the
  ``stop`` the run bound to it when it started;
- SIGUSR1 / SIGTERM: the command line's handler calls :func:`request_stop` (every run in
  progress in the process); ``DaskExecutor.request_stop`` calls it for its own runs;
- ``stop --force`` writes the request file, then cancels the run's Dask tasks on its scheduler
  (the run's stream sees the cancellation and requests its own stop), then sends SIGTERM.

A run creates its signal and registers it (:data:`RUNS`) while it lives, so two runs on one
executor stop independently: ending or stopping one never touches the other's signal.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["RUNS", "RunsInProgress", "StopSignal", "request_stop"]


class StopSignal:
    """One run's stop request: safe to set from a signal handler or another thread.

    ``event`` is also set when the run ends (it releases the run's drain thread), so whether a
    stop was *asked* for is ``requested``, not ``event``.

    Example:
        >>> stop = StopSignal("1f2e3d4c5b6a")
        >>> stop.request("received SIGUSR1")
        >>> stop.requested, stop.reason
        (True, 'received SIGUSR1')
    """

    def __init__(self, run_id: str = "") -> None:
        self.run_id = run_id
        self.event = threading.Event()
        self.requested = False
        self.reason = "stop requested"

    def request(self, reason: str = "stop requested") -> None:
        """Ask the run to stop starting sources and drain (a second request changes nothing
        but the reason)."""
        self.reason = reason
        self.requested = True
        self.event.set()

    def __repr__(self) -> str:
        state = f"requested: {self.reason!r}" if self.requested else "running"
        return f"StopSignal(run {self.run_id or '?'}, {state})"


class RunsInProgress:
    """The runs in progress in this process: each run's :class:`StopSignal` and the executor it
    runs on, from the start of the run to its end.

    Example:
        >>> runs, one, two = RunsInProgress(), StopSignal("a"), StopSignal("b")
        >>> runs.add(one, executor="x"); runs.add(two, executor="y")
        >>> runs.request("test", executor="x"), one.requested, two.requested
        (1, True, False)
        >>> runs.remove(one); runs.of()
        [StopSignal(run b, running)]
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # between threads that add and remove runs
        self._runs: dict[StopSignal, Any] = {}

    def add(self, stop: StopSignal, executor: Any = None) -> None:
        with self._lock:
            self._runs[stop] = executor

    def remove(self, stop: StopSignal) -> None:
        with self._lock:
            self._runs.pop(stop, None)

    def of(self, executor: Any = None) -> list[StopSignal]:
        """The signals of the runs in progress (on ``executor``, if given)."""
        # No lock: a signal handler runs in the main thread, which may hold it in add() or
        # remove(); copying the dict is one step under the GIL.
        runs = list(self._runs.items())
        return [stop for stop, owner in runs if executor is None or owner is executor]

    def request(self, reason: str = "stop requested", executor: Any = None) -> int:
        """Request a stop of every run in progress (on ``executor``, if given); returns how
        many. A request made while no run is in progress is not kept for a later run."""
        stops = self.of(executor)
        for stop in stops:
            stop.request(reason)
        return len(stops)


RUNS = RunsInProgress()  # this process's runs in progress


def request_stop(reason: str = "stop requested", executor: Any = None) -> int:
    """Ask every run in progress in this process (or only those on ``executor``) to stop
    starting sources; running ones get ``execution.drain-timeout`` seconds to finish, then each
    run raises :class:`~curator_dask.errors.RunStopped`. Safe in a signal handler. Returns how
    many runs were asked.

    Example:
        >>> request_stop("nothing runs here")
        0
    """
    return RUNS.request(reason, executor)
