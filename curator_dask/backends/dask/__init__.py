"""The Dask backend: ``from curator_dask.backends.dask import DaskExecutor``.

The executor is imported on first use, so that importing the package stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from curator_dask.utils.lazy import lazy_exports

__all__ = ["DaskExecutor", "RunResult"]

__getattr__, __dir__ = lazy_exports(
    __name__, dict.fromkeys(__all__, "curator_dask.backends.dask.executor"))


if TYPE_CHECKING:
    from curator_dask.backends.dask.executor import DaskExecutor, RunResult
