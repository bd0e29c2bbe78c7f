"""curator_dask: NeMo-Curator-style data-curation pipelines on Dask distributed.

Public names are imported lazily, so ``python -m curator_dask --help`` stays fast. Importing
the package or getting a name from it starts no process and installs no import hook: the
embedded cluster's processes start with the cluster (``DaskExecutor.start``).

Example:
    >>> from curator_dask import Pipeline, JsonlReader, JsonlWriter
    >>> p = Pipeline(name="copy").add_stage(JsonlReader(file_paths="in/"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from curator_dask.utils.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "Pipeline": "curator_dask.pipeline",
    "ProcessingStage": "curator_dask.stages.base",
    "CompositeStage": "curator_dask.stages.base",
    "NodeInfo": "curator_dask.stages.base",
    "WorkerMetadata": "curator_dask.stages.base",
    "Resources": "curator_dask.stages.resources",
    "FilePartitioningStage": "curator_dask.stages.file_partitioning",
    "JsonlReader": "curator_dask.stages.text.io.reader",
    "ParquetReader": "curator_dask.stages.text.io.reader",
    "JsonlWriter": "curator_dask.stages.text.io.writer",
    "ParquetWriter": "curator_dask.stages.text.io.writer",
    "Task": "curator_dask.tasks",
    "DocumentBatch": "curator_dask.tasks",
    "FileGroupTask": "curator_dask.tasks",
    "RowRangeTask": "curator_dask.tasks",
    "EmptyTask": "curator_dask.tasks",
    "NoneTask": "curator_dask.tasks",
    "FailedTask": "curator_dask.tasks",
    "DaskExecutor": "curator_dask.backends.dask",
    "RunResult": "curator_dask.backends.dask",
    "CuratorDaskError": "curator_dask.errors",
    "StageError": "curator_dask.errors",
    "ResourceUnavailableError": "curator_dask.errors",
    "PartitionRecordError": "curator_dask.errors",
    "PartitionContentChangedError": "curator_dask.errors",
}

__all__ = [
    "CompositeStage",
    "CuratorDaskError",
    "DaskExecutor",
    "DocumentBatch",
    "EmptyTask",
    "FailedTask",
    "FileGroupTask",
    "FilePartitioningStage",
    "JsonlReader",
    "JsonlWriter",
    "NodeInfo",
    "NoneTask",
    "ParquetReader",
    "ParquetWriter",
    "PartitionContentChangedError",
    "PartitionRecordError",
    "Pipeline",
    "ProcessingStage",
    "ResourceUnavailableError",
    "Resources",
    "RowRangeTask",
    "RunResult",
    "StageError",
    "Task",
    "WorkerMetadata",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from curator_dask.backends.dask import DaskExecutor, RunResult
    from curator_dask.errors import (
        CuratorDaskError,
        PartitionContentChangedError,
        PartitionRecordError,
        ResourceUnavailableError,
        StageError,
    )
    from curator_dask.pipeline import Pipeline
    from curator_dask.stages.base import CompositeStage, NodeInfo, ProcessingStage, WorkerMetadata
    from curator_dask.stages.file_partitioning import FilePartitioningStage
    from curator_dask.stages.resources import Resources
    from curator_dask.stages.text.io.reader import JsonlReader, ParquetReader
    from curator_dask.stages.text.io.writer import JsonlWriter, ParquetWriter
    from curator_dask.tasks import (
        DocumentBatch,
        EmptyTask,
        FailedTask,
        FileGroupTask,
        NoneTask,
        RowRangeTask,
        Task,
    )
