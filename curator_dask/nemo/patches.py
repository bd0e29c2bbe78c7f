"""Every change curator_dask makes to NeMo Curator's loaded modules, in one table.

:data:`PATCHES` has one row per attribute of a NeMo module that curator_dask replaces: the
module, the attribute (dotted, from the module), why, and the NeMo Curator version it was
checked against; :func:`missing` lists the rows the installed NeMo lacks
(``tests/nemo/test_patches.py`` asserts it is empty). Nothing else in curator_dask changes a
NeMo module; the workers' loguru handlers (:mod:`.logs`) change loguru, not NeMo.

Two kinds of rows:

- *entry* rows replace a method NeMo calls before it touches the executor, so no hook of
  the executor could run first: NeMo's checkpointed ``Pipeline.run`` goes to Ray's path, and
  ``TextDuplicatesRemovalWorkflow.run`` calls ``create_id_generator_actor``, before either
  reaches the executor. Their replacement passes every executor but a ``DaskExecutor`` to
  NeMo's method unchanged. They are installed, for the modules loaded at that moment, by
  ``DaskExecutor()`` (only when NeMo's module is already loaded), by ``start()``, by each run
  and by ``curator_dask.nemo.install()``, and stay (an executor that is closed can be run
  again) until :func:`restore_all`;
- the other rows (the id generator's redirects) are installed only while they are *held*
  (:func:`held`): while a ``DaskExecutor`` of this process is started (counted by the
  executor's registry of started executors: two started, one closed, still held), by a
  ``TextDuplicatesRemovalWorkflow.run`` on a ``DaskExecutor`` while it runs and by a worker's
  ``StageHost`` whose NeMo stages use ids (:func:`install` / :func:`remove`, a count), and
  while a generator made by a redirected call exists, so the ``kill_id_generator_actor()``
  after a ``with DaskExecutor()`` block still reaches it (:func:`settle` after that call).
  The last release (an executor's close: :func:`settle`) restores NeMo's objects.

Restoring puts back the exact objects that were there (``remove`` and :func:`restore_all`).
No import hook: a module imported later is patched by the next install or :func:`refresh`.

Example:
    >>> from curator_dask.nemo import patches
    >>> sorted({row.module.rsplit(".", 1)[-1] for row in patches.PATCHES})
    ['base', 'id_generator', 'pipeline', 'removal_workflow']
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from curator_dask.nemo import hook, ids

__all__ = ["PATCHES", "Patch", "held", "install", "install_entry", "installed", "missing",
           "refresh", "remove", "restore_all", "settle"]


@dataclass(frozen=True)
class Patch:
    """One attribute of a NeMo module that curator_dask replaces.

    Attributes:
        module: NeMo's module.
        attribute: the attribute, dotted from the module (``Pipeline._run_with_resumability``).
        why: why it is replaced, and what its replacement does.
        checked: the NeMo Curator version it was checked against.
        entry: installed before a run and kept (module docstring); otherwise held.
        replacement: ``(NeMo's object, NeMo's module) -> what replaces it``.
        applies: whether NeMo's module is the one the replacement was written for (the
            version and signatures); a row that does not apply is left as NeMo's.
    """

    module: str
    attribute: str
    why: str
    checked: str
    entry: bool
    replacement: Callable[[Any, Any], Any] = field(repr=False, compare=False)
    applies: Callable[[Any], bool] = field(repr=False, compare=False)

    def owner(self, module: Any) -> tuple[Any, str]:
        """The object that holds the attribute, and the attribute's last name."""
        *path, name = self.attribute.split(".")
        owner = module
        for part in path:
            owner = getattr(owner, part)
        return owner, name


_ID_WHY = ("calls of {name}() {where}, others run an exact copy of NeMo's function "
           "(ids.target); the code object is replaced, not the module's name, because a "
           "script imports the function by name before its first DaskExecutor")
_ID_WHERE = {
    "get_id_generator_actor": ("inside a curator_dask task on a Dask worker (NeMo's readers "
                               "call it in setup) return a DaskIdGeneratorHandle"),
    "create_id_generator_actor": ("while a DaskExecutor is started, or inside "
                                  "TextDuplicatesRemovalWorkflow.run(executor=<DaskExecutor>), "
                                  "go to curator_dask's function of the same name"),
    "write_id_generator_to_disk": ("as create_id_generator_actor's, and while a generator made "
                                   "on Dask exists, go to curator_dask's function"),
    "kill_id_generator_actor": ("as create_id_generator_actor's, and while a generator made "
                                "on Dask exists, go to curator_dask's function"),
}
CHECKED = "1.4.0"

