"""Stages (``from curator_dask.stages.base import ProcessingStage``)."""

from curator_dask.stages.base import CompositeStage, NodeInfo, ProcessingStage, WorkerMetadata
from curator_dask.stages.resources import Resources

__all__ = ["CompositeStage", "NodeInfo", "ProcessingStage", "Resources", "WorkerMetadata"]
