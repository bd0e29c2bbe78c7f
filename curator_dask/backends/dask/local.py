"""Start the embedded ``LocalCluster`` without re-running the user's script in workers.

Dask's worker processes start with ``multiprocessing``'s *spawn* or *forkserver* method
(:mod:`.forkserver`); both re-import the parent's ``__main__`` module in each child. A
notebook-style script such as NeMo Curator's ``resume_demo.py`` calls ``pipeline.run()`` at
module level with no ``if __name__ == "__main__"`` guard, so every worker would start a
pipeline of its own. Workers do not need ``__main__``: cloudpickle ships classes and functions
defined there by value. While an embedded cluster of ours is alive, its worker processes are
therefore started without the main module (``multiprocessing`` prepares spawned and forkserver
children alike).

A forkserver killed while the cluster starts takes the workers it forked with it, and the
cluster fails to start ("Nanny failed to start"): the start is tried once more with a new
server, then with spawned workers, each time with a warning (:func:`_started_cluster`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing.spawn
import threading
from collections.abc import Iterator
from typing import Any

from curator_dask.utils.hash_seed import ENV as HASH_SEED_ENV
from curator_dask.utils.hash_seed import nanny_hash_seed, worker_hash_seed

logger = logging.getLogger(__name__)

_WORKER_PROCESS_NAME = "Dask Worker process (from Nanny)"
_lock = threading.Lock()
_active = 0
_original = multiprocessing.spawn.get_preparation_data


def _preparation_data(name: str) -> dict[str, Any]:
    data = _original(name)
    if _active and name == _WORKER_PROCESS_NAME:
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


@contextlib.contextmanager
def workers_without_main() -> Iterator[None]:
    """While active, Dask worker processes started by this process (spawned, or forked by the
    forkserver) skip ``__main__``."""
    global _active
    with _lock:
        multiprocessing.spawn.get_preparation_data = _preparation_data
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1


def _worker_environ(malloc_trim_threshold: int | None) -> dict[str, Any]:
    """Dask's pre-spawn environment for workers, with our ``MALLOC_TRIM_THRESHOLD_`` choice
    and the workers' ``PYTHONHASHSEED``.

    Dask sets ``MALLOC_TRIM_THRESHOLD_=65536`` to hand freed memory back to the OS quickly.
    Setting it also turns off glibc's dynamic mmap threshold, so every large temporary buffer
    is mmapped and unmapped again, which slows Arrow/NumPy batch work.
    Streaming bounds what a worker holds, so by default the variable is left unset.

    ``PYTHONHASHSEED`` (:mod:`curator_dask.utils.hash_seed`): the driver's, else one set in
    ``pre-spawn-environ``, else ``cluster.python-hash-seed``. The forkserver is started with
    this environment, so the workers it forks share the seed with the ones a Nanny spawns.
    """
    import dask.config

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    if malloc_trim_threshold is not None:
        environ["MALLOC_TRIM_THRESHOLD_"] = int(malloc_trim_threshold)
    seed = nanny_hash_seed(worker_hash_seed(environ.get(HASH_SEED_ENV)))
    if seed is not None:
        environ[HASH_SEED_ENV] = seed
    return environ


def prestart_workers(embedded: bool, malloc_trim_threshold: int | None = None) -> None:
    """Start the forkserver the embedded cluster's workers will come from ahead of the cluster,
    so that it imports their modules while the driver is still preparing its run; for another
    kind of cluster (``embedded`` false), let go of a server started early that none will use.
    ``DaskExecutor`` calls this when it is made."""
    from curator_dask.backends.dask import forkserver

    if embedded:
        forkserver.prestart(_worker_environ(malloc_trim_threshold))
    else:
        forkserver.release_unused()


@contextlib.contextmanager
def embedded_cluster(*, malloc_trim_threshold: int | None = None, **kwargs: Any) -> Iterator[Any]:
    """A ``LocalCluster`` whose worker processes never import the driver's ``__main__``,
    forked from the pre-loaded forkserver (or spawned, config ``local-cluster.start-method``).
    The cluster's ``curator_dask_start_method`` says which."""
    from curator_dask.backends.dask.worker_setup import with_preload

    environ = _worker_environ(malloc_trim_threshold)
    kwargs = with_preload(kwargs)  # workers leave Ctrl+C to the driver
    _freeze_at_exit.register()
    with workers_without_main(), _started_cluster(environ, kwargs) as cluster:
        yield cluster


