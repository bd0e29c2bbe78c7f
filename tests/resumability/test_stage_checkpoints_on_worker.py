"""The workers' side of stage checkpoints (``stage_checkpoints/on_worker.py``) without a cluster:
real stages through real ``StageAdapter``s, a real store in ``tmp_path``, the typed records.

What a run's ``StageHost`` does in the first group and at a boundary: save each source's
outputs with its deltas, restore the deepest entry that verifies (an unusable deeper one is a
note, not an error), never save a source that saw a ``FailedTask``, and turn a failed save
into a note.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import partial

import pyarrow as pa

from curator_dask.backends.counts import StageCount
from curator_dask.backends.dask.adapter import StageAdapter, run_stages
from curator_dask.resumability.counters import DeltaLog
from curator_dask.resumability.stage_checkpoints import (
    MANIFEST,
    SUBDIR,
    Boundary,
    Candidate,
    CheckpointRecord,
    CheckpointRuntime,
    SavedTotals,
    StageCheckpointStore,
    entry_name,
)
from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import DocumentBatch, FailedTask


@dataclass
class Upper(ProcessingStage[DocumentBatch, DocumentBatch]):
    name: str = "upper"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        text = [t.upper() for t in task.to_pyarrow()["text"].to_pylist()]
        return DocumentBatch(dataset_name=task.dataset_name, data=pa.table({"text": text}),
                             _metadata=dict(task._metadata))


@dataclass
class FailSource(ProcessingStage[DocumentBatch, DocumentBatch]):
    """A ``FailedTask`` for the batches of source ``bad``."""

    bad: str = ""
    name: str = "fail_source"

    def process(self, task: DocumentBatch) -> DocumentBatch | FailedTask:
        return FailedTask() if task._source_id == self.bad else task


def source(sid: str, *texts: str) -> list[DocumentBatch]:
    batch = DocumentBatch(dataset_name="d", data=pa.table({"text": list(texts)}))
    batch.task_id, batch._source_id = f"0_{sid}", sid
    return [batch]


def runtime(tmp_path, boundaries: dict[int, Boundary]) -> CheckpointRuntime:
    return CheckpointRuntime(StageCheckpointStore(str(tmp_path / "ckpt")), boundaries)


def run_group(ck: CheckpointRuntime, group: int, stages, batches, record: CheckpointRecord,
              failed: set[str] | None = None) -> tuple[list, list[StageCount], DeltaLog]:
    adapters = [StageAdapter(s) for s in stages]
    totals = [StageCount() for _ in adapters]
    deltas = DeltaLog()
    out = ck.run_per_source(group, batches, partial(run_stages, adapters), totals, deltas,
                            record, failed=set() if failed is None else failed)
    return out, totals, deltas


def test_a_saved_source_is_restored_for_the_next_group_with_its_deltas(tmp_path):
    ck = runtime(tmp_path, {0: Boundary(1, "fp1", "upper")})
    first = CheckpointRecord()
    ck.note_inputs([source("s1", "a", "b")], first)
    out, totals, deltas = run_group(ck, 0, [Upper()], [source("s1", "a", "b")], first)
    assert out[0][0].to_pyarrow()["text"].to_pylist() == ["A", "B"]
    assert totals[0].calls == 1 and first.totals.saved[1].entries == 1
    assert first.totals.saved[1].bytes > 0 and first.history["s1"] == deltas.deltas

    again, resumed = CheckpointRecord(), DeltaLog()
    ck.note_inputs([source("s1", "a", "b")], again)
    kept, parked = ck.restore([source("s1", "a", "b")],
                              {"s1": [Candidate(0, 1, "fp1", entry_name("s1", 1, "fp1"))]},
                              resumed, again)
    assert kept == [] and [group for group, _ in parked] == [1]
    assert parked[0][1][0][0].to_pyarrow()["text"].to_pylist() == ["A", "B"]
    assert resumed.deltas == deltas.deltas == again.history["s1"]  # replayed, not recomputed
    assert again.totals.loaded == {1: 1} and again.totals.notes == []


def test_an_unusable_deeper_entry_falls_back_to_the_shallower_one(tmp_path):
    ck = runtime(tmp_path, {0: Boundary(1, "fp1", "upper"), 1: Boundary(2, "fp2", "again")})
    record = CheckpointRecord()
    out, _, _ = run_group(ck, 0, [Upper()], [source("s1", "a")], record)
    run_group(ck, 1, [Upper(name="again")], out, record)
    deeper = entry_name("s1", 2, "fp2")
    (tmp_path / "ckpt" / SUBDIR / deeper / MANIFEST).unlink()  # as a save cut short leaves it

    again = CheckpointRecord()
    candidates = [Candidate(0, 1, "fp1", entry_name("s1", 1, "fp1")),
                  Candidate(1, 2, "fp2", deeper)]
    kept, parked = ck.restore([source("s1", "a")], {"s1": candidates}, None, again)
    assert kept == [] and [group for group, _ in parked] == [1]  # after the shallower boundary
    assert again.totals.loaded == {1: 1}
    [note] = again.totals.notes
    assert "after 'again' for source s1 is unusable (no manifest" in note
    assert "falling back" in note


def test_a_source_that_saw_a_failed_task_is_not_saved(tmp_path):
    ck = runtime(tmp_path, {0: Boundary(1, "fp1", "fail_source")})
    record, failed = CheckpointRecord(), set()
    run_group(ck, 0, [FailSource(bad="s2")], [source("s1", "a"), source("s2", "b")], record,
              failed)
    assert failed == {"s2"}
    assert list(record.totals.saved) == [1] and record.totals.saved[1].entries == 1  # s1 only
    assert sorted(ck.store.listing()) == ["s1"]
    assert sorted(record.history) == ["s1", "s2"]  # both sources' deltas are still kept


def test_a_save_that_fails_is_a_note_and_the_outputs_still_go_on(tmp_path):
    ck = runtime(tmp_path, {0: Boundary(1, "fp1", "upper")})
    record = CheckpointRecord()
    batches = source("s1", "a")
    batches[0]._metadata["lock"] = threading.Lock()  # the task shells do not pickle
    out, totals, _ = run_group(ck, 0, [Upper()], [batches], record)
    assert out[0][0].to_pyarrow()["text"].to_pylist() == ["A"] and totals[0].tasks_out == 1
    assert record.totals.saved == {}
    [note] = record.totals.notes
    assert note.startswith("could not save the stage checkpoint after 'upper' for s1:")


def test_each_group_works_on_a_copy_of_the_record():
    record = CheckpointRecord(history={"s": [("0_s", "s", 1)]}, inputs={"s": None})
    record.totals.saved_one(1, size=10, seconds=0.5)
    copy = record.copy()
    copy.add_history("s", [("0_s_0", "s", -1)])
    copy.totals.saved_one(1, size=5, seconds=0.5)
    copy.totals.notes.append("a note")
    assert record.history == {"s": [("0_s", "s", 1)]}
    assert record.totals.saved == {1: SavedTotals(1, 10, 0.5)} and record.totals.notes == []
    assert copy.totals.saved == {1: SavedTotals(2, 15, 1.0)}
