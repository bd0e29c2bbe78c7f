"""A stop belongs to a run (docs/design/architecture.md, "The stop path"): two runs on one
entered ``DaskExecutor`` (two threads, real LocalCluster, real job folders) are stopped one at
a time through the job's stop-request file, which ends at that run's own ``StopSignal``; the
other run goes on to completion. Each run holds its partitions in flight until the test
creates its release file, so both are in flight when the stop comes (no sleeps, no time
bounds: the test waits for files and states).
"""

from __future__ import annotations

import os
import threading

import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.backends.dask.stop import RUNS
from curator_dask.errors import RunStopped
from curator_dask.jobs.control import request_stop
from curator_dask.jobs.summary import STOP_REQUEST, SUMMARY_FILE, read_summary
from curator_dask.sample_data import generate_jsonl
from tests.backends.dask_test_stages import WaitFor
from tests.helpers import poll_for

pytestmark = pytest.mark.slow

SOURCES = 4


def _pipeline(tmp_path, name: str) -> Pipeline:
    inputs = generate_jsonl(str(tmp_path / f"in-{name}"), files=SOURCES, docs_per_file=2,
                            seed=len(name))
    return (Pipeline(name=name)
            .add_stage(JsonlReader(file_paths=inputs, files_per_partition=1))
            .add_stage(WaitFor(marker=str(tmp_path / f"{name}.started"),
                               path=str(tmp_path / f"{name}.release")))
            .add_stage(JsonlWriter(path=str(tmp_path / f"out-{name}"))))


def test_a_stop_of_one_run_through_its_job_leaves_the_other_run_to_complete(tmp_path):
    work = str(tmp_path / "jobs")
    outcome: dict[str, object] = {}

    def run(name: str) -> None:
        try:
            outcome[name] = _pipeline(tmp_path, name).run(
                executor=executor, work_dir=work, job_id=f"stop-{name}")
        except BaseException as exc:  # noqa: BLE001 (the test inspects it)
            outcome[name] = exc

    # one chain in flight per run: each run has a partition running on the 2 workers
    with DaskExecutor(n_workers=2, max_in_flight=1, progress=False) as executor:
        threads = {n: threading.Thread(target=run, args=(n,)) for n in ("first", "second")}
        for thread in threads.values():
            thread.start()
        poll_for(lambda: all((tmp_path / f"{n}.started").exists() for n in threads), 120,
                 "both runs processing a partition")
        in_progress = RUNS.of(executor)
        assert len(in_progress) == 2 and not any(s.requested for s in in_progress)

        request_stop(os.path.join(work, "stop-first"))  # what `stop stop-first` writes
        poll_for(lambda: not os.path.exists(os.path.join(work, "stop-first", STOP_REQUEST)),
                 60, "the first job obeyed its stop request")  # removed once obeyed
        assert sorted(s.requested for s in RUNS.of(executor)) == [False, True]
        (tmp_path / "first.release").touch()  # its running partition finishes: the drain ends
        threads["first"].join(timeout=120)
        assert not threads["first"].is_alive(), "the stopped run did not end"

        # the second run is still in progress, its stop untouched, its partition held
        assert threads["second"].is_alive()
        (second,) = RUNS.of(executor)
        assert not second.requested
        (tmp_path / "second.release").touch()
        threads["second"].join(timeout=240)
        assert not threads["second"].is_alive(), "the second run did not end"
    assert RUNS.of(executor) == []

    stopped = outcome["first"]
    assert isinstance(stopped, RunStopped), repr(stopped)
    assert str(stopped).startswith("stop requested with `python -m curator_dask stop`: "
                                   "stopped after 1 of 4 source partitions"), str(stopped)
    completed = outcome["second"]
    assert not isinstance(completed, BaseException), repr(completed)
    assert completed.num_sources == SOURCES and len(completed) == SOURCES
    assert len(os.listdir(tmp_path / "out-second")) == SOURCES
    states = {n: read_summary(os.path.join(work, f"stop-{n}", SUMMARY_FILE))["state"]
              for n in threads}
    assert states == {"first": "stopped", "second": "completed"}