PATCHES: tuple[Patch, ...] = (
    Patch(hook.PIPELINE_MODULE, "Pipeline._run_with_resumability",
          "NeMo's checkpointed Pipeline.run reaches nothing of the executor before its Ray "
          "path: for a DaskExecutor the run goes to its execute(..., options=RunOptions.plain("
          "checkpoint_path)) instead; any other executor gets NeMo's method unchanged",
          CHECKED, True, hook.dispatch_checkpointed_run, hook.pipeline_matches),
    Patch(ids.WORKFLOW_MODULE, "TextDuplicatesRemovalWorkflow.run",
          "NeMo's run calls create_id_generator_actor before it touches the executor: on a "
          "DaskExecutor the id generator rows are held while it runs (and an unsupported "
          "version is refused in one line); any other executor gets NeMo's run unchanged",
          CHECKED, True, ids.removal_run, ids.workflow_matches),
    *(Patch(ids.ID_MODULE, f"{name}.__code__", _ID_WHY.format(name=name, where=where),
            CHECKED, False, ids.dispatcher_code(name), ids.functions_match)
      for name, where in _ID_WHERE.items()),
    Patch(ids.READER_MODULE, "ray",
          "the reader's _generate_ids_func / _assign_ids_func call ray.get on what "
          "get_id_generator_actor's handle returns: a RayStandIn unwraps those values and "
          "hands anything else (and every other attribute) to the real ray",
          CHECKED, False, ids.ray_stand_in, ids.reader_matches),
)

_lock = threading.RLock()
_saved: dict[Patch, Any] = {}  # the installed rows -> NeMo's object they replaced
_holds = 0  # started executors, removal workflows on Dask, workers' StageHosts


def install_entry() -> None:
    """Install the entry rows of the NeMo modules that are loaded now (idempotent)."""
    with _lock:
        _install(entry_only=True)


def install() -> None:
    """Hold the id generator's rows (one more reference) and install every row of the NeMo
    modules that are loaded now; :func:`remove` releases the hold."""
    global _holds
    with _lock:
        _holds += 1
        _install(entry_only=False)


def remove() -> None:
    """Release one hold of :func:`install`; the last one restores the held rows (NeMo's exact
    objects), unless a generator made by a redirected call still exists (:func:`settle`)."""
    global _holds
    with _lock:
        _holds = max(0, _holds - 1)
        settle()


def refresh() -> None:
    """Install the rows due now for NeMo modules imported since the last install (each run, and
    ``curator_dask.nemo.install()``)."""
    with _lock:
        _install(entry_only=not held())


def settle() -> None:
    """Restore the held rows when nothing holds them any more."""
    with _lock:
        if not held():
            for row in [r for r in _saved if not r.entry]:
                _restore(row)


def restore_all() -> None:
    """Restore every row, entry rows included, and drop every hold: NeMo's modules as they
    were imported (a checkpointed ``Pipeline.run`` on a ``DaskExecutor`` then takes NeMo's Ray
    path again until the next install)."""
    global _holds
    with _lock:
        _holds = 0
        for row in list(_saved):
            _restore(row)


def held() -> bool:
    """Whether the id generator's rows are held: a ``DaskExecutor`` of this process is started
    (the executor's own count, ``any_started``), an :func:`install` is not yet removed, or a
    generator made by a redirected call still exists."""
    if _holds or ids.dask_executor_started():
        return True
    from curator_dask.ids import generator

    return bool(_saved) and generator.id_generator_exists()


def installed() -> list[Patch]:
    """The rows installed now, in the table's order."""
    with _lock:
        return [row for row in PATCHES if row in _saved]


def missing() -> list[str]:
    """``module:attribute`` of each row the installed NeMo Curator lacks (imports its
    modules)."""
    import importlib

    gone = []
    for row in PATCHES:
        try:
            owner, name = row.owner(importlib.import_module(row.module))
            getattr(owner, name)
        except (ImportError, AttributeError):
            gone.append(f"{row.module}:{row.attribute}")
    return gone


def _install(entry_only: bool) -> None:
    for row in PATCHES:
        module = sys.modules.get(row.module)
        if row in _saved or module is None or (entry_only and not row.entry):
            continue
        try:
            owner, name = row.owner(module)
            original = getattr(owner, name)
        except AttributeError:
            continue  # another NeMo: its run is refused where it matters (hook, ids)
        if row.applies(module):
            replacement = row.replacement(original, module)
            _saved[row] = original
            setattr(owner, name, replacement)


def _restore(row: Patch) -> None:
    original = _saved.pop(row)
    module = sys.modules.get(row.module)
    if module is not None:  # a module dropped from sys.modules keeps its replacement
        owner, name = row.owner(module)
        setattr(owner, name, original)
