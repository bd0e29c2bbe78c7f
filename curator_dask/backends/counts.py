"""``StageCount``: what one stage did in a run, the unit of every count the package reports.

Made by the stage adapter on workers and on the driver, summed by the run, shown by the
counts table, the job's summary and its events. It imports no Dask, so the job layer and
the command line read counts without importing the Dask backend.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class StageCount:
    """What one stage did in a run: calls, tasks and items in and out, rows dropped, tasks
    filtered and failed, time.

    Attributes:
        calls: ``process_batch`` calls.
        tasks_in, tasks_out: tasks given to the stage and returned by it (sentinels not
            counted).
        items_in, items_out: the tasks' ``num_items`` (rows of a ``DocumentBatch``, files of
            a ``FileGroupTask``).
        rows_dropped: rows a stage that maps document batches to document batches did not
            pass on: per call, ``max(0, rows in - rows out)`` (a row filter's count); 0 for a
            stage whose items change meaning (a reader, a writer). Rows of a task the stage
            failed (``FailedTask``) are not counted here.
        filtered: *tasks* filtered: tasks the stage returned ``None`` for (a whole batch
            dropped; its rows count in ``rows_dropped`` too).
        failed: tasks the stage returned a ``FailedTask`` for.
        seconds: the stage's own processing time, summed over every call (busy time, not
            wall time).

    Example:
        >>> a = StageCount(calls=1, tasks_in=1, tasks_out=2)
        >>> a.merge(StageCount(calls=1, tasks_in=1, tasks_out=0, filtered=1)).tasks_out
        2
    """

    calls: int = 0
    tasks_in: int = 0
    tasks_out: int = 0
    items_in: int = 0
    items_out: int = 0
    rows_dropped: int = 0
    filtered: int = 0
    failed: int = 0
    seconds: float = 0.0

    def merge(self, other: StageCount) -> StageCount:
        """Add ``other``'s counts to this one; returns this one."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self
