"""NeMo Curator's extension of the Dask backend: the hooks the backend calls while NeMo is in use.

Registered in ``curator_dask/backends/dask/extensions.py`` (``"nemo"``) and loaded by the
backend only once ``nemo_curator`` is imported. What it changes in NeMo's modules, and when, is
the table of :mod:`.patches`: the entry rows when an executor is made (NeMo's modules already
loaded) or started and when a run begins; the id generator's rows while an executor is started
(restored when the last one closes), and on a worker while its ``StageHost`` holds NeMo stages
that use ids. The refusals of :mod:`.checks` run when a run is made, and the workers' loguru
records are forwarded (:mod:`.logs`).

Example:
    >>> from curator_dask.backends.dask.extensions import BackendExtension
    >>> issubclass(NemoExtension, BackendExtension)
    True
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from curator_dask.backends.dask.extensions import BackendExtension
from curator_dask.classes import is_nemo
from curator_dask.nemo import checks, ids, patches

__all__ = ["NemoExtension"]


class NemoExtension(BackendExtension):
    """The Dask backend's hooks for NeMo Curator (one per process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holding: weakref.WeakSet[Any] = weakref.WeakSet()  # hosts holding id redirects

    def executor_made(self, executor: Any, **kwargs: Any) -> None:
        patches.install_entry()  # NeMo's checkpointed Pipeline.run reaches nothing of ours

    def executor_started(self, executor: Any, **kwargs: Any) -> None:
        patches.refresh()  # held while the executor is started (patches.held)

    def run_begins(self, executor: Any, **kwargs: Any) -> None:
        patches.refresh()  # NeMo's modules imported since the executor was made or started

    def run_made(self, stages: Any, options: Any, **kwargs: Any) -> None:
        checks.refuse_ray_only(stages)
        checks.refuse_overwrite_with_checkpoint(stages, options)  # NeMo writers empty at build

    def run_connected(self, client: Any, stages: Any, **kwargs: Any) -> None:
        if any(is_nemo(s) for s in stages):
            from curator_dask.nemo.logs import forward_to_driver

            forward_to_driver(client)

    def executor_closed(self, executor: Any, **kwargs: Any) -> None:
        patches.settle()  # the last started executor: NeMo's objects back

    def worker_setup(self, host: Any, stages: Any, **kwargs: Any) -> None:
        if not any(is_nemo(s) for s in stages):
            return
        from curator_dask.nemo.logs import bridge_worker_loguru

        bridge_worker_loguru()
        if ids.install_for(stages):  # NeMo's readers with ids reach the scheduler, not Ray
            with self._lock:
                self._holding.add(host)

    def worker_teardown(self, host: Any, stages: Any, **kwargs: Any) -> None:
        with self._lock:
            if host not in self._holding:
                return
            self._holding.discard(host)
        patches.remove()
