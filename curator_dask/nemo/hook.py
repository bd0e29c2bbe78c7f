"""NeMo Curator's ``Pipeline.run(executor=DaskExecutor(), checkpoint_path=P)`` without Ray.

NeMo's ``Pipeline.run`` sends a checkpointed run through its private
``_run_with_resumability``, which starts a Ray actor (or fails without ``RAY_ADDRESS``). For
a ``DaskExecutor`` the hook sends it to :meth:`DaskExecutor.execute` with the checkpoint
instead: the completion plugin counts on the Dask scheduler and stores NeMo's LMDB format.
Runs on other executors keep NeMo's own path. The hook is installed only for the NeMo
versions and the method signature it was written against; on any other version a
checkpointed run on a ``DaskExecutor`` fails with one line naming the supported versions,
so it can never fall into Ray's path and leave an empty checkpoint behind.

:func:`install` also installs the id generator's redirects (:mod:`curator_dask.nemo.ids`);
:func:`watch` patches a NeMo module now, or right after the user first imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
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
_pending: dict[str, Callable[[Any], None]] = {}  # module name -> its patch, until imported


def install() -> None:
    """Hook NeMo's ``Pipeline`` now if its module is loaded, else as soon as it is imported;
    the same for the id generator's redirects (:mod:`curator_dask.nemo.ids`)."""
    watch(PIPELINE_MODULE, _patch)
    from curator_dask.nemo import ids

    ids.install()


def watch(name: str, patch: Callable[[Any], None]) -> None:
    """Call ``patch(module)`` for NeMo's module ``name`` now if it is loaded, else right after
    it is first imported (one import watcher on ``sys.meta_path`` serves every name)."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _pending.setdefault(name, patch)
            if not any(isinstance(f, _ImportWatcher) for f in sys.meta_path):
                sys.meta_path.insert(0, _ImportWatcher())
            return
    patch(module)


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


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """Patches watched NeMo modules right after they are first imported (then steps aside)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        with _lock:
            # popped first: the find_spec below comes back through this finder
            patch = _pending.pop(fullname, None)
            if patch is None:
                return None
            if not _pending and self in sys.meta_path:
                sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, patch: Callable[[Any], None]) -> None:
        self.loader = loader
        self.patch = patch

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        self.patch(module)
