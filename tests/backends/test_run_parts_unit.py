"""The run's helpers without a cluster: they take the typed parts of a run and return what
they learn (``backends/dask/run_parts.py``), so they run here on their own.

``stream_sources`` is driven with the fake client and completions of
``test_source_stream_unit.py`` (fakes, named so: a Dask scheduler and its futures, exercised
for real by tests/backends/test_executor.py), plus the two plugin calls the stream step makes.
The source feed needs no fake at all: it is given iterators and a lookup function.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from curator_dask.backends.dask.run_parts import RunReport, RunServices, RunSources
from curator_dask.backends.dask.run_stream import RunSink, stream_sources
from curator_dask.backends.dask.source_feed import SourceFeed, feed_or_list, whole_list_reason
from curator_dask.backends.dask.stop import StopSignal
from curator_dask.backends.dask.streaming import StreamSettings
from curator_dask.errors import SchedulerLostError
from curator_dask.tasks import FileGroupTask
from curator_dask.tasks.row_range import RowRangeTask
from tests.backends.test_source_stream_unit import (
    RUN_ID,
    FakeClient,
    FakeCompletions,
    Stage,
    plan,
    source_of,
    sources,
)
from tests.helpers import poll_for


class Lazy:
    """An iterator with the ``close`` of a lazy source stage, recording that it was closed."""

    def __init__(self, items: list[Any]) -> None:
        self.items, self.closed = iter(items), False

    def __iter__(self) -> Lazy:
        return self

    def __next__(self) -> Any:
        return next(self.items)

    def close(self) -> None:
        self.closed = True


# -- the source feed --------------------------------------------------------------------------
def test_a_reason_to_take_every_source_gives_the_list_and_closes_the_stage():
    lazy = Lazy(sources(3))
    found = feed_or_list(lazy, whole_list_reason(sharded=True))
    assert [t.task_id for t in found] == ["0_0", "0_1", "0_2"] and lazy.closed


def test_without_a_reason_the_feed_skips_completed_ones_and_reports_its_totals_at_the_end():
    heard: list[tuple[int, int]] = []
    asked: list[list[str]] = []

    def completed(ids: list[str]) -> list[str]:
        asked.append(list(ids))
        return [i for i in ids if i.endswith(("1", "3"))]

    rows = [RowRangeTask.of([{"path": "/in/a.jsonl", "start_row": 10 * i,
                              "end_row": 10 * i + 10, "start_byte": 0, "end_byte": 1}],
                            dataset_name="d", index=i, total=5) for i in range(5)]
    for i, task in enumerate(rows):  # row ranges: the partition record needs no list
        task._set_task_id("0", i)
    lazy = Lazy(rows)
    feed = feed_or_list(lazy, None, completed=completed,
                        on_exhausted=lambda total, skipped: heard.append((total, skipped)))
    assert isinstance(feed, SourceFeed) and not lazy.closed
    assert heard == []  # nothing pulled yet beyond the first block
    assert [t.task_id for t in feed] == ["0_0", "0_2", "0_4"]
    assert heard == [(5, 2)] and feed.total == 5 and feed.skipped == 2
    assert [len(ids) for ids in asked] == [5]  # one lookup for the block


def test_file_groups_in_a_checkpointed_run_are_taken_as_a_list():
    lazy = Lazy(sources(2))
    found = feed_or_list(lazy, None, completed=lambda ids: [])
    assert isinstance(found, list) and len(found) == 2 and lazy.closed


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"sharded": True}, "an array shard selects among all sources"),
    ({"verify_inputs": True}, "verify_inputs fingerprints every source first"),
    ({"stage_checkpoints": True}, "stage checkpoints plan over every source"),
    ({"sink_follows": False}, "the source stage's tasks are the run's outputs"),
    ({}, None),
])
def test_whole_list_reasons(kwargs, reason):
    assert whole_list_reason(**kwargs) == reason


def test_run_sources_hand_over_their_tasks_and_keep_the_numbers():
    held = RunSources(sources=[1, 2, 3], todo=[2, 3])
    held.planned(3, 1)
    assert held.take() == [2, 3] and held.sources == [] and held.todo == []
    assert (held.total, held.skipped, held.to_process) == (3, 1, 2)


# -- the stream step --------------------------------------------------------------------------
class PluginClient(FakeClient):
    """The fake client, plus the worker-plugin calls of the stream step (recorded)."""

    def __init__(self, done: FakeCompletions) -> None:
        super().__init__(done)
        self.plugins: list[tuple[str, str]] = []

    def register_plugin(self, plugin: Any, name: str) -> None:
        self.plugins.append(("registered", name))

    def unregister_worker_plugin(self, name: str) -> None:
        self.plugins.append(("removed", name))


class Streamed:
    """``stream_sources`` in a thread over ``n`` sources, given fresh run parts."""

    def __init__(self, n: int, **settings: Any) -> None:
        self.done = FakeCompletions()
        self.client = PluginClient(self.done)
        stages = [Stage("src"), Stage("g0")]
        stages[0].is_source_stage = True
        self.plan = plan(1)
        self.stop = StopSignal(RUN_ID)
        self.services = RunServices(client=self.client)
        self.report = RunReport.for_stages(stages, RUN_ID)
        settings.setdefault("max_sources_per_task", 1)
        self.outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                self.outcome["outputs"] = stream_sources(
                    stages, self.plan, sources(n), run_id=RUN_ID, stop=self.stop,
                    services=self.services, report=self.report,
                    settings=StreamSettings(**settings), progress=False, known_total=n,
                    done=self.done)
            except BaseException as exc:  # noqa: BLE001 (the test inspects it)
                self.outcome["error"] = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def ended(self) -> dict[str, Any]:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the stream step did not end"
        return self.outcome


def test_the_stream_step_reports_into_the_run_report_and_removes_its_plugin():
    run = Streamed(3, window=3)
    poll_for(lambda: len(run.client.submitted) == 3, 30, "three chains submitted")
    for future, _ in list(run.client.submitted):
        task = FileGroupTask(dataset_name="d", data=[])
        task.task_id = source_of(future) + "_0"
        from curator_dask.backends.dask.worker import GroupResult

        run.done.finish(future, GroupResult(batches=[[task]], seconds=0.01))
    outputs = run.ended()["outputs"]
    assert [t.task_id for t in outputs] == ["0_0_0", "0_1_0", "0_2_0"]
    (registered, name), removed = run.client.plugins
    assert registered == "registered" and removed == ("removed", name)
    assert "first_submit" in run.report.timings
    assert run.report.live.sources["completed"] == 3


def test_a_lost_scheduler_is_raised_to_the_caller_and_nothing_is_removed_there():
    run = Streamed(2, window=2, scheduler_lost_grace=0)
    poll_for(lambda: len(run.client.submitted) == 2, 30, "two chains submitted")
    run.client.status = "connecting"  # the scheduler went away
    error = run.ended()["error"]
    assert isinstance(error, SchedulerLostError)
    assert [kind for kind, _ in run.client.plugins] == ["registered"]  # not removed there


def test_the_sink_writes_only_into_the_parts_it_was_given():
    stages = [Stage("src"), Stage("g0")]
    report = RunReport.for_stages(stages, RUN_ID)
    sink = RunSink(report, RunServices(), StopSignal(RUN_ID))
    sink.first_submit()
    sink.submitted(["0_0"])
    assert report.live.snapshot()["sources"]["in_flight"] == 1
    sink.returned(["0_0"])
    assert report.live.snapshot()["sources"]["in_flight"] == 0
    assert sink.resume_candidates([]) is None  # no planner among the services
    assert "first_submit" in report.timings
