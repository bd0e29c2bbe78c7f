"""Every private attribute of CPython, distributed, dask and dask-jobqueue the package uses.

Each function here reads or writes one attribute (or undocumented function) that its library
does not promise to keep. They are gathered so that an upgrade has one file to check: each
docstring names the versions it was checked against, and :func:`missing` lists the ones the
installed versions lack (``tests/utils/test_private_api.py`` asserts it is empty). Where an
attribute is missing, each function degrades as its docstring says rather than fail a run.

Checked against Python 3.11.7, dask 2026.8.0, distributed 2026.8.0, dask-jobqueue 0.9.0.
No module of this one imports Dask at import: the forkserver's helpers stay light.

Example:
    >>> from curator_dask.utils import private_api
    >>> private_api.forkserver() is not None  # Linux, CPython 3.11
    True
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

# multiprocessing.forkserver.ForkServer's state (CPython 3.11.7; 3.12 adds _forkserver_authkey)
_SERVER_ATTRIBUTES = ("_forkserver_pid", "_forkserver_alive_fd", "_forkserver_address", "_lock",
                      "ensure_running", "set_forkserver_preload")
# distributed 2026.8.0: the logger of the P2P shuffle's scheduler plugin (a private module)
SHUFFLE_SCHEDULER_LOGGER = "distributed.shuffle._scheduler_plugin"


class PreparationData(Protocol):
    """The signature of ``multiprocessing.spawn.get_preparation_data`` (its parameter's name
    included, as typeshed spells it)."""

    def __call__(self, name: str) -> dict[str, Any]: ...


# -- CPython: multiprocessing ------------------------------------------------------------------
def forkserver() -> Any:
    """``multiprocessing.forkserver._forkserver``, the process's ``ForkServer`` (checked on
    Python 3.11.7), or ``None`` where it lacks the attributes used here (another version:
    the embedded cluster then spawns its workers)."""
    try:
        from multiprocessing import forkserver as module
    except ImportError:
        return None
    server = getattr(module, "_forkserver", None)
    return server if all(hasattr(server, a) for a in _SERVER_ATTRIBUTES) else None


def forkserver_pid(server: Any) -> int | None:
    """``ForkServer._forkserver_pid``: the running server's process id, ``None`` before it
    started (Python 3.11.7)."""
    return server._forkserver_pid


def forget_forkserver(server: Any) -> tuple[int, int, Any]:
    """Make ``server`` (a ``ForkServer``) forget the running server without stopping it, so
    that its next ``ensure_running`` starts a new one; returns the old server's
    ``(pid, alive fd, address)``. Under ``ForkServer._lock``, as ``ensure_running`` resets the
    same fields for a server that died (Python 3.11.7; ``_forkserver_authkey`` of 3.12+
    too)."""
    with server._lock:
        old = server._forkserver_pid, server._forkserver_alive_fd, server._forkserver_address
        server._forkserver_pid = server._forkserver_alive_fd = None
        server._forkserver_address = None
        if hasattr(server, "_forkserver_authkey"):
            server._forkserver_authkey = None
    return old


def original_dir() -> str:
    """``multiprocessing.process.ORIGINAL_DIR`` (undocumented): the directory the process
    started in, which ``multiprocessing`` puts for ``""`` in a child's ``sys.path`` (Python
    3.11.7); the current directory where it is missing."""
    import os
    from multiprocessing import process

    return getattr(process, "ORIGINAL_DIR", None) or os.getcwd()


def preparation_data() -> PreparationData:
    """``multiprocessing.spawn.get_preparation_data`` (undocumented): what a spawned or
    forkserver child is told to set up, ``__main__`` included; called through the module by
    ``popen_spawn_posix`` and ``popen_forkserver`` at each start (Python 3.11.7)."""
    import multiprocessing.spawn

    return multiprocessing.spawn.get_preparation_data


def set_preparation_data(function: PreparationData) -> None:
    """Replace ``multiprocessing.spawn.get_preparation_data`` (see :func:`preparation_data`)."""
    import multiprocessing.spawn

    multiprocessing.spawn.get_preparation_data = function


# -- CPython: sys, argparse ----------------------------------------------------------------------
def caller_frame(depth: int = 1) -> Any:
    """``sys._getframe(depth)`` as seen from the caller (CPython 3.11.7): ``depth`` 1 is the
    frame that called the caller."""
    return sys._getframe(depth + 1)


def parser_actions(parser: Any) -> list[Any]:
    """``argparse.ArgumentParser._actions``: a parser's arguments, sub-parsers included
    (Python 3.11.7)."""
    return list(parser._actions)


def subparser_actions(parser: Any) -> list[Any]:
    """The ``argparse._SubParsersAction`` of ``parser`` (its ``add_subparsers``), none or one
    (Python 3.11.7)."""
    import argparse

    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


# -- distributed, dask, dask-jobqueue ------------------------------------------------------------
def skip_distributed_forkserver_preload() -> None:
    """Set ``distributed.utils._forkserver_preload_set``: distributed's ``get_mp_context``
    would otherwise import numpy, pandas and lz4 in the driver the first time it sees
    ``forkserver``, to set a preload list of its own (distributed 2026.8.0). Nothing where
    distributed lacks the flag."""
    # Any: the flag is not in distributed's types (a private module global)
    utils: Any = sys.modules.get("distributed.utils")
    if utils is not None and hasattr(utils, "_forkserver_preload_set"):
        utils._forkserver_preload_set = True


def distributed_defaults() -> dict[str, Any]:
    """distributed's packaged configuration defaults (``distributed/distributed.yaml``, which
    ``distributed.config`` adds to ``dask.config`` when distributed is imported), read without
    importing distributed (distributed 2026.8.0); ``{}`` where the file is not there."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("distributed")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = os.path.join(folders[0], "distributed.yaml") if folders else ""
    if not os.path.isfile(path):
        return {}
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def event_broker(scheduler: Any) -> Any:
    """``Scheduler._broker``, the scheduler's event broker (its ``truncate(topic)`` drops a
    topic's kept events; distributed 2026.8.0), or ``None``."""
    return getattr(scheduler, "_broker", None)


