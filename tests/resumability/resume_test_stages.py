"""Stages for the resumability end-to-end tests (importable by worker processes)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import pyarrow as pa

from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import DocumentBatch, FailedTask


def first_id(task: DocumentBatch) -> str:
    return task.to_pyarrow()["id"][0].as_py()


@dataclass
class FailSoftOn(ProcessingStage[DocumentBatch, DocumentBatch]):
    """FailedTask() for batches whose first id is in ``bad_ids``."""

    bad_ids: tuple[str, ...] = ()
    name: str = "fail_soft_on"

    def process(self, task: DocumentBatch):
        return FailedTask() if first_id(task) in self.bad_ids else task


@dataclass
class DropIds(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Filter: None for batches whose first id is in ``ids``."""

    ids: tuple[str, ...] = ()
    name: str = "drop_ids"

    def process(self, task: DocumentBatch):
        return None if first_id(task) in self.ids else task


@dataclass
class Rows(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Fan-out: one batch per row (keeps source_files, so writer names stay deterministic)."""

    name: str = "rows"

    def process(self, task: DocumentBatch) -> list[DocumentBatch]:
        t = task.to_pyarrow()
        return [DocumentBatch(dataset_name=task.dataset_name, data=t.slice(i, 1),
                              _metadata=task._metadata) for i in range(t.num_rows)]


@dataclass
class MergePairs(ProcessingStage[DocumentBatch, DocumentBatch]):
    """M→K batch stage: concatenates each batch of 2 into 1 task (ambiguous lineage)."""

    batch_size: int | None = 2
    name: str = "merge_pairs"

    def process_batch(self, tasks: list[DocumentBatch]) -> list[DocumentBatch]:
        table = pa.concat_tables([t.to_pyarrow() for t in tasks])
        return [DocumentBatch(dataset_name=tasks[0].dataset_name, data=table)]


@dataclass
class KillWorkerOnce(ProcessingStage[DocumentBatch, DocumentBatch]):
    """SIGKILLs its own worker process the first time it sees ``victim_id`` (marker file)."""

    victim_id: str = ""
    marker: str = ""
    name: str = "kill_worker_once"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        if first_id(task) == self.victim_id and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return task


@dataclass
class SendMalformedDeltas(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Sabotage: sends a malformed message on the completion topic for this run, through the
    real worker-to-scheduler event path, to check that plugin errors fail the run."""

    name: str = "send_malformed_deltas"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        from distributed import get_worker

        worker = get_worker()
        prefix = "curator-dask-stages-"
        run_id = next(n[len(prefix):] for n in worker.plugins if n.startswith(prefix))
        worker.log_event("curator-dask-deltas", {"run": run_id, "deltas": [["only-one-field"]]})
        return task


def record_call(calls_dir: str, stage: str, task) -> None:
    """One empty file per call: ``<stage>--<source id>--<pid>-<n>`` (counted by the tests)."""
    import uuid

    os.makedirs(calls_dir, exist_ok=True)
    name = f"{stage}--{task._source_id or 'none'}--{os.getpid()}-{uuid.uuid4().hex[:8]}"
    open(os.path.join(calls_dir, name), "w").close()


@dataclass
class Cheap(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Upper-cases ``text``; records each call in ``calls_dir``."""

    calls_dir: str = ""
    name: str = "cheap"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        record_call(self.calls_dir, self.name, task)
        t = task.to_pyarrow()
        import pyarrow.compute as pc

        t = t.set_column(t.schema.get_field_index("text"), "text", pc.utf8_upper(t["text"]))
        return DocumentBatch(dataset_name=task.dataset_name, data=t, _metadata=task._metadata)


@dataclass
class Expensive(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Adds a ``length`` column; records each call. While ``gate`` names a missing file, it
    blocks (sleeps) on batches whose first id is not in ``free_ids``: a run to kill mid-stage."""

    calls_dir: str = ""
    gate: str = ""
    free_ids: tuple[str, ...] = ()
    name: str = "expensive"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        import time

        record_call(self.calls_dir, self.name, task)
        while self.gate and not os.path.exists(self.gate) and first_id(task) not in self.free_ids:
            time.sleep(0.05)
        t = task.to_pyarrow()
        import pyarrow.compute as pc

        t = t.append_column("length", pc.utf8_length(t["text"]))
        return DocumentBatch(dataset_name=task.dataset_name, data=t, _metadata=task._metadata)
