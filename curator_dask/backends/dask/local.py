"""Start the embedded ``LocalCluster`` without re-running the user's script in workers.

Dask's worker processes start with ``multiprocessing``'s *spawn* method, which re-imports the
parent's ``__main__`` module in each child. A notebook-style script such as NeMo Curator's
``resume_demo.py`` calls ``pipeline.run()`` at module level with no ``if __name__ ==
"__main__"`` guard, so every worker would start a pipeline of its own. Workers do not need
``__main__``: cloudpickle ships classes and functions defined there by value. While an embedded
cluster of ours is alive, its worker processes are therefore spawned without the main module.
"""

from __future__ import annotations

import contextlib
import multiprocessing.spawn
import threading
from collections.abc import Iterator
from typing import Any

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
    """While active, Dask worker processes spawned by this process skip ``__main__``."""
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
    """Dask's pre-spawn environment for workers, with our ``MALLOC_TRIM_THRESHOLD_`` choice.

    Dask sets ``MALLOC_TRIM_THRESHOLD_=65536`` to hand freed memory back to the OS quickly.
    Setting it also turns off glibc's dynamic mmap threshold, so every large temporary buffer
    is mmapped and unmapped again, which slows Arrow/NumPy batch work.
    Streaming bounds what a worker holds, so by default the variable is left unset.
    """
    import dask.config

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    if malloc_trim_threshold is not None:
        environ["MALLOC_TRIM_THRESHOLD_"] = int(malloc_trim_threshold)
    return environ


@contextlib.contextmanager
def embedded_cluster(*, malloc_trim_threshold: int | None = None, **kwargs: Any) -> Iterator[Any]:
    """A ``LocalCluster`` whose worker processes never import the driver's ``__main__``."""
    import dask.config
    from distributed import LocalCluster

    from curator_dask.backends.dask.worker_setup import with_preload

    environ = _worker_environ(malloc_trim_threshold)
    kwargs = with_preload(kwargs)  # workers leave Ctrl+C to the driver
    with workers_without_main():
        with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
            cluster = LocalCluster(**kwargs)
        with cluster:
            yield cluster
