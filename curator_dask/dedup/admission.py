"""What a deduplication workflow's run claims before its first step.

- **The executor**: one workflow at a time on a ``DaskExecutor``. Two workflows on one
  executor would share its cluster and this process's one id generator (the removal creates
  it from the identification's JSON and kills it after), so the second would fail steps
  later; it is refused at once instead (:class:`ExecutorBusyError`).
- **Paths the workers can reach**: the cache, the outputs and the input are read and written
  by the workers. A ``memory://`` file system lives in one process, so it works only when the
  workers are threads of this process; otherwise it is refused with the reason.
- **The cache folder**: one run at a time (:mod:`.cache_lock`).

Example:
    >>> workflows_in_progress(object())
    []
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import fsspec

from curator_dask.errors import CuratorDaskError


class ExecutorBusyError(RuntimeError, CuratorDaskError):
    """A deduplication workflow was started on a ``DaskExecutor`` that runs another one."""


_lock = threading.Lock()
# id(executor) -> the workflows running on it: (name, thread name, start time)
_running: dict[int, list[tuple[str, str, float]]] = {}


def workflows_in_progress(executor: Any) -> list[str]:
    """The names of the workflows running on ``executor`` now."""
    with _lock:
        return [name for name, _, _ in _running.get(id(executor), [])]


@contextlib.contextmanager
def hold_executor(executor: Any, workflow: str) -> Iterator[None]:
    """Mark ``executor`` as running ``workflow`` for the block.

    Raises:
        ExecutorBusyError: another workflow runs on it.
    """
    entry = (workflow, threading.current_thread().name, time.time())
    with _lock:
        held = _running.get(id(executor))
        if held:
            other, thread, since = held[0]
            msg = (f"the DaskExecutor is busy: a {other} run is in progress on it (thread "
                   f"{thread!r}, started {time.strftime('%H:%M:%S', time.localtime(since))}); "
                   f"start the {workflow} after it ends, or give it a DaskExecutor of its own")
            raise ExecutorBusyError(msg)
        _running[id(executor)] = [entry]
    try:
        yield
    finally:
        with _lock:
            _running.pop(id(executor), None)


def check_workers_reach(client: Any, paths: dict[str, Any],
                        storage_options: dict[str, dict[str, Any]] | None = None) -> None:
    """Refuse a path on a file system the workers cannot share with this process.

    ``paths`` maps a parameter's name to its value (a path, a URL or a list of them);
    ``storage_options`` the fsspec options of some of them. Only ``memory://`` is known to be
    private to a process; it passes when every worker runs in this process (threads).

    Raises:
        ValueError: such a path, with workers in other processes.
    """
    private = [(name, value) for name, value in paths.items()
               for one in (value if isinstance(value, (list, tuple)) else [value])
               if one is not None and _in_process_memory(str(one),
                                                         (storage_options or {}).get(name))]
    if not private:
        return
    pids = set(client.run(os.getpid).values()) if client is not None else set()
    if pids and pids == {os.getpid()}:
        return  # the workers are threads of this process: they see its memory file system
    name, value = private[0]
    msg = (f"{name}={value!r} is in this process's memory (fsspec's memory:// file system); "
           "the Dask workers run in other processes and cannot share it: use a folder every "
           "worker can reach (a local path on one machine, a shared file system or an object "
           "store)")
    raise ValueError(msg)


def _in_process_memory(path: str, storage_options: dict[str, Any] | None) -> bool:
    from fsspec.implementations.memory import MemoryFileSystem

    if "://" not in path:
        return False
    fs, _ = fsspec.core.url_to_fs(path, **(storage_options or {}))
    return isinstance(fs, MemoryFileSystem)


__all__ = ["ExecutorBusyError", "check_workers_reach", "hold_executor", "workflows_in_progress"]
