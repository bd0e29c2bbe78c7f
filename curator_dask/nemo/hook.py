"""NeMo Curator's ``Pipeline.run(executor=DaskExecutor(), checkpoint_path=P)`` without Ray.

NeMo's ``Pipeline.run`` sends a checkpointed run through its private
``_run_with_resumability``, which starts a Ray actor (or fails without ``RAY_ADDRESS``). For
a ``DaskExecutor`` the replacement (:func:`dispatch_checkpointed_run`) sends it to
:meth:`DaskExecutor.execute` with the checkpoint instead: the completion plugin counts on the
Dask scheduler and stores NeMo's LMDB format. Runs on other executors keep NeMo's own method.
The replacement runs only for the NeMo versions and the method signature it was written
against; on any other version a checkpointed run on a ``DaskExecutor`` fails with one line
naming the supported versions, so it can never fall into Ray's path and leave an empty
checkpoint behind.

It is a row of :mod:`.patches` (an *entry* row): NeMo's ``Pipeline.run(checkpoint_path=...)``
reaches no method of the executor before its Ray path, so the replacement is installed before
a run: by ``DaskExecutor()`` when NeMo's pipeline module is already loaded, by ``start()``,
each run and ``curator_dask.nemo.install()`` (docs/migrating-from-nemo-curator.md).
"""

from __future__ import annotations

import inspect
from typing import Any

SUPPORTED_VERSIONS = ("1.4",)  # NeMo Curator minor versions whose Pipeline.run is hooked
PIPELINE_MODULE = "nemo_curator.pipeline.pipeline"
_PARAMETERS = ["self", "executor", "initial_tasks", "checkpoint_path"]


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


def pipeline_matches(module: Any) -> bool:
    """Whether NeMo's pipeline module has the method replaced (its version and signature are
    checked when a run calls it, so another version's run is refused rather than sent to
    Ray)."""
    return callable(getattr(getattr(module, "Pipeline", None), "_run_with_resumability", None))


def dispatch_checkpointed_run(original: Any, module: Any = None) -> Any:
    """The replacement of NeMo's ``Pipeline._run_with_resumability`` (``original``): a
    ``DaskExecutor`` runs the stages with the checkpoint, any other executor NeMo's method."""

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

    # a function's own attributes: mypy knows only those of its type
    _run_with_resumability.__curator_dask_hook__ = True  # type: ignore[attr-defined]  # marker
    _run_with_resumability.__wrapped__ = original  # type: ignore[attr-defined]  # as wraps sets
    _run_with_resumability.__doc__ = original.__doc__
    return _run_with_resumability
