"""Completion counters of NeMo Curator 1.4, as pure functions and a ``CounterBook``.

See docs/design/contract.md §3.

A source opens with +1. Every stage boundary fires deltas keyed on an *output* task id:
continuing fan-out children add to the count, a task reaching the sink or filtered subtracts
one, a ``FailedTask`` adds 0 (the source stays pending and is replayed). A source is complete
when its count reaches exactly 0. This module imports neither Dask nor LMDB.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from curator_dask import lineage

if TYPE_CHECKING:
    from curator_dask.tasks import Task

logger = logging.getLogger(__name__)

Delta = tuple[str, str, int]
"""``(output task_id, source_id, delta)``."""


def source_deltas(sources: Sequence[Task]) -> list[Delta]:
    """Set ``_source_id`` on each source output and return its ``+1`` delta.

    See docs/design/contract.md §3.1.
    """
    deltas = []
    for task in sources:
        if lineage.is_sentinel(task):
            continue
        task._source_id = task.get_source_id()
        deltas.append((task.task_id, task._source_id, 1))
    return deltas


@dataclass
class StageDeltas:
    """Deltas of one stage call, the source ids that saw a ``FailedTask``, and a warning."""

    deltas: list[Delta] = field(default_factory=list)
    failed_sources: list[str] = field(default_factory=list)
    warning: str | None = None


def stage_deltas(
    stage_type: str, inputs: Sequence[Task], outputs: Sequence[Task], *, is_sink: bool
) -> StageDeltas:
    """Deltas of a non-source stage call, with sentinels still in ``outputs``.

    See docs/design/contract.md §3.2.

    Real outputs with an empty ``_source_id`` inherit their parent's.

    Example:
        >>> from curator_dask.tasks import DocumentBatch, NoneTask
        >>> import pyarrow as pa
        >>> parent = DocumentBatch(dataset_name="d", data=pa.table({"a": [1]}))
        >>> parent.task_id, parent._source_id = "s_0", "s"
        >>> out = [NoneTask()]
        >>> out[0].task_id = "s_0_0"
        >>> stage_deltas("Filter", [parent], out, is_sink=False).deltas
        [('s_0_0', 's', -1)]
    """
    result = StageDeltas()
    if not outputs:
        return result
    if all(not t._source_id for t in inputs):
        return result
    if len(inputs) == 1 and len(outputs) > 1:
        parent = inputs[0]
        real = [t for t in outputs if not lineage.is_sentinel(t)]
        n_failed = sum(1 for t in outputs if lineage.is_failed_task(t))
        continuing = 0 if is_sink else len(real)
        for child in real:
            if not child._source_id:
                child._source_id = parent._source_id
        result.deltas.append(
            (outputs[0].task_id, parent._source_id, continuing + n_failed - 1)
        )
        if n_failed:
            result.failed_sources.append(parent._source_id)
        return result
    if len(outputs) == len(inputs):
        for parent, out in zip(inputs, outputs, strict=True):
            sid = parent._source_id
            if lineage.is_none_task(out):
                result.deltas.append((out.task_id, sid, -1))
            elif lineage.is_failed_task(out):
                result.deltas.append((out.task_id, sid, 0))
                result.failed_sources.append(sid)
            else:
                if not out._source_id:
                    out._source_id = sid
                result.deltas.append((out.task_id, sid, -1 if is_sink else 0))
        return result
    result.warning = (
        f"resumability: {stage_type} produced {len(outputs)} outputs for {len(inputs)} "
        "inputs; can't attribute sources, skipping counter update for this batch."
    )
    return result


class CounterBook:
    """Pending counts per source with NeMo Curator's rules (docs/design/contract.md §3.3).

    - a repeated ``(task_id, delta)`` is ignored (a retried task fires the same deltas);
    - a new delta for a known ``task_id`` replaces the old one (newest wins);
    - a delta for a completed source un-completes it (warning; the caller deletes it from its
      own store) and is otherwise dropped;
    - a source whose count reaches exactly 0 is newly complete.

    Example:
        >>> book = CounterBook()
        >>> book.apply([("0_a", "a", 1), ("0_a_0", "a", 0)])
        ([], [])
        >>> book.apply([("0_a_0_0", "a", -1)])
        (['a'], [])
        >>> sorted(book.completed)
        ['a']
    """

    def __init__(self, completed: Iterable[str] = ()) -> None:
        self.pending: dict[str, int] = {}
        self.completed: set[str] = set(completed)
        self.applied: dict[str, int] = {}

    def apply(self, deltas: Iterable[Delta]) -> tuple[list[str], list[str]]:
        """Apply deltas; return ``(newly completed, un-completed)`` source ids, in order."""
        newly_done: list[str] = []
        uncompleted: list[str] = []
        for task_id, sid, delta in deltas:
            existing = self.applied.get(task_id)
            if existing is not None and existing == delta:
                continue
            if sid in self.completed:
                logger.warning(
                    "resumability: delta %s for %s arrived after source %s completed. Removing "
                    "it from the completed set; it will be replayed.", delta, task_id, sid,
                )
                self.completed.discard(sid)
                # The two lists stay disjoint, so their order of application cannot matter.
                if sid in newly_done:
                    newly_done.remove(sid)
                else:
                    uncompleted.append(sid)
                continue
            self.applied[task_id] = delta
            previous = 0 if existing is None else existing
            self.pending[sid] = self.pending.get(sid, 0) - previous + delta
            if self.pending[sid] == 0:
                if sid in uncompleted:
                    uncompleted.remove(sid)  # it was recorded complete before: keep it there
                else:
                    newly_done.append(sid)
                self.completed.add(sid)
                del self.pending[sid]
        return newly_done, uncompleted

    def is_completed(self, sid: str) -> bool:
        return sid in self.completed


class DeltaLog:
    """Collects the deltas of one Dask task (several stage calls) for one message.

    Example:
        >>> log = DeltaLog()
        >>> log.add(StageDeltas(deltas=[("s_0_0", "s", -1)]))
        >>> log.message("run1")
        {'run': 'run1', 'deltas': [('s_0_0', 's', -1)], 'failed': [], 'warnings': []}
    """

    def __init__(self) -> None:
        self.deltas: list[Delta] = []
        self.failed: set[str] = set()
        self.warnings: list[str] = []

    def add(self, stage: StageDeltas) -> None:
        self.deltas.extend(stage.deltas)
        self.failed.update(stage.failed_sources)
        if stage.warning is not None:
            logger.warning(stage.warning)
            self.warnings.append(stage.warning)

    def extend(self, other: DeltaLog) -> None:
        """Append another log's deltas, failed sources and warnings."""
        self.deltas.extend(other.deltas)
        self.failed.update(other.failed)
        self.warnings.extend(other.warnings)

    def __bool__(self) -> bool:
        return bool(self.deltas or self.failed or self.warnings)

    def message(self, run_id: str) -> dict:
        return {"run": run_id, "deltas": list(self.deltas), "failed": sorted(self.failed),
                "warnings": list(self.warnings)}
