"""What runs in the embedded cluster's forkserver (:mod:`.forkserver`) when it starts.

The server imports this module first, by name (``set_forkserver_preload``), with the list of
the workers' modules in ``CURATOR_DASK_FORKSERVER_PRELOAD``; in any other process (the driver,
which imports it for that name) it does nothing. Standard library only: the server imports it
before any other module, to set itself up for the workers' modules it then imports.

Each worker the server forks is killed when the server dies (:func:`_dies_with`), as its
Nanny, which hears of it only through the server, then takes it for dead anyway.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
from typing import Any

# Set only in the server's environment while it starts: what it imports (and its sys.path).
PRELOAD_ENV = "CURATOR_DASK_FORKSERVER_PRELOAD"


def _preload_in_server() -> None:
    """In the server (imported by it at its start, see :func:`.forkserver._launch`): import
    the workers' modules once. A module that is not installed is skipped; one that fails is
    reported.

    The collector is off while the modules are imported (no collection of import-time
    objects that live as long as the process anyway), then their objects move to its
    permanent generation (``gc.freeze``) and each forked worker turns it on again: the
    workers' collections, and the one at their exit that the cluster's close waits for, skip
    them, and the pages that hold them stay shared with the server.
    """
    payload = os.environ.pop(PRELOAD_ENV, None)
    if payload is None:
        return
    spec = json.loads(payload)
    if not (sys.argv == ["-c"] and "multiprocessing.forkserver" in sys.modules
            and os.getppid() == spec.get("parent")):
        return  # another process that inherited the variable: not the server
    sys.path[:] = spec.get("sys_path") or sys.path
    # Ctrl+C at the driver's start reaches the server too: no traceback from its imports
    # (multiprocessing ignores SIGINT in the server from the end of the preload on)
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.disable()
    for name in spec.get("modules", ()):
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        except Exception as exc:  # noqa: BLE001 (the worker imports it again, and reports it)
            print(f"curator_dask forkserver: could not preload {name}: {exc!r}",
                  file=sys.stderr)
    gc.freeze()
    os.register_at_fork(after_in_child=gc.enable)
    os.register_at_fork(after_in_child=_dies_with(os.getpid()))
    signal.signal(signal.SIGINT, interrupt)


def _dies_with(server: int) -> Any:
    """What each forked worker runs first (Linux): be killed when the server dies. A Nanny
    hears of its worker's exit through the server, so once the server is killed it takes its
    workers for dead and starts others: they must not live on, unseen, as orphans."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return lambda: None

    def die_with_server() -> None:
        prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        if os.getppid() != server:  # it died before that
            os._exit(1)

    return die_with_server


_preload_in_server()
