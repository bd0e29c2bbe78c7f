"""Start the embedded ``LocalCluster`` without re-running the user's script in workers.

Dask's worker processes start with ``multiprocessing``'s *spawn* or *forkserver* method
(:mod:`.forkserver`); both re-import the parent's ``__main__`` module in each child. A
notebook-style script such as NeMo Curator's ``resume_demo.py`` calls ``pipeline.run()`` at
module level with no ``if __name__ == "__main__"`` guard, so every worker would start a
pipeline of its own. Workers do not need ``__main__``: cloudpickle ships classes and functions
defined there by value. While an embedded cluster of ours is alive, its worker processes are
therefore started without the main module (``multiprocessing`` prepares spawned and forkserver
children alike): only then is ``multiprocessing.spawn.get_preparation_data`` replaced, and
the last cluster's close puts the original back (:func:`workers_without_main`).

A forkserver killed while the cluster starts takes the workers it forked with it, and the
cluster fails to start ("Nanny failed to start"): the start is tried once more with a new
server, then with spawned workers, each time with a warning (:func:`_started_cluster`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Iterator
from typing import Any

from curator_dask.utils import private_api
from curator_dask.utils.hash_seed import ENV as HASH_SEED_ENV
from curator_dask.utils.hash_seed import nanny_hash_seed, worker_hash_seed

logger = logging.getLogger(__name__)

_WORKER_PROCESS_NAME = "Dask Worker process (from Nanny)"
_lock = threading.Lock()
_active = 0  # embedded clusters of ours alive
_original: Any = None  # what ours calls: multiprocessing's own, found at the first patch
_replaced: Any = None  # what ours replaced while clusters are alive: put back after the last


def _preparation_data(name: str) -> dict[str, Any]:
    data = _original(name)
    if _active and name == _WORKER_PROCESS_NAME:
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


@contextlib.contextmanager
def workers_without_main() -> Iterator[None]:
    """While active, Dask worker processes started by this process (spawned, or forked by the
    forkserver) skip ``__main__``: ``multiprocessing.spawn.get_preparation_data`` is ours from
    the start of the first embedded cluster alive until the last one has closed, then the one
    it replaced again (unless something replaced ours meanwhile: that is left in place)."""
    global _active, _original, _replaced
    with _lock:
        current = private_api.preparation_data()
        if _active == 0 and current is not _preparation_data:
            _original = _original or current
            _replaced = current
            private_api.set_preparation_data(_preparation_data)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _replaced is not None:
                if private_api.preparation_data() is _preparation_data:
                    private_api.set_preparation_data(_replaced)
                _replaced = None


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
    environ = _pre_spawn_environ()
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    if malloc_trim_threshold is not None:
        environ["MALLOC_TRIM_THRESHOLD_"] = int(malloc_trim_threshold)
    seed = nanny_hash_seed(worker_hash_seed(environ.get(HASH_SEED_ENV)))
    if seed is not None:
        environ[HASH_SEED_ENV] = seed
    return environ


def _pre_spawn_environ() -> dict[str, Any]:
    """``distributed.nanny.pre-spawn-environ``, also before distributed is imported (a run
    starts the forkserver first, then imports it): its packaged default under what the
    user's configuration sets, as distributed's import will merge them."""
    import sys

    import dask.config

    value = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default=None) or {})
    if "distributed.config" in sys.modules:
        return value
    nanny = private_api.distributed_defaults().get("distributed", {}).get("nanny", {})
    return {**(nanny.get("pre-spawn-environ") or {}), **value}


def prepare_workers(malloc_trim_threshold: int | None = None) -> None:
    """Start the forkserver the embedded cluster's workers will come from ahead of the
    cluster, so that it imports their modules while the driver prepares the run (config
    ``local-cluster.forkserver-prestart``; ``DaskExecutor.prepare_workers`` calls this when a
    run begins). Never fails: the cluster's start tries again, or spawns."""
    from curator_dask import config as _config
    from curator_dask.backends.dask import forkserver

    if _config.get("local-cluster.forkserver-prestart"):
        forkserver.prestart(_worker_environ(malloc_trim_threshold))


def release_unused_server() -> None:
    """Let go of a forkserver of ours that no embedded cluster uses (it exits at once): a
    ``DaskExecutor`` of another cluster kind calls this when it starts."""
    from curator_dask.backends.dask import forkserver

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

    if method == "forkserver":  # ours is set: distributed must not import its own list here
        private_api.skip_distributed_forkserver_preload()
    before = private_api.spec_cluster_ids()
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ,
                          "distributed.worker.multiprocessing-method": method}):
        try:
            return LocalCluster(**kwargs)
        except KeyboardInterrupt:  # Ctrl+C while it started: no traceback at exit, no worker left
            private_api.abandon_starting_clusters(before)
            raise


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
