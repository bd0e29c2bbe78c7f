"""The start gate of a run on each worker: once a drain closes it, no chain starts its stages.

A Dask cancel does not stop a task that is executing already, and a task the scheduler sent to
a worker may start there at any moment before the cancel arrives. So the drain cannot decide
from a look at the workers which chains are still unstarted and then cancel those: a chain
that started in between would run unseen, write its outputs after the run ended and closed its
checkpoint, and never be recorded complete (what tests/cli/test_drain.py met once on CI).

Instead every group task of a run passes the run's gate on its worker (:func:`run_gated`)
before any stage runs, and the drain *closes* the gates (:func:`close_gate`, one
``client.run``): that call answers, atomically on each worker, the tasks that passed the gate
and are running now. Those chains are admitted (their later groups may start, on any worker:
the admission travels with the group's result, :class:`Admitted`); every other group task is
refused from then on and returns :class:`NotStarted` without running anything, whether or not
the drain's cancel reaches it first. The sources of a refused chain stay pending.

One gate per worker and run, held for the life of the run's ``StageHost`` plugin there.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

from curator_dask.backends.dask.worker import GroupResult, host_of

__all__ = ["Admitted", "NotStarted", "StartGate", "close_gate", "finished_result", "run_gated"]


@dataclass
class NotStarted:
    """What a group task refused by a closed gate returns (and every later group of its chain
    passes on): no stage ran, no delta was sent; the chain's sources stay pending."""

    chain: str


@dataclass
class Admitted:
    """A group's result, from a chain that was running when the gate closed: the chain's next
    group may start on any worker (whose own gate knows nothing of the chain)."""

    result: GroupResult


class StartGate:
    """Which group tasks of one run may start on one worker.

    Example:
        >>> gate = StartGate()
        >>> gate.enter("c1", "g0-c1", admitted=False)
        True
        >>> gate.close()  # c1 is running: admitted
        ['g0-c1']
        >>> gate.enter("c2", "g0-c2", admitted=False), gate.enter("c1", "g1-c1", admitted=False)
        (False, True)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the worker's task threads and its event loop
        self.closed = False
        self._running: dict[str, str] = {}  # key of a group task running now -> its chain
        self._admitted: set[str] = set()  # chains running when the gate closed

    def enter(self, chain: str, key: str, *, admitted: bool) -> bool:
        """Whether the task ``key`` of ``chain`` may run its stages; if so it counts as running
        until :meth:`leave`. ``admitted``: its previous group ran while a gate was closed."""
        with self._lock:
            if self.closed and not admitted and chain not in self._admitted:
                return False
            self._running[key] = chain
            return True

    def leave(self, key: str) -> bool:
        """The task ``key`` ended; returns whether its chain is admitted (the gate closed while
        it ran, or it was admitted to start)."""
        with self._lock:
            chain = self._running.pop(key, None)
            if self.closed and chain is not None:
                self._admitted.add(chain)
            return self.closed

    def close(self) -> list[str]:
        """Close the gate; returns the keys of the group tasks running now (their chains are
        admitted). Closing twice changes nothing but the answer."""
        with self._lock:
            self.closed = True
            self._admitted.update(self._running.values())
            return sorted(self._running)


_GATES: weakref.WeakKeyDictionary[Any, StartGate] = weakref.WeakKeyDictionary()
_GATES_LOCK = threading.Lock()


def gate_of(host: Any) -> StartGate:
    """The gate of the run whose ``StageHost`` plugin is ``host`` on this worker."""
    with _GATES_LOCK:
        gate = _GATES.get(host)
        if gate is None:
            gate = _GATES[host] = StartGate()
        return gate


def run_gated(name: str, group_index: int, stage_indices: tuple[int, ...], previous: Any,
              resume: Any, chain: str) -> GroupResult | Admitted | NotStarted:
    """The Dask task of one fusion group of ``chain`` (the same name for each of its groups):
    the run's ``StageHost.run_group`` (plugin ``name``) behind the run's start gate on this
    worker."""
    from distributed import get_worker

    if isinstance(previous, NotStarted):
        return previous
    admitted = isinstance(previous, Admitted)
    if admitted:
        previous = previous.result
    worker = get_worker()
    host = host_of(name)
    gate = gate_of(host)
    key = str(worker.get_current_task())
    if not gate.enter(chain, key, admitted=admitted):
        return NotStarted(chain)
    try:
        out = host.run_group(group_index, stage_indices, previous, resume)
    finally:
        admitted = gate.leave(key)
    return Admitted(out) if admitted else out


def finished_result(result: Any) -> Any:
    """A chain's result as the driver reads it: the ``GroupResult`` of an admitted chain, or
    ``result`` itself (a ``GroupResult``, :class:`NotStarted`, a cancellation)."""
    return result.result if isinstance(result, Admitted) else result


def close_gate(name: str, dask_worker: Any = None) -> list[tuple[str, str]]:
    """Close the start gate of the run whose ``StageHost`` plugin is ``name`` on this worker
    (``client.run`` calls it there); returns ``(key, state)`` of the run's group tasks running
    now (``"executing"``: they may finish) and of every task whose result the worker holds
    (``"memory"``: finished, not to be cancelled)."""
    host = dask_worker.plugins.get(name)
    running = gate_of(host).close() if host is not None else []
    held = [(str(key), "memory") for key, ts in dask_worker.state.tasks.items()
            if ts.state == "memory"]
    return [(key, "executing") for key in running] + held
