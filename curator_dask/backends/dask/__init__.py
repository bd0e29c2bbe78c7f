"""The Dask backend: ``from curator_dask.backends.dask import DaskExecutor``."""

from curator_dask.backends.dask.executor import DaskExecutor, RunResult

__all__ = ["DaskExecutor", "RunResult"]
