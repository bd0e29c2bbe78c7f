"""NeMo Curator's ``Pipeline.run(executor=DaskExecutor(), checkpoint_path=P)`` without Ray.

NeMo's ``Pipeline.run`` sends a checkpointed run through its private
``_run_with_resumability``, which starts a Ray actor (or fails without ``RAY_ADDRESS``). For
a ``DaskExecutor`` the hook sends it to :meth:`DaskExecutor.execute` with the checkpoint
instead: the completion plugin counts on the Dask scheduler and stores NeMo's LMDB format.
Runs on other executors keep NeMo's own path. The hook is installed only for the NeMo
versions and the method signature it was written against; on any other version a
checkpointed run on a ``DaskExecutor`` fails with one line naming the supported versions,
so it can never fall into Ray's path and leave an empty checkpoint behind.

:func:`install` patches NeMo's modules that are loaded when it is called (no import hook):
``DaskExecutor()`` calls it, and so does each run on a ``DaskExecutor``. NeMo's
``Pipeline.run(checkpoint_path=...)`` reaches no method of the executor before its Ray path, so
NeMo's pipeline module must be imported before the ``DaskExecutor`` is made, or
``curator_dask.nemo.install()`` called after it is (docs/nemo-curator.md). It also installs the
id generator's redirects (:mod:`curator_dask.nemo.ids`).
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any

SUPPORTED_VERSIONS = ("1.4",)  # NeMo Curator minor versions whose Pipeline.run is hooked
PIPELINE_MODULE = "nemo_curator.pipeline.pipeline"
_METHOD = "_run_with_resumability"
_PARAMETERS = ["self", "executor", "initial_tasks", "checkpoint_path"]
_lock = threading.RLock()


def install() -> None:
    """Hook NeMo's ``Pipeline`` and redirect its id generator (:mod:`curator_dask.nemo.ids`)
    in those of their modules that are loaded now; a module imported later is patched by the
    next call. Cheap (a few ``sys.modules`` look-ups) and idempotent; imports nothing of NeMo.

    Example:
        >>> from curator_dask.nemo import install
        >>> install()  # after ``import nemo_curator...``, when the DaskExecutor came first
    """
    patch_loaded(PIPELINE_MODULE, _patch)
    from curator_dask.nemo import ids

    ids.install()


def patch_loaded(name: str, patch: Callable[[Any], None]) -> bool:
    """Call ``patch(module)`` when NeMo's module ``name`` is loaded; whether it was."""
    module = sys.modules.get(name)
    if module is None:
        return False
    with _lock:  # two threads making executors patch once
        patch(module)
    return True


def nemo_version() -> str:
    """The installed NeMo Curator version (``nemo_curator.package_info.__version__``)."""
    from nemo_curator.package_info import __version__

    return str(__version__)


def is_supported(version: str) -> bool:
    """Whether NeMo Curator ``version`` is one this hook was written against.

    Example:
        >>> is_supported("1.4.0"), is_supported("1.4.2+abc"), is_supported("1.5.0")
        (True, True, False)
    """
    return any(version == v or version.startswith(v + ".") for v in SUPPORTED_VERSIONS)


def _patch(module: Any) -> None:
    pipeline = getattr(module, "Pipeline", None)
    original = getattr(pipeline, _METHOD, None)
    if original is None or getattr(original, "__curator_dask_hook__", False):
        return
    def _run_with_resumability(self: Any, executor: Any, initial_tasks: Any,
                               checkpoint_path: Any) -> Any:
        from curator_dask.backends.dask.executor import DaskExecutor

        if not isinstance(executor, DaskExecutor):
            return original(self, executor, initial_tasks, checkpoint_path)
        version = nemo_version()
        if not (is_supported(version)
                and list(inspect.signature(original).parameters) == _PARAMETERS):
            msg = (f"curator_dask runs checkpointed NeMo Curator pipelines for NeMo Curator "
                   f"{', '.join(v + '.x' for v in SUPPORTED_VERSIONS)} only; this is "
                   f"{version}: use curator_dask's Pipeline, or a supported NeMo Curator")
            raise RuntimeError(msg)
        from curator_dask.backends.base import RunOptions

        options = RunOptions.plain(str(checkpoint_path)).checked(self.stages)
        return executor.execute(self.stages, initial_tasks, options=options)

    _run_with_resumability.__curator_dask_hook__ = True  # type: ignore[attr-defined]
    _run_with_resumability.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(pipeline, _METHOD, _run_with_resumability)
