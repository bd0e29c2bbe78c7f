"""``SourceStream`` without a cluster: a fake client whose futures the test completes by hand.

The stream is given what it uses (client, plan, sources, stop signal, settings, a sink), so it
can be driven here in a thread while the test decides, future by future, what finishes, what
is cancelled and when the scheduler goes away. ``FakeClient``, ``FakeFuture`` and
``FakeCompletions`` are fakes (named so): what they stand in for (a Dask scheduler and its
futures) is exercised for real by tests/backends/test_executor.py and the stop tests. No
wall-clock assertions: every wait polls for a state, every assertion is on order and counts.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from curator_dask.backends.dask.plan import build_plan
from curator_dask.backends.dask.stop import StopSignal
from curator_dask.backends.dask.streaming import (
    SourceStream,
    StreamResult,
    StreamSettings,
    StreamSink,
)
from curator_dask.backends.dask.worker import GroupResult, PackedSources
from curator_dask.errors import RunStopped, SchedulerLostError
from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import FileGroupTask
from tests.helpers import poll_for

RUN_ID = "0123456789ab"


class FakeFuture:
    """A fake ``distributed.Future``: a key and a status the test sets."""

    def __init__(self, key: str) -> None:
        self.key, self.status, self.released = key, "pending", False

    def release(self) -> None:
        self.released = True

    def __repr__(self) -> str:
        return f"FakeFuture({self.key}, {self.status})"


@dataclass
class FakeCancelled:
    """What a fake cancelled future yields as its result (Dask's ``CancelledError``)."""

    reason: str | None = None


class FakeCompletions:
    """A fake of ``distributed.as_completed(with_results=True)``: the futures added, and the
    ``(future, result)`` pairs the test made ready."""

    def __init__(self) -> None:
        self.thread_condition = threading.Condition()
        self.waiting: set[FakeFuture] = set()
        self.ready: collections.deque = collections.deque()

    def add(self, future: FakeFuture) -> None:
        with self.thread_condition:
            self.waiting.add(future)

    def finish(self, future: FakeFuture, result: Any, status: str = "finished") -> None:
        with self.thread_condition:
            future.status = status
            self.waiting.discard(future)
            self.ready.append((future, result))
            self.thread_condition.notify_all()

    def has_ready(self) -> bool:
        return bool(self.ready)

    def next_batch(self, block: bool = False) -> list[tuple[FakeFuture, Any]]:
        with self.thread_condition:
            batch = list(self.ready)
            self.ready.clear()
        return batch

    def is_empty(self) -> bool:
        with self.thread_condition:
            return not self.waiting and not self.ready


class FakeClient:
    """A fake ``distributed.Client``: ``submit`` returns a :class:`FakeFuture`; ``cancel``
    completes the chains' last futures as cancelled; ``run`` reports the keys the test says
    are running on a worker."""

    def __init__(self, done: FakeCompletions, threads: int = 2) -> None:
        self.done, self.threads = done, threads
        self.status = "running"
        self.scheduler = None
        self.submitted: list[tuple[FakeFuture, tuple]] = []
        self.cancelled: list[str] = []
        self.running: set[str] = set()
        self.lock = threading.Lock()

    def nthreads(self) -> dict[str, int]:
        return {"tcp://fake-worker:1": self.threads}

    def scheduler_info(self, n_workers: int = -1) -> dict[str, Any]:
        return {"workers": {"tcp://fake-worker:1": {"status": "running", "metrics": {}}}}

    def submit(self, fn: Any, *args: Any, key: str, resources: Any = None,
               pure: bool = True) -> FakeFuture:
        future = FakeFuture(key)
        with self.lock:
            self.submitted.append((future, args))
        return future

    def cancel(self, futures: list[FakeFuture], force: bool = False) -> None:
        for future in futures:
            if future.status != "pending":
                continue
            self.cancelled.append(future.key)
            if future in self.done.waiting:
                self.done.finish(future, FakeCancelled(), status="cancelled")
            else:  # a chain's earlier group
                future.status = "cancelled"

    def run(self, fn: Any) -> dict[str, list[tuple[str, str]]]:
        return {"tcp://fake-worker:1": [(key, "executing") for key in sorted(self.running)]}


@dataclass
class RecordingSink(StreamSink):
    """A sink that records what the stream reported, in order."""

    calls: list[tuple[str, Any]] = field(default_factory=list)

    def first_submit(self) -> None:
        self.calls.append(("first_submit", None))

    def submitted(self, ids: list[str]) -> None:
        self.calls.append(("submitted", tuple(ids)))

    def finished(self, ids: list[str], result: GroupResult) -> None:
        self.calls.append(("finished", tuple(ids)))

    def cut_short(self, n: int) -> None:
        self.calls.append(("cut_short", n))

    def of(self, kind: str) -> list[Any]:
        return [value for name, value in self.calls if name == kind]


class Stage(ProcessingStage):
    def __init__(self, name: str) -> None:
        self.name = name


def plan(groups: int):
    stages = [Stage("src")] + [Stage(f"g{i}") for i in range(groups)]
    stages[0].is_source_stage = True
    built = build_plan(stages, fuse=False)
    assert len(built.groups) == groups
    return built


def sources(n: int) -> list[FileGroupTask]:
    out = []
    for i in range(n):
        task = FileGroupTask(dataset_name="d", data=[f"/in/{i}.jsonl"])
        task._set_task_id("0", i)
        out.append(task)
    return out


class Driven:
    """A stream run in a thread, with its fake client, completions, sink and stop."""

    def __init__(self, n: int, groups: int = 1, **settings: Any) -> None:
        self.done = FakeCompletions()
        self.client = FakeClient(self.done)
        self.sink = RecordingSink()
        self.stop = StopSignal(RUN_ID)
        self.plan = plan(groups)
        settings.setdefault("max_sources_per_task", 1)  # one source per chain
        settings.setdefault("stalled_workers_grace", 3600)
        self.stream = SourceStream(self.client, self.plan, sources(n), host="fake-host",
                                   run_id=RUN_ID, stop=self.stop, sink=self.sink,
                                   settings=StreamSettings(**settings), done=self.done)
        self.outcome: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.outcome["result"] = self.stream.run()
        except BaseException as exc:  # noqa: BLE001 (the test inspects it)
            self.outcome["error"] = exc

    def chains(self) -> list[FakeFuture]:
        """The last future of each chain submitted so far, in order."""
        groups = len(self.plan.groups)
        with self.client.lock:
            futures = [f for f, _ in self.client.submitted]
        return futures[groups - 1::groups]

    def wait_chains(self, n: int) -> list[FakeFuture]:
        poll_for(lambda: len(self.chains()) >= n, 30, f"{n} chains submitted")
        return self.chains()

    def complete(self, future: FakeFuture, task_id: str) -> None:
        task = FileGroupTask(dataset_name="d", data=[])
        task.task_id = task_id + "_0"
        self.done.finish(future, GroupResult(batches=[[task]], seconds=0.01))

    def ended(self) -> dict[str, Any]:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the stream did not end"
        return self.outcome


def source_of(future: FakeFuture) -> str:
    return future.key.rsplit("-", 1)[1]  # <group label>-<run token>-<first task id>


def test_the_window_limits_chains_in_flight_and_each_finished_chain_submits_the_next():
    run = Driven(5, groups=2, window=2)
    run.wait_chains(2)
    assert len(run.client.submitted) == 4  # two chains of two groups; no third chain
    # a chain's second group takes the first group's future as its input
    (head, head_args), (tail, tail_args) = run.client.submitted[:2]
    assert tail_args[3] is head
    # the first group's input: the chunk's source tasks, pickled once (PackedSources)
    assert isinstance(head_args[3], PackedSources)
    [[first]] = head_args[3].group_result().batches
    assert first.task_id == source_of(head)
    assert head.key.startswith("g0-01234567-") and tail.key.startswith("g1-01234567-")
    in_flight = 2
    for n in range(5):
        chains = run.chains()
        assert len(chains) - n == in_flight  # the window is full until sources run out
        run.complete(chains[n], source_of(chains[n]))
        expected = min(5, n + 3)
        if expected > len(chains):
            run.wait_chains(expected)
        else:
            in_flight -= 1
            poll_for(lambda n=n: len(run.sink.of("finished")) == n + 1, 30, "collected")
    result = run.ended()["result"]
    assert isinstance(result, StreamResult) and result.finished == 5
    submitted = run.sink.of("submitted")
    assert [ids for ids in submitted] == [(f"0_{i}",) for i in range(5)]  # in source order
    assert run.sink.of("finished") == submitted  # each chain once, as it finished
    assert run.sink.calls[0] == ("first_submit", None)
    calls = run.sink.calls  # the third chain goes only once the first finished, and so on
    for n in range(3):
        assert calls.index(("submitted", (f"0_{n + 2}",))) > calls.index(("finished",
                                                                           (f"0_{n}",)))
    assert [t.task_id for t in result.outputs] == [f"0_{i}_0" for i in range(5)]
    assert run.client.cancelled == []


def test_a_stop_request_drains_no_new_submission_then_run_stopped():
    run = Driven(6, window=2, drain_timeout=600)
    running, queued = run.wait_chains(2)
    run.client.running = {running.key}  # on a worker now: it may finish
    run.stop.request("test stop")
    poll_for(lambda: run.client.cancelled, 30, "the queued chain cancelled")
    assert run.client.cancelled == [queued.key]  # the running chain is left to finish
    run.complete(running, source_of(running))
    error = run.ended()["error"]
    assert isinstance(error, RunStopped) and str(error) == "test stop"
    assert len(run.chains()) == 2  # nothing submitted after the request
    assert run.sink.of("finished") == [(source_of(running),)]
    assert run.stop.requested and run.stop.reason == "test stop"


def test_chains_cancelled_on_the_scheduler_request_this_streams_own_stop():
    """``stop --force`` cancels the run's keys on the scheduler: the stream sees a chain
    cancelled that no drain cancelled and stops its own run."""
    run = Driven(4, window=2, drain_timeout=600)
    first, second = run.wait_chains(2)
    run.client.running = {second.key}
    run.done.finish(first, FakeCancelled(), status="cancelled")  # as the scheduler did
    poll_for(lambda: run.stop.requested, 30, "the stream's stop requested")
    assert run.stop.reason == "its Dask tasks were cancelled on the scheduler"
    run.complete(second, source_of(second))
    error = run.ended()["error"]
    assert isinstance(error, RunStopped)
    assert str(error) == "its Dask tasks were cancelled on the scheduler"
    assert len(run.chains()) == 2


def test_a_lost_scheduler_is_raised_with_its_reason_and_nothing_is_cancelled():
    run = Driven(4, window=2, scheduler_lost_grace=0)
    run.wait_chains(2)
    run.client.status = "connecting"  # the scheduler went away
    error = run.ended()["error"]
    assert isinstance(error, SchedulerLostError)
    assert str(error).startswith("lost the Dask scheduler None: no connection for 0 s "
                                 "(client status 'connecting')")
    assert run.client.cancelled == []  # nothing can be cancelled on a lost scheduler
    assert run.sink.of("cut_short") == []


def test_futures_cancelled_by_a_dropped_connection_raise_scheduler_lost():
    run = Driven(4, window=2)
    first, _ = run.wait_chains(2)
    run.done.finish(first, FakeCancelled(reason="scheduler-connection-lost"), status="cancelled")
    error = run.ended()["error"]
    assert isinstance(error, SchedulerLostError)
    assert str(error) == "lost the Dask scheduler None: the connection to it was closed"
    assert not run.stop.requested  # a lost scheduler is no stop


@pytest.mark.parametrize("keep", [True, False], ids=["kept", "dropped"])
def test_outputs_are_kept_or_dropped_per_keep_outputs(keep):
    run = Driven(3, window=3, keep_outputs=keep)
    for chain in run.wait_chains(3):
        run.complete(chain, source_of(chain))
    result = run.ended()["result"]
    assert result.finished == 3 and len(run.sink.of("finished")) == 3
    expected = sorted(f"0_{i}_0" for i in range(3)) if keep else []
    assert sorted(t.task_id for t in result.outputs) == expected
