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


def set_source_id(task: Task) -> str:
    """Set and return ``task._source_id`` (docs/design/contract.md §1.3); sentinels keep
    theirs."""
    if not lineage.is_sentinel(task):
        task._source_id = task.get_source_id()
    return task._source_id


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


class RetiredDeltas:
    """``task id -> delta`` of the sources that completed, 8 bytes an entry: a 56-bit hash of
    the task id (Python's, stable within this process) with the delta in the low 8 bits, in a
    sorted ``uint64`` array (a delta outside -128..127 in a small dict instead), plus a dict of
    the newest entries, folded in once it holds 4,096 or 1/32 of the array.

    Only deltas of sources that completed in this run are looked up here (a retried task
    re-sends its deltas), so a hash collision could at worst make one such late delta count as
    a repeat.

    Example:
        >>> retired = RetiredDeltas()
        >>> retired.put_many({"0_a_0": -1, "0_b": 300}.items())
        >>> retired.get("0_a_0"), retired.get("0_b"), retired.get("0_c"), len(retired)
        (-1, 300, None, 2)
    """

    FOLD = 4096

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        self._keys = np.empty(0, dtype=np.uint64)  # (hash << 8) | (delta & 0xFF), sorted
        self._big: dict[int, int] = {}  # hash -> delta, for deltas that need more than 8 bits
        self._recent: dict[int, int] = {}  # hash -> delta, not folded yet

    @staticmethod
    def _hash(task_id: str) -> int:
        return (hash(task_id) & 0xFFFF_FFFF_FFFF_FFFF) >> 8

    def put_many(self, entries: Iterable[tuple[str, int]]) -> None:
        """Record ``(task id, delta)`` pairs (a newer delta for a task id replaces the old)."""
        self._recent.update(((hash(t) & 0xFFFF_FFFF_FFFF_FFFF) >> 8, d) for t, d in entries)
        if len(self._recent) >= max(self.FOLD, len(self._keys) >> 5):
            self._fold()

    def get(self, task_id: str) -> int | None:
        h = self._hash(task_id)
        found = self._recent.get(h)
        if found is None:
            found = self._big.get(h)
        if found is not None or not len(self._keys):
            return found
        at = int(self._keys.searchsorted(self._np.uint64(h << 8)))
        if at < len(self._keys) and int(self._keys[at]) >> 8 == h:
            low = int(self._keys[at]) & 0xFF
            return low - 256 if low > 127 else low
        return None

    def __len__(self) -> int:
        if self._recent:
            self._fold()
        return len(self._keys) + len(self._big)

    def __bool__(self) -> bool:
        return bool(len(self._keys) or self._big or self._recent)

    def _fold(self) -> None:
        np = self._np
        recent, self._recent = self._recent, {}
        hashes = np.fromiter(recent, dtype=np.uint64, count=len(recent))
        deltas = np.fromiter(recent.values(), dtype=np.int64, count=len(recent))
        if len(self._keys):  # newest wins: drop older entries of the same task ids
            at = np.minimum(self._keys.searchsorted(hashes << np.uint64(8)), len(self._keys) - 1)
            old = at[(self._keys[at] >> np.uint64(8)) == hashes]
            self._keys = np.delete(self._keys, old)
        for h in recent.keys() & self._big.keys():
            del self._big[h]
        small = (deltas >= -128) & (deltas <= 127)
        self._big.update(zip(hashes[~small].tolist(), deltas[~small].tolist(), strict=True))
        new = np.sort((hashes[small] << np.uint64(8))
                      | (deltas[small] & 0xFF).astype(np.uint64))
        self._keys = np.insert(self._keys, self._keys.searchsorted(new), new)


