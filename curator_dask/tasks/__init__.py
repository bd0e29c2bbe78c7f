"""Tasks: the units of work between stages (``from curator_dask.tasks import ...``)."""

from curator_dask.tasks.document import DocumentBatch
from curator_dask.tasks.file_group import FileGroupTask
from curator_dask.tasks.row_range import RowRangeTask
from curator_dask.tasks.sentinels import EmptyTask, FailedTask, NoneTask, SentinelTask
from curator_dask.tasks.tasks import StagePerfStats, Task

__all__ = [
    "DocumentBatch",
    "EmptyTask",
    "FailedTask",
    "FileGroupTask",
    "NoneTask",
    "RowRangeTask",
    "SentinelTask",
    "StagePerfStats",
    "Task",
]