def dataframe_meta(frame: Any) -> Any:
    """``dask.dataframe.DataFrame._meta``: the empty pandas frame of its columns and dtypes
    (dask 2026.8.0)."""
    return frame._meta


def slurm_job_template(cluster: Any) -> Any:
    """``JobQueueCluster._dummy_job``: the job object dask-jobqueue's ``scale`` and ``adapt``
    read a job's processes and threads from (dask-jobqueue 0.9.0)."""
    return cluster._dummy_job


def abandon_starting_clusters(before: set[int]) -> None:
    """A ``LocalCluster`` whose start was interrupted (Ctrl+C while ``SpecCluster.__init__``
    waits for its workers) is left in ``SpecCluster._instances`` with workers in
    ``Status.init``, and distributed's ``close_clusters`` at exit then fails on
    ``assert w.status in {closing, closed, failed}`` with a traceback after the run's one
    line (issue 32, item 7). For each cluster made since ``before`` (the ``id`` of the
    instances there were): kill the worker processes its Nannies started (they may still be
    in their start, so a graceful close would wait on them), and take it out of
    ``_instances`` so that exit does not try to close it (distributed 2026.8.0:
    ``SpecCluster._instances``, ``SpecCluster.workers``, ``Nanny.process.process.pid``)."""
    import contextlib
    import os
    import signal

    from distributed.deploy.spec import SpecCluster

    for cluster in [c for c in list(SpecCluster._instances) if id(c) not in before]:
        for nanny in list(getattr(cluster, "workers", {}).values()):
            pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
            if pid:
                with contextlib.suppress(OSError):  # gone already
                    os.kill(pid, signal.SIGKILL)
        cluster.shutdown_on_close = False
        SpecCluster._instances.discard(cluster)
        loop = getattr(getattr(cluster, "loop", None), "asyncio_loop", None)
        if loop is not None:  # the Nannies' start tasks now fail, and nobody awaits them
            loop.set_exception_handler(_quiet_abandoned_start)