class CounterBook:
    """Pending counts per source with NeMo Curator's rules (docs/design/contract.md §3.3).

    - a repeated ``(task_id, delta)`` is ignored (a retried task fires the same deltas);
    - a new delta for a known ``task_id`` replaces the old one (newest wins);
    - a delta for a completed source un-completes it (warning; the caller deletes it from its
      own store) and is otherwise dropped;
    - a source whose count reaches exactly 0 is newly complete.

    Memory: counts and ``(task_id, delta)`` entries are kept per source only until it
    completes; then its count is dropped, its entries move to :class:`RetiredDeltas` (8 bytes
    each), and its id joins ``completed``, a ``CompletedSet`` (8 bytes for a hex or decimal id).

    Example:
        >>> book = CounterBook()
        >>> book.apply([("0_a", "a", 1), ("0_a_0", "a", 0)])
        ([], [])
        >>> book.apply([("0_a_0_0", "a", -1)])
        (['a'], [])
        >>> sorted(book.completed), book.applied, book.applied_delta("0_a_0_0")
        (['a'], {}, -1)
    """

    def __init__(self, completed: Iterable[str] = ()) -> None:
        from curator_dask.resumability.completed_set import CompletedSet

        self.pending: dict[str, int] = {}
        self.completed = completed if isinstance(completed, CompletedSet) else CompletedSet(
            completed)
        self.entries: dict[str, dict[str, int]] = {}  # source id -> {task id: delta}, live
        self.retired = RetiredDeltas()  # the entries of sources that completed
        self._revived: set[str] = set()  # un-completed sources with retired entries

    @property
    def applied(self) -> dict[str, int]:
        """``{task id: delta}`` of the sources that have not completed (a copy)."""
        return {t: d for entries in self.entries.values() for t, d in entries.items()}

    def applied_delta(self, task_id: str, sid: str | None = None) -> int | None:
        """The delta recorded for ``task_id`` (live or retired), or None."""
        for entries in ([self.entries.get(sid, {})] if sid is not None
                        else self.entries.values()):
            if task_id in entries:
                return entries[task_id]
        return self.retired.get(task_id)

    def apply(self, deltas: Iterable[Delta], *, opening: bool = False
              ) -> tuple[list[str], list[str]]:
        """Apply deltas; return ``(newly completed, un-completed)`` source ids, in order.

        ``opening``: the caller has found none of these sources complete (``open_sources``
        checks a whole batch at once), so only completions within the call are looked up.
        The sources completed by the call join ``completed`` and ``retired`` at its end, in
        one vectorised step.
        """
        newly_done: list[str] = []
        uncompleted: list[str] = []
        finished: dict[str, dict[str, int]] = {}  # completed in this call: its entries
        for task_id, sid, delta in deltas:
            pending = self.pending.get(sid)
            done = pending is None and (sid in finished or (
                not opening and sid in self.completed))
            entries = self.entries.get(sid)
            existing = None if entries is None else entries.get(task_id)
            if existing is None and (done or sid in self._revived):
                existing = finished.get(sid, {}).get(task_id)
                if existing is None:
                    existing = self.retired.get(task_id)
            if existing is not None and existing == delta:
                continue
            if done:
                self._uncomplete(task_id, sid, delta, newly_done, uncompleted)
                if sid in finished:  # its entries are looked up in ``retired`` from now on
                    self.retired.put_many(finished.pop(sid).items())
                continue
            if entries is None:
                entries = self.entries[sid] = {}
            entries[task_id] = delta
            count = (pending or 0) - (existing or 0) + delta
            if count != 0:
                self.pending[sid] = count
                continue
            self.pending.pop(sid, None)
            if sid in uncompleted:
                uncompleted.remove(sid)  # it was recorded complete before: keep it there
            else:
                newly_done.append(sid)
            finished[sid] = self.entries.pop(sid)
        if finished:
            self.completed.add_absent_many(list(finished))
            self.retired.put_many(item for entries in finished.values()
                                  for item in entries.items())
            self._revived.difference_update(finished)
        return newly_done, uncompleted

    def _uncomplete(self, task_id: str, sid: str, delta: int, newly_done: list[str],
                    uncompleted: list[str]) -> None:
        logger.warning(
            "resumability: delta %s for %s arrived after source %s completed. Removing "
            "it from the completed set; it will be replayed.", delta, task_id, sid,
        )
        self.completed.discard(sid)
        self._revived.add(sid)
        # The two lists stay disjoint, so their order of application cannot matter.
        if sid in newly_done:
            newly_done.remove(sid)
        else:
            uncompleted.append(sid)

    def reopen(self, sids: Iterable[str]) -> None:
        """Process ``sids`` again although complete (their input changed): they leave
        ``completed``, and count again from their next delta."""
        for sid in sids:
            if sid in self.completed:
                self.completed.discard(sid)
                if self.retired:  # it may have completed in this run: keep its entries
                    self._revived.add(sid)

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
