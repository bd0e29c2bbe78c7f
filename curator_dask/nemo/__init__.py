"""NeMo Curator interop: its ``Pipeline.run`` on a ``DaskExecutor``, checks, logs.

Nothing here imports ``nemo_curator`` at module level, and nothing watches imports. The Dask
backend loads :mod:`.backend` (its hooks) only once ``nemo_curator`` is imported; every change
to NeMo's loaded modules is a row of :mod:`.patches`, installed when an executor starts or a
run begins (NeMo's checkpointed ``Pipeline.run`` also when the executor is made), restored when
the last executor closes, or installed by :func:`install`; the checks look at objects the user
handed over.
"""

from __future__ import annotations

__all__ = ["install"]


def install() -> None:
    """Hook NeMo Curator's loaded modules for ``DaskExecutor`` runs (its ``Pipeline.run(
    checkpoint_path=...)`` and ``TextDuplicatesRemovalWorkflow.run``, and, while an executor
    is started, its id generator): needed only when NeMo's modules are imported after the
    ``DaskExecutor`` is made (:func:`curator_dask.nemo.patches.refresh`).

    Example:
        >>> import curator_dask.nemo
        >>> curator_dask.nemo.install()  # after the NeMo imports, before pipeline.run
    """
    from curator_dask.nemo import patches

    patches.refresh()