def _quiet_abandoned_start(loop: Any, context: dict[str, Any]) -> None:
    """The exception handler of an abandoned cluster's event loop: the Nannies whose worker
    processes were killed fail their start in tasks nobody awaits any more ("Task exception
    was never retrieved ... Nanny failed to start"); anything else as asyncio reports it."""
    error = context.get("exception")
    if isinstance(error, RuntimeError) and "failed to start" in str(error):
        return
    loop.default_exception_handler(context)


def spec_cluster_ids() -> set[int]:
    """The ``id`` of every ``SpecCluster`` of this process (``SpecCluster._instances``, a weak
    set; distributed 2026.8.0), for :func:`abandon_starting_clusters`."""
    from distributed.deploy.spec import SpecCluster

    return {id(c) for c in list(SpecCluster._instances)}


def missing() -> list[str]:
    """The private attributes above that the installed versions lack (modules not installed
    are skipped). It imports them: for tests and upgrades, not for runs."""
    import importlib.util
    import multiprocessing
    import multiprocessing.process
    import multiprocessing.spawn

    found: list[str] = []
    if "forkserver" in multiprocessing.get_all_start_methods() and forkserver() is None:
        found.append("multiprocessing.forkserver._forkserver")
    if not hasattr(multiprocessing.process, "ORIGINAL_DIR"):
        found.append("multiprocessing.process.ORIGINAL_DIR")
    if importlib.util.find_spec("distributed") is not None and "pre-spawn-environ" not in (
            distributed_defaults().get("distributed", {}).get("nanny", {})):
        found.append("distributed/distributed.yaml: distributed.nanny.pre-spawn-environ")
    if not callable(getattr(multiprocessing.spawn, "get_preparation_data", None)):
        found.append("multiprocessing.spawn.get_preparation_data")
    if not hasattr(sys, "_getframe"):
        found.append("sys._getframe")
    import argparse

    if not hasattr(argparse, "_SubParsersAction") or not hasattr(
            argparse.ArgumentParser(), "_actions"):
        found.append("argparse._SubParsersAction / ArgumentParser._actions")
    checks = {
        "distributed.utils": ("_forkserver_preload_set",),
        "distributed.scheduler": ("Scheduler._broker",),
        "distributed.deploy.spec": ("SpecCluster._instances", "SpecCluster.workers"),
        "distributed.nanny": ("Nanny.process",),
        "distributed.shuffle._scheduler_plugin": (),
        "dask_jobqueue.core": ("JobQueueCluster._dummy_job",),
        "dask.dataframe": ("DataFrame._meta",),
    }
    for module_name, names in checks.items():
        top = module_name.partition(".")[0]
        if importlib.util.find_spec(top) is None:
            continue
        found += _missing_in(module_name, names)
    return found


def _missing_in(module_name: str, names: tuple[str, ...]) -> list[str]:
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return [module_name]
    gone = []
    for dotted in names:
        owner_name, _, attribute = dotted.rpartition(".")
        owner = getattr(module, owner_name) if owner_name else module
        if not _has(owner, attribute):
            gone.append(f"{module_name}.{dotted}")
    return gone


def _has(owner: Any, attribute: str) -> bool:
    """Whether ``owner`` (a module or a class) has ``attribute``, also one set only in
    ``__init__`` (looked for in the class's code)."""
    if hasattr(owner, attribute):
        return True
    import inspect

    try:
        return f"self.{attribute} =" in inspect.getsource(owner)
    except (OSError, TypeError):
        return False
