"""Optional integrations of the Dask backend: named in one table, loaded only when in use.

The backend never imports an integration at module level. :data:`EXTENSIONS` names each one
as fsspec names its file systems (``known_implementations``): the package whose use turns it on,
and the dotted path of its :class:`BackendExtension` subclass. An extension is imported (inside
:func:`active`) only once its package is already imported in this process, so a user without
NeMo Curator, or who never imported it, never imports it through curator_dask. The backend
calls every active extension's hooks with :func:`notify`.

Example:
    >>> EXTENSIONS["nemo"]
    ('nemo_curator', 'curator_dask.nemo.backend.NemoExtension')
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any

__all__ = ["EXTENSIONS", "BackendExtension", "active", "notify"]

# name -> (the package whose import turns it on, the dotted path of its class)
EXTENSIONS: dict[str, tuple[str, str]] = {
    "nemo": ("nemo_curator", "curator_dask.nemo.backend.NemoExtension"),
}


class BackendExtension:
    """The hooks the Dask backend calls, each a no-op here: an extension overrides those it
    needs. Every hook takes keyword arguments only, and ``**kwargs`` for arguments a later
    backend adds.

    Example:
        >>> class Counting(BackendExtension):
        ...     made = 0
        ...     def executor_made(self, executor, **kwargs):
        ...         Counting.made += 1
        >>> Counting().executor_made(executor=None); Counting.made
        1
    """

    def executor_made(self, executor: Any, **kwargs: Any) -> None:
        """``DaskExecutor.__init__`` ended (nothing is started)."""

    def executor_started(self, executor: Any, **kwargs: Any) -> None:
        """The executor's cluster was started (or connected to)."""

    def run_begins(self, executor: Any, **kwargs: Any) -> None:
        """``execute`` was called, before the run is made (the executor may be started)."""

    def run_made(self, stages: Any, options: Any, **kwargs: Any) -> None:
        """A run is made, before anything starts: raise to refuse it."""

    def run_connected(self, client: Any, stages: Any, **kwargs: Any) -> None:
        """The run's stages are about to go to the workers of ``client``."""

    def executor_closed(self, executor: Any, **kwargs: Any) -> None:
        """The executor's cluster was closed (also called for one never started)."""

    def worker_setup(self, host: Any, stages: Any, **kwargs: Any) -> None:
        """On a worker: the run's ``StageHost`` plugin ``host`` was set up with ``stages``."""

    def worker_teardown(self, host: Any, stages: Any, **kwargs: Any) -> None:
        """On a worker: ``host`` is torn down."""


_lock = threading.Lock()
_loaded: dict[str, BackendExtension] = {}


def active() -> list[BackendExtension]:
    """The extensions whose package is imported in this process, in :data:`EXTENSIONS`' order
    (each imported and made once)."""
    found = []
    for name, (package, path) in EXTENSIONS.items():
        if package not in sys.modules:
            continue
        with _lock:
            extension = _loaded.get(name)
            if extension is None:
                module, _, attribute = path.rpartition(".")
                extension = _loaded[name] = getattr(importlib.import_module(module), attribute)()
        found.append(extension)
    return found


def notify(hook: str, **kwargs: Any) -> None:
    """Call ``hook`` on every active extension (an exception goes to the caller: ``run_made``
    refuses a run that way)."""
    for extension in active():
        getattr(extension, hook)(**kwargs)
