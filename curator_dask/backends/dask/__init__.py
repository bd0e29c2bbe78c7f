"""The Dask backend: ``from curator_dask.backends.dask import DaskExecutor``.

The executor is imported on first use, so that importing the package stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__all__ = ["DaskExecutor", "RunResult"]


def __getattr__(name: str):
    if name not in __all__:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module("curator_dask.backends.dask.executor"), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from curator_dask.backends.dask.executor import DaskExecutor, RunResult
