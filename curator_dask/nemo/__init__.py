"""NeMo Curator interop: its ``Pipeline.run`` on a ``DaskExecutor``, checks, logs.

Nothing here imports ``nemo_curator`` at module level, and nothing watches imports: the hook
patches NeMo's modules that are loaded when ``DaskExecutor()`` is made or a run starts, or
when :func:`install` is called; the checks look at objects the user handed over.
"""

from __future__ import annotations

__all__ = ["install"]


def install() -> None:
    """Hook NeMo Curator's loaded modules for ``DaskExecutor`` runs (its ``Pipeline.run(
    checkpoint_path=...)`` and its id generator): needed only when NeMo's modules are imported
    after the ``DaskExecutor`` is made (:func:`curator_dask.nemo.hook.install`).

    Example:
        >>> import curator_dask.nemo
        >>> curator_dask.nemo.install()  # after the NeMo imports, before pipeline.run
    """
    from curator_dask.nemo import hook

    hook.install()
