"""The typed parts of one run that its helpers receive: ``DaskRun`` keeps the lifecycle.

A helper in another module (the stream step, the source feed, the sink of the stream's
reports) is handed the part it uses and returns what it learns; none reads or writes the
attributes of ``DaskRun`` itself (docs/design/architecture.md, "One run, end to end"):

- :class:`RunServices`: what the run connects and opens (the client, the completion store's
  client, the stage-checkpoint planner, the input check, the ids, the array shard);
- :class:`RunReport`: what the run tells (its live progress, its events, each stage's counts,
  its timings);
- :class:`RunSources`: its source tasks until the stream takes them over, and their numbers.

Example:
    >>> report = RunReport.for_stages([], "0123456789ab")
    >>> report.mark("head"); sorted(report.timings)
    ['head']
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from curator_dask.backends.counts import StageCount
from curator_dask.backends.dask.events import EventStream
from curator_dask.backends.dask.progress import LiveProgress
from curator_dask.ids.run import NoRunIds, RunIdRegistry

if TYPE_CHECKING:
    from curator_dask.backends.dask.source_feed import LazySourceTasks, SourceFeed
    from curator_dask.resumability.client import CompletionClient
    from curator_dask.resumability.input_check import InputCheck
    from curator_dask.resumability.stage_checkpoints.planner import CheckpointPlanner
    from curator_dask.slurm.run import ArrayShardRun

__all__ = ["RunReport", "RunServices", "RunSources"]


@dataclass
class RunServices:
    """What a run connects and opens, each ``None`` until (and unless) the run has it."""

    client: Any = None  # a distributed.Client, once connected
    completion: CompletionClient | None = None  # a checkpointed run's
    planner: CheckpointPlanner | None = None  # with stage checkpoints at some boundary
    input_check: InputCheck | None = None  # with verify_inputs
    ids: RunIdRegistry | NoRunIds = field(default_factory=NoRunIds)
    shard: ArrayShardRun | None = None  # a SLURM array shard's run


@dataclass
class RunReport:
    """What a run tells while it goes: the live snapshot a job's heartbeat reads, the events
    for its observer, each stage's counts (by position) and the timings of its steps."""

    live: LiveProgress
    events: EventStream
    counts: dict[int, StageCount]
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def for_stages(cls, stages: Sequence[Any], run_id: str,
                   on_event: Any = None) -> RunReport:
        """A fresh report for ``stages``; ``on_event`` receives the events (``None``: nobody
        listens, so no event records are built)."""
        return cls(live=LiveProgress(stages, run_id), events=EventStream(on_event, stages),
                   counts={i: StageCount() for i in range(len(stages))})

    def mark(self, name: str) -> None:
        """The time since the run started, as the step ``name``'s timing."""
        self.timings[name] = time.perf_counter() - self.started


@dataclass
class RunSources:
    """The source tasks of a run, until the stream takes them over (it lets each go once
    submitted), and their numbers once known (a lazy source's when it has given its last)."""

    # a lazy source stage's iterator until select_sources takes a list or a feed from it
    sources: list[Any] | LazySourceTasks = field(default_factory=list)
    todo: list[Any] | SourceFeed = field(default_factory=list)
    feed: SourceFeed | None = None  # the sources of a lazy source stage
    total: int = 0
    to_process: int = 0
    skipped: int = 0

    def planned(self, total: int, skipped: int) -> None:
        """The totals: ``total`` sources, ``skipped`` of them already complete."""
        self.total, self.skipped, self.to_process = total, skipped, total - skipped

    def take(self) -> list[Any] | SourceFeed:
        """What the stream streams; from now on only the numbers are kept here."""
        todo, self.todo, self.sources = self.todo, [], []
        return todo
