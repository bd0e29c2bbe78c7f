"""A drain never lets a chain start after the stop, even one already sent to its worker.

The race (tests/cli/test_drain.py failed on CI with 2 outputs and 1 recorded completion): the
drain asks the workers what runs, then cancels the chains none of whose tasks ran. A chain that
ran there ended in the moment between the two, and the worker started the queued chain next; a
Dask cancel does not stop a task already executing, so that chain wrote its output after the
run had ended and closed its checkpoint: an output that was never recorded complete.

The test forces that ordering with real parts (one LocalCluster worker with one thread, real
LMDB checkpoint, real files). Its one interposition, named here as an ordering hook (not a
fake): ``Client.cancel`` of the drain is held until the worker has started the queued chain's
Dask task, the order the CI machine produced by chance. Stages hold each batch until the test
creates that batch's release file, so the order is set by files, not by time.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from distributed import Client

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.backends.dask.stop import request_stop
from curator_dask.errors import RunStopped
from curator_dask.sample_data import generate_jsonl
from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import DocumentBatch
from tests.helpers import completed_ids, poll_for

pytestmark = pytest.mark.slow

SOURCES = 4


@dataclass
class HoldEach(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Appends its batch's task id to ``marker``, then holds the batch until the file
    ``<directory>/<task id>.release`` exists."""

    marker: str = ""
    directory: str = ""
    name: str = "hold_each"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        with open(self.marker, "a") as f:
            f.write(task.task_id + "\n")
        release = os.path.join(self.directory, f"{task.task_id}.release")
        while not os.path.exists(release):
            time.sleep(0.02)
        return task


def worker_states(dask_worker=None) -> dict[str, str]:
    """Every task the worker knows, with its state (``client.run`` calls it there)."""
    return {str(key): ts.state for key, ts in dask_worker.state.tasks.items()}


def started_ids(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


# the drain thread must not fail when the run ended (and its client closed) before its cancel
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "a-group-per-stage"])
def test_a_chain_queued_on_the_worker_never_starts_after_the_stop(tmp_path, monkeypatch, fuse):
    """Fused, the queued chain is one task that the worker starts before the cancel arrives.
    A group per stage, the running chain's later groups start after the stop (admitted: it was
    running), and the queued chain's do not."""
    inputs = generate_jsonl(str(tmp_path / "input"), files=SOURCES, docs_per_file=2, seed=3)
    marker, out, ckpt = tmp_path / "started.log", tmp_path / "output", tmp_path / "ckpt"
    pipeline = (Pipeline(name="drain-race")
                .add_stage(JsonlReader(file_paths=inputs, files_per_partition=1))
                .add_stage(HoldEach(marker=str(marker), directory=str(tmp_path)))
                .add_stage(JsonlWriter(path=str(out))))
    outcome: dict[str, BaseException | object] = {}
    original_cancel = Client.cancel
    held: list[list[str]] = []

    def cancel_once_the_queued_chain_started(self, futures, *args, **kwargs):
        """Ordering hook: the chain that held the worker's one thread is released, and the
        drain's cancel goes out only once the worker has started the next chain's task."""
        keys = [str(f.key) for f in futures]
        if not held:
            held.append(keys)
            (first,) = started_ids(marker)
            (tmp_path / f"{first}.release").touch()

            def queued_task_started() -> bool:
                # The gate refuses the queued chain at once (it returns NotStarted), and the
                # run may collect it and the worker forget its key before a look there sees
                # it: its future has finished then, or the run has ended.
                if "run" in outcome or any(f.status in ("finished", "error") for f in futures):
                    return True
                try:
                    states = {k: s for per in self.run(worker_states).values()
                              for k, s in per.items()}
                except AttributeError:  # the client closed: only after the run ended
                    if "run" in outcome:
                        return True
                    raise
                return any(states.get(k) in ("executing", "long-running", "memory")
                           for k in keys)

            poll_for(queued_task_started, 60, "the worker never started the queued chain")
        return original_cancel(self, futures, *args, **kwargs)

    monkeypatch.setattr(Client, "cancel", cancel_once_the_queued_chain_started)
    # one worker thread, two chains in flight: one runs, the next waits on the worker
    with DaskExecutor(n_workers=1, threads_per_worker=1, max_in_flight=2, fuse=fuse,
                      progress=False) as executor:

        def run() -> None:
            try:
                outcome["run"] = pipeline.run(executor=executor, checkpoint_path=str(ckpt))
            except BaseException as exc:  # noqa: BLE001 (the test inspects it)
                outcome["run"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        poll_for(lambda: started_ids(marker), 120, "no chain started")
        assert request_stop("test stop", executor=executor) == 1
        thread.join(timeout=120)
        assert not thread.is_alive(), "the stopped run did not end"
        assert held, "the drain cancelled nothing: no chain was queued"
        # whatever started may end now: every batch is released, the cluster still lives
        for task_id in started_ids(marker):
            (tmp_path / f"{task_id}.release").touch()

        def run_tasks_left() -> bool:
            states = executor.client.run(worker_states).values()
            return not any(s in ("executing", "long-running") for per in states
                           for s in per.values())

        poll_for(run_tasks_left, 60, "tasks of the run still executing on the worker")
    stopped = outcome["run"]
    assert isinstance(stopped, RunStopped), repr(stopped)
    written = sorted(os.listdir(out)) if out.exists() else []
    assert len(written) == len(completed_ids(ckpt)) == 1, (written, completed_ids(ckpt))
    assert started_ids(marker) == started_ids(marker)[:1], (
        f"a chain started after the stop: {started_ids(marker)}")
    assert str(stopped).startswith("test stop: stopped after 1 of 4 source partitions"), (
        str(stopped))
