"""The workers' side of stage checkpoints: restore a source at the first fusion group, save its
outputs where a group ends at a boundary.

:class:`CheckpointRuntime` is made by the driver's planner and travels to every worker inside
the run's ``StageHost`` (``backends/dask/worker.py``), whose ``run_group`` calls it:

- the first group takes each source's input digest (:meth:`~CheckpointRuntime.note_inputs`)
  and replaces the sources the driver gave candidates for by their deepest usable entry
  (:meth:`~CheckpointRuntime.restore`): the entry's tasks are parked for the group after its
  boundary, and its stored deltas join the Dask task's ``DeltaLog``, so the counter sees
  exactly the deltas a full replay would have sent;
- a group that ends at a boundary runs source by source
  (:meth:`~CheckpointRuntime.run_per_source`), keeping each source's deltas, and saves what
  each source produced, unless it saw a ``FailedTask``.

A checkpoint is an optimization: an entry that does not verify, or a save that fails, is a
warning (a note, which the driver turns into a ``warning`` event), never an error.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from curator_dask.resumability.counters import DeltaLog
from curator_dask.resumability.stage_checkpoints.records import (
    Boundary,
    Candidate,
    CheckpointRecord,
)
from curator_dask.resumability.stage_checkpoints.store import (
    CheckpointUnusable,
    StageCheckpointStore,
    source_input_digest,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from curator_dask.backends.counts import StageCount
    from curator_dask.tasks import Task

    Batches = list[list[Task]]
    # a fusion group's stages over some batches: (their outputs, one StageCount per stage)
    RunStages = Callable[[Batches, DeltaLog], tuple[Batches, list[StageCount]]]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class CheckpointRuntime:
    """What a worker needs: the store and, per fusion group index, its boundary (if any).

    Example:
        >>> import pyarrow as pa
        >>> from curator_dask.tasks import DocumentBatch
        >>> batch = DocumentBatch(dataset_name="d", data=pa.table({"text": ["a", "b"]}))
        >>> batch.task_id, batch._source_id = "0_s", "s"
        >>> runtime = CheckpointRuntime(StageCheckpointStore("memory://on-worker-doc/ckpt"),
        ...                             {0: Boundary(1, "f00d", "filter")})
        >>> first = CheckpointRecord()
        >>> runtime.run_per_source(0, [[batch]], lambda b, log: (b, []), [], None, first,
        ...                        failed=set())
        [[DocumentBatch(task_id='0_s', dataset_name='d', num_items=2)]]
        >>> first.totals.saved[1].entries
        1
        >>> again = CheckpointRecord()  # a later run of the same source resumes from it
        >>> kept, parked = runtime.restore([[batch]], {"s": [Candidate(0, 1, "f00d",
        ...     "s--001-f00d")]}, None, again)
        >>> kept, [(group, len(batches)) for group, batches in parked], again.totals.loaded
        ([], [(1, 1)], {1: 1})
    """

    store: StageCheckpointStore
    boundaries: dict[int, Boundary]  # fusion group index -> its checkpointed last stage

    def note_inputs(self, batches: Batches, record: CheckpointRecord) -> None:
        """The first group: the digest of each source's input files."""
        for batch in batches:
            for task in batch:
                record.inputs[task._source_id] = source_input_digest(task)

    def restore(self, batches: Batches, resume: dict[str, list[Candidate]],
                deltas: DeltaLog | None, record: CheckpointRecord,
                ) -> tuple[Batches, list[tuple[int, Batches]]]:
        """Replace the sources that have a usable entry by its contents (deepest first).

        Returns the batches still to run from the source, and the restored ones as
        ``(index of the group that takes them next, batches)``.
        """
        keep: Batches = []
        parked: list[tuple[int, Batches]] = []
        for batch in batches:
            sid = batch[0]._source_id if batch else ""
            for candidate in sorted(resume.get(sid, ()), reverse=True):
                group, stage, fingerprint, name = candidate
                try:
                    restored, saved = self.store.load(name, fingerprint, record.inputs.get(sid))
                except CheckpointUnusable as exc:
                    stage_name = self._stage_name(group, stage)
                    note = (f"stage checkpoint after {stage_name!r} for source {sid} is "
                            f"unusable ({exc}); falling back to an earlier boundary or the "
                            "source")
                    logger.warning(note)
                    record.totals.notes.append(note)
                    continue
                parked.append((group + 1, restored))
                if deltas is not None:
                    deltas.deltas.extend(saved)
                record.history[sid] = list(saved)
                record.totals.loaded_one(stage)
                break
            else:
                keep.append(batch)
        return keep, parked

    def run_per_source(self, group_index: int, batches: Batches, run: RunStages,
                       totals: list[StageCount], deltas: DeltaLog | None,
                       record: CheckpointRecord, *, failed: set[str]) -> Batches:
        """Run the group (``run``) source by source, keeping each source's deltas; save each
        source's outputs when the group ends at a boundary.

        ``totals`` (one per stage of the group) get every source's counts; ``failed`` the
        sources that saw a ``FailedTask`` (those are not saved: a source must not be
        checkpointed partially). Returns the outputs of every source, in order.
        """
        by_source: dict[str, Batches] = {}
        for batch in batches:
            by_source.setdefault(batch[0]._source_id if batch else "", []).append(batch)
        boundary = self.boundaries.get(group_index)
        produced: Batches = []
        for sid, own in by_source.items():
            log = DeltaLog()
            result, counts = run(own, log)
            for total, count in zip(totals, counts, strict=True):
                total.merge(count)
            produced.extend(result)
            if deltas is not None:
                deltas.extend(log)
            failed.update(log.failed)
            history = record.add_history(sid, log.deltas)
            if boundary is None or sid in failed or not sid:
                continue
            self._save(sid, boundary, result, history, record)
        return produced

    def _save(self, sid: str, boundary: Boundary, result: Batches, history: list,
              record: CheckpointRecord) -> None:
        start = time.perf_counter()
        try:
            _, size = self.store.save(sid, boundary.stage, boundary.fingerprint,
                                      boundary.stage_name, result, history,
                                      record.inputs.get(sid))
        except Exception as exc:  # noqa: BLE001 (a checkpoint is an optimization)
            note = (f"could not save the stage checkpoint after {boundary.stage_name!r} for "
                    f"{sid}: {exc}")
            logger.warning(note)
            record.totals.notes.append(note)
            return
        record.totals.saved_one(boundary.stage, size=size, seconds=time.perf_counter() - start)

    def _stage_name(self, group: int, stage: int) -> str:
        """The name of a candidate's boundary stage (its group's boundary)."""
        boundary = self.boundaries.get(group)
        return boundary.stage_name if boundary is not None else f"stage {stage}"