@contextlib.contextmanager
def _started_cluster(environ: dict[str, Any], kwargs: dict[str, Any]) -> Iterator[Any]:
    """The ``LocalCluster``, entered. A forkserver that dies while the cluster starts (its
    workers die with it: the Nanny fails to start, or loses its worker at once) is started
    again once; if the new one dies too, the workers are spawned. Any other failure to
    start is raised as it is."""
    from curator_dask.backends.dask import forkserver

    for attempt in _ATTEMPTS:
        with forkserver.workers_from(environ, method=attempt.method) as method:
            pid = forkserver.server_pid() if method == "forkserver" else None
            try:
                cluster = _local_cluster(environ, kwargs, method)
            except Exception as exc:
                if pid is None or forkserver.alive(pid):
                    raise
                logger.warning(attempt.warning, pid, f"{type(exc).__name__}: {exc}")
                continue
            if pid is not None and not forkserver.alive(pid):
                # it died once the workers had started: the Nanny is about to lose them
                cluster.close()
                logger.warning(attempt.warning, pid, "it exited after the workers started")
                continue
            cluster.curator_dask_start_method = method
            with cluster:
                yield cluster
            return


@dataclasses.dataclass(frozen=True)
class _Attempt:
    method: str | None  # None: the configured one (``local-cluster.start-method``)
    warning: str  # logged when the forkserver of this attempt died (pid, what failed)


_ATTEMPTS = (
    _Attempt(None, "the forkserver of the embedded cluster's workers (pid %s) died while the "
                   "cluster started (%s); starting the cluster again"),
    _Attempt(None, "the restarted forkserver of the embedded cluster's workers (pid %s) died "
                   "too while the cluster started (%s); spawning the workers instead (a fresh "
                   "interpreter each: slower to start)"),
    _Attempt("spawn", ""),  # spawning does not depend on the forkserver: never retried
)


def _local_cluster(environ: dict[str, Any], kwargs: dict[str, Any], method: str) -> Any:
    import dask.config
    from distributed import LocalCluster

    if method == "forkserver":
        _quiet_distributed_preload()
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ,
                          "distributed.worker.multiprocessing-method": method}):
        return LocalCluster(**kwargs)


def _quiet_distributed_preload() -> None:
    """distributed's ``get_mp_context`` imports numpy, pandas and lz4 *in the driver* the first
    time it sees ``forkserver``, to choose its own preload list; ours is set already."""
    import sys

    utils = sys.modules.get("distributed.utils")
    if utils is not None and hasattr(utils, "_forkserver_preload_set"):
        utils._forkserver_preload_set = True


class _FreezeAtExit:
    """At the exit of a driver that ran an embedded cluster (config
    ``local-cluster.freeze-at-exit``): move every object to the collector's permanent
    generation (``gc.freeze``), so that the interpreter's last collections skip them. With
    Dask, distributed and pyarrow loaded those take about 0.15 s of every run's wall time.
    Modules are still cleared and their objects freed as usual; only objects that a reference
    cycle alone keeps alive are left to the operating system, unfinalized."""

    def __init__(self) -> None:
        self.registered = False

    def register(self) -> None:
        """Run at this process's exit (once, however many clusters it starts)."""
        if not self.registered:
            import atexit

            atexit.register(self)
            self.registered = True

    def __call__(self) -> None:
        """The ``atexit`` hook: freeze, unless the config says not to."""
        import gc

        try:
            from curator_dask import config as _config

            if _config.get("local-cluster.freeze-at-exit"):
                gc.freeze()
        except Exception:  # noqa: BLE001 (the process is exiting; it exits as usual)
            pass


_freeze_at_exit = _FreezeAtExit()
