"""The task base class and per-stage performance records (docs/design/contract.md §1.1)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from curator_dask import lineage

T = TypeVar("T")


@dataclass
class StagePerfStats:
    """Timing of one stage call, appended to every output task's ``_stage_perf``.

    Example:
        >>> StagePerfStats(stage_name="reader", process_time=0.5).num_items_processed
        0
    """

    stage_name: str
    process_time: float = 0.0
    num_items_processed: int = 0
    custom_metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(repr=False)
class Task(ABC, Generic[T]):
    """A unit of work flowing between stages.

    ``task_id`` and ``_source_id`` are owned by the framework: they cannot be passed to the
    constructor and are re-derived at every stage boundary (see :mod:`curator_dask.lineage`).

    Example:
        >>> from curator_dask.tasks import DocumentBatch
        >>> import pandas as pd
        >>> t = DocumentBatch(dataset_name="d", data=pd.DataFrame({"text": ["a"]}))
        >>> t.task_id
        ''
    """

    dataset_name: str
    data: T
    _stage_perf: list[StagePerfStats] = field(default_factory=list)
    _metadata: dict[str, Any] = field(default_factory=dict)
    task_id: str = field(init=False, default="")
    _source_id: str = field(init=False, default="")

    def __post_init__(self) -> None:
        # Both framework fields in the instance from the start: set later, the second would
        # turn the instance's key-sharing __dict__ into a private one (~300 bytes more per
        # task, which is a lot at 10^6 sources).
        self.task_id = self.task_id
        self._source_id = self._source_id
        self.validate()

    @property
    @abstractmethod
    def num_items(self) -> int:
        """Number of items (rows, files) in the task."""

    @abstractmethod
    def validate(self) -> bool:
        """Check the payload; return False (or raise) when it is not usable."""

    def _set_task_id(self, parent_task_id: str, current_task_id_suffix: str | int) -> None:
        self.task_id = lineage.child_task_id(parent_task_id, current_task_id_suffix)

    def get_source_id(self) -> str:
        """The last ``_``-separated segment of ``task_id``: the id stored in checkpoints."""
        return lineage.source_id_of(self.task_id)

    def get_deterministic_id(self) -> str | None:
        """A content id used by source stages; ``None`` means "use the position"."""
        return None

    def add_stage_perf(self, perf_stats: StagePerfStats) -> None:
        self._stage_perf.append(perf_stats)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(task_id={self.task_id!r}, dataset_name={self.dataset_name!r},"
            f" num_items={self.num_items})"
        )
