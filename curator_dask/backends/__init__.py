"""Execution backends."""

from curator_dask.backends.base import BaseExecutor, NodeInfo, WorkerMetadata

__all__ = ["BaseExecutor", "NodeInfo", "WorkerMetadata"]
