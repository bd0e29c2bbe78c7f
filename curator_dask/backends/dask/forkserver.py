"""The embedded cluster's forkserver: worker processes forked from a clean, pre-loaded server.

With ``spawn`` every worker process is a fresh interpreter that imports distributed, pyarrow,
pandas and curator_dask's worker modules again, which takes over half a second of CPU per
worker, in the middle of a run. With ``forkserver`` (config ``local-cluster.start-method``,
the default where the platform has it) one server process is started once per driver, imports
those modules once (``local-cluster.forkserver-preload``) and forks each worker from itself:

- the server is a fresh interpreter (``multiprocessing`` executes it, it is not a fork of the
  driver), so a driver that initialised CUDA or runs threads is never forked, unlike ``fork``;
- neither the server nor the workers import the driver's ``__main__`` (a script without an
  ``if __name__ == "__main__"`` guard, a notebook): see :mod:`.local`;
- the server ignores SIGINT, and the workers ignore it from their Dask preload
  (:mod:`.worker_setup`), so Ctrl+C stays the driver's to handle;
- it exits once the driver and every worker it forked have exited (``multiprocessing``'s
  "alive" pipe); later embedded clusters of the same driver reuse it;
- the workers it forked die with it if it is killed (:mod:`.forkserver_preload`, what the
  server runs at its start).

A forked worker has the server's environment, not the driver's at the time of the cluster
start, and its hash secret (``PYTHONHASHSEED`` acts at an interpreter's start only). The
server is therefore started with the environment a spawned worker would get (the driver's,
plus Dask's ``distributed.nanny.pre-spawn-environ``, with the workers' ``PYTHONHASHSEED``),
and replaced by a new one when that environment has changed by the time a cluster starts.
``start-method: spawn`` brings back one fresh interpreter per worker. A server that died is
started again by the next cluster (:mod:`.local` retries a cluster start it broke, once).

The server is started when a run on an embedded cluster begins (:func:`prestart`, from
``DaskExecutor.prepare_workers``; config ``local-cluster.forkserver-prestart``), so that it
imports the workers' modules while the driver runs its part of the run, else by the cluster's
start (:func:`workers_from`, entered by :func:`.local.embedded_cluster` in
``DaskExecutor.start``); never at import or when a ``DaskExecutor`` is made: getting
``Pipeline`` or ``DaskExecutor`` from ``curator_dask`` starts no process. A server that no
cluster uses is let go when a cluster of another kind starts, or an embedded one with
``start-method: spawn``.

The private attributes of ``multiprocessing``'s ``ForkServer`` this needs are read and written
through :mod:`curator_dask.utils.private_api`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from curator_dask.backends.dask.forkserver_preload import PRELOAD_ENV
from curator_dask.utils import private_api

logger = logging.getLogger(__name__)

METHODS = ("forkserver", "spawn")
# What the server imports first (it then imports the workers' modules, see there).
_SERVER_MODULE = "curator_dask.backends.dask.forkserver_preload"

# Variables that change during a process's life for bookkeeping only: not worth a new server.
# distributed sets __DASK_PARENT_PID (process titles of the children) when the first cluster
# starts: counted, it made every later cluster alive beside that one spawn its workers.
_VOLATILE = frozenset({PRELOAD_ENV, "PYTEST_CURRENT_TEST", "__DASK_PARENT_PID"})

_lock = threading.Lock()
# pid: the server this module started, from process owner; key: its environment and modules;
# users: embedded clusters alive with workers from it.
_state: dict[str, Any] = {"pid": None, "owner": None, "key": None, "users": 0}


def start_method(configured: str | None = None) -> str:
    """How the embedded cluster starts its workers: config ``local-cluster.start-method``
    (``forkserver`` or ``spawn``), ``spawn`` where the platform has no ``forkserver``.

    Example:
        >>> start_method("spawn")
        'spawn'
    """
    from curator_dask import config as _config

    method = _config.get("local-cluster.start-method", configured) or "forkserver"
    if method not in METHODS:
        msg = f"local-cluster.start-method must be one of {METHODS}, got {method!r}"
        raise ValueError(msg)
    if method == "forkserver" and method not in multiprocessing.get_all_start_methods():
        return "spawn"
    return method


def server_environ(pre_spawn: dict[str, Any]) -> dict[str, str]:
    """The environment a spawned worker would start with: this process's, with Dask's
    ``pre-spawn-environ`` on top (as the Nanny sets it before it spawns).

    Example:
        >>> server_environ({"OMP_NUM_THREADS": 1})["OMP_NUM_THREADS"]
        '1'
    """
    environ = {k: v for k, v in os.environ.items() if k != PRELOAD_ENV}
    environ.update({str(k): str(v) for k, v in pre_spawn.items()})
    return environ


def _ours(server: Any) -> bool:
    """Whether the running server (if any) is the one this process started."""
    pid = private_api.forkserver_pid(server)
    return pid is not None and pid == _state["pid"] and _state["owner"] == os.getpid()


def ensure(pre_spawn: dict[str, Any]) -> int | None:
    """Start the forkserver for workers that need ``pre_spawn`` (or keep the running one);
    returns its process id, or ``None`` when the workers must be spawned instead: a server
    this module did not start is running, or ours has another environment and a cluster
    still uses it."""
    from curator_dask import config as _config

    server = _server()
    if server is None:
        return None
    modules = [str(m) for m in _config.get("local-cluster.forkserver-preload") or []]
    environ = server_environ(pre_spawn)
    key = _key(environ, modules)
    with _lock:
        died = _state["owner"] == os.getpid() and not _running(_state["pid"])
        if died:  # killed (while the driver lives, ours exits only when retired)
            logger.warning("the forkserver of the embedded cluster's workers (pid %s) has died; "
                           "starting a new one", _state["pid"])
        if private_api.forkserver_pid(server) is not None and not _ours(server):
            if not died:
                return None  # someone else's (or a parent's): its environment is unknown
            _retire(server)  # one multiprocessing started after ours died: not our environment
        if private_api.forkserver_pid(server) is not None and _state["key"] != key:
            if _state["users"]:
                return None
            _retire(server)
        _launch(server, environ, modules)  # nothing to do when it is running
        _state.update(pid=private_api.forkserver_pid(server), owner=os.getpid(), key=key)
        return _state["pid"]


def alive(pid: int | None) -> bool:
    """Whether ``pid`` is the forkserver this module started and it is still running (not
    killed, and not replaced by one ``multiprocessing`` restarted on its own)."""
    return pid is not None and server_pid() == pid and _running(pid)


def _key(environ: dict[str, str], modules: list[str]) -> tuple:
    return (tuple(sorted((k, v) for k, v in environ.items() if k not in _VOLATILE)),
            tuple(modules))


def release_unused() -> None:
    """Let go of a server of ours that no cluster uses (a driver of another cluster kind, or
    ``start-method: spawn``): it exits at once."""
    server = _server()
    if server is None:
        return
    with _lock:
        if _state["users"] == 0 and _ours(server):
            _retire(server)


def prestart(pre_spawn: dict[str, Any]) -> None:
    """Start the server ahead of the cluster, so that it imports the workers' modules while
    the driver is still busy; never fails (the cluster start tries again, or spawns)."""
    try:
        if start_method() == "forkserver":
            ensure(pre_spawn)
    except Exception as exc:  # noqa: BLE001 (an optimization only)
        logger.debug("forkserver not started ahead of the cluster: %s", exc)


@contextlib.contextmanager
def workers_from(pre_spawn: dict[str, Any], method: str | None = None) -> Iterator[str]:
    """The ``multiprocessing`` method for one embedded cluster's workers, held while it is
    alive: ``forkserver`` (the server is started, or started again, if needed) or ``spawn``;
    ``method`` overrides the configured one."""
    method = start_method(method)
    if method == "spawn":
        release_unused()
    else:
        try:
            if ensure(pre_spawn) is None:
                method = "spawn"
        except Exception as exc:  # noqa: BLE001 (spawning always works)
            logger.warning("could not start the forkserver (%s); spawning the workers", exc)
            method = "spawn"
    with _lock:
        _state["users"] += method == "forkserver"
    try:
        yield method
    finally:
        with _lock:
            _state["users"] -= method == "forkserver"


def server_pid() -> int | None:
    """The process id of the forkserver this module started, while it is running."""
    server = _server()
    return private_api.forkserver_pid(server) if server is not None and _ours(server) else None


def _server() -> Any:
    """``multiprocessing``'s forkserver object, or ``None`` where it has not the attributes
    this module relies on (another Python version)."""
    return private_api.forkserver()


def _launch(server: Any, environ: dict[str, str], modules: list[str]) -> None:
    """``ensure_running`` with ``environ`` in effect (the server is started with this
    process's environment) and this module as the one it preloads; nothing when the server
    is running."""
    if _running(private_api.forkserver_pid(server)):
        return
    sys_path = [private_api.original_dir() if p == "" else p for p in sys.path]
    spec = {"modules": modules, "sys_path": sys_path, "parent": os.getpid()}
    wanted = {**environ, PRELOAD_ENV: json.dumps(spec)}
    saved = {k: os.environ.get(k) for k, v in wanted.items() if os.environ.get(k) != v}
    server.set_forkserver_preload([_SERVER_MODULE])
    try:
        os.environ.update({k: wanted[k] for k in saved})
        server.ensure_running()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _running(pid: int | None) -> bool:
    """Whether ``pid`` (a child of this process) is running: not gone, not a zombie."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _retire(server: Any) -> None:
    """Let go of the running server without waiting for it: it exits once the workers it
    forked are gone; a thread reaps it."""
    pid, fd, address = private_api.forget_forkserver(server)
    with contextlib.suppress(OSError):
        os.close(fd)
    if isinstance(address, str) and address and not address.startswith("\0"):
        with contextlib.suppress(OSError):
            os.unlink(address)
    threading.Thread(target=_reap, args=(pid,), name="curator-dask-forkserver-reaper",
                     daemon=True).start()
    _state.update(pid=None, owner=None, key=None)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
