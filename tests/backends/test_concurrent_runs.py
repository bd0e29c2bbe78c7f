"""Several runs on one ``DaskExecutor`` at once, and an executor used from several threads.

Real LocalCluster processes and real files. Each run has its own stop signal: the end of one run
(which releases its drain thread) must not stop another, and ``request_stop`` reaches every run
in progress. A ``Client`` entered as a context manager in one thread cannot be closed in another
(its ``ContextVar``), so the executor never enters it.
"""

from __future__ import annotations

import os
import threading

import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.errors import RunStopped
from curator_dask.sample_data import generate_jsonl
from tests.backends.dask_test_stages import Interval
from tests.helpers import poll_for

pytestmark = pytest.mark.slow

SOURCES = 24


def _pipeline(tmp_path, name: str, seconds: float) -> tuple[Pipeline, str]:
    inputs = generate_jsonl(str(tmp_path / f"in-{name}"), files=SOURCES, docs_per_file=2,
                            seed=len(name))
    out = str(tmp_path / f"out-{name}")
    pipeline = (Pipeline(name=name)
                .add_stage(JsonlReader(file_paths=inputs, files_per_partition=1))
                .add_stage(Interval(log=str(tmp_path / f"{name}.log"), seconds=seconds))
                .add_stage(JsonlWriter(path=out)))
    return pipeline, out


def _in_threads(*jobs):
    """Run each ``job()`` in its own thread; returns ``{index: result or exception}``."""
    outcome: dict[int, object] = {}

    def call(i, job):
        try:
            outcome[i] = job()
        except BaseException as exc:  # noqa: BLE001 (the test inspects it)
            outcome[i] = exc

    threads = [threading.Thread(target=call, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not any(t.is_alive() for t in threads), "a run did not end"
    return outcome


def test_two_runs_at_once_on_one_entered_executor_both_complete(executor, tmp_path):
    """The short run ends first; the long one still processes all of its sources (before
    the fix it returned normally with a few of its 24 sources done: the first run's end set
    the executor's shared stop). The shared executor (tests/conftest.py) is an entered one."""
    short, short_out = _pipeline(tmp_path, "short", 0.0)
    long, long_out = _pipeline(tmp_path, "long", 0.05)
    outcome = _in_threads(lambda: long.run(executor=executor),
                          lambda: short.run(executor=executor))
    for i, out in ((0, long_out), (1, short_out)):
        result = outcome[i]
        assert not isinstance(result, BaseException), repr(result)
        assert result.num_sources == SOURCES
        assert len(result) == SOURCES
        assert len(os.listdir(out)) == SOURCES


def test_two_runs_at_once_on_an_executor_that_is_not_entered(tmp_path):
    """Without ``with``, the cluster closes when the last run ends, not under the other run."""
    short, _ = _pipeline(tmp_path, "short", 0.0)
    long, long_out = _pipeline(tmp_path, "long", 0.05)
    executor = DaskExecutor(n_workers=2, progress=False)
    executor.start()
    outcome = _in_threads(lambda: long.run(executor=executor),
                          lambda: short.run(executor=executor))
    assert [len(outcome[i]) for i in (0, 1)] == [SOURCES, SOURCES], outcome
    assert len(os.listdir(long_out)) == SOURCES
    assert executor.cluster is None  # closed after the last run


def test_request_stop_reaches_every_run_in_progress(tmp_path):
    first, _ = _pipeline(tmp_path, "first", 0.3)
    second, _ = _pipeline(tmp_path, "second", 0.3)
    # an executor of its own: request_stop stops every run in progress on it
    with DaskExecutor(n_workers=2, progress=False) as executor:
        jobs = (lambda: first.run(executor=executor), lambda: second.run(executor=executor))
        stopper = threading.Thread(target=lambda: (
            poll_for(lambda: all((tmp_path / f"{n}.log").exists() for n in ("first", "second")),
                     120, "both runs processing"),
            executor.request_stop("test stop")))
        stopper.start()
        outcome = _in_threads(*jobs)
        stopper.join(timeout=60)
    for result in outcome.values():
        assert isinstance(result, RunStopped), repr(result)
        assert "test stop" in str(result)


def test_started_in_one_thread_run_in_another_closed_in_a_third(tmp_path):
    """Before the fix: every output written, then ``ValueError: <Token ...> was created in a
    different Context`` when the executor closed."""
    pipeline, out = _pipeline(tmp_path, "threads", 0.0)
    executor = DaskExecutor(n_workers=1, progress=False)
    started = _in_threads(lambda: executor.__enter__())
    assert started[0] is executor
    ran = _in_threads(lambda: pipeline.run(executor=executor))
    assert len(ran[0]) == SOURCES, repr(ran[0])
    closed = _in_threads(lambda: executor.__exit__(None, None, None))
    assert closed[0] is None, repr(closed[0])
    assert executor.cluster is None
    assert len(os.listdir(out)) == SOURCES


def test_a_run_that_starts_its_executor_in_a_thread(tmp_path):
    """A plain executor started, run and closed by ``Pipeline.run`` in a worker thread."""
    pipeline, out = _pipeline(tmp_path, "own", 0.0)
    executor = DaskExecutor(n_workers=1, progress=False)
    ran = _in_threads(lambda: pipeline.run(executor=executor))
    assert len(ran[0]) == SOURCES, repr(ran[0])
    assert executor.cluster is None
