"""The stream step of a run: its stages sent to the workers once, its sources streamed.

:func:`stream_sources` makes the run's ``StageHost`` worker plugin and sends it
(:func:`register_stage_host`), builds the :class:`~.streaming.SourceStream` from the settings it
is given, with a :class:`RunSink` that records what the stream reports into the run's
:class:`~.run_parts.RunReport`, and removes the plugin afterwards (which tears the stages down
on the workers). It is given what it uses (``run_parts``), never the run itself.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from curator_dask.backends.dask import extensions
from curator_dask.backends.dask.perf_report import performance_report
from curator_dask.backends.dask.progress import StageBars
from curator_dask.backends.dask.streaming import SourceStream, StreamSettings, StreamSink
from curator_dask.backends.dask.worker import StageHost
from curator_dask.errors import SchedulerLostError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from curator_dask.backends.dask.plan import ExecutionPlan
    from curator_dask.backends.dask.run_parts import RunReport, RunServices
    from curator_dask.backends.dask.source_feed import SourceFeed
    from curator_dask.backends.dask.stop import StopSignal

logger = logging.getLogger(__name__)


def stream_sources(stages: Sequence[Any], plan: ExecutionPlan, todo: list[Any] | SourceFeed, *,
                   run_id: str, stop: StopSignal, services: RunServices, report: RunReport,
                   settings: StreamSettings, progress: Any = None, known_total: int | None = None,
                   failure: Any = None, performance_report_path: str | None = None,
                   done: Any = None) -> list[Any]:
    """Send the run's stages to the workers once (a ``StageHost`` on ``services.client``),
    then stream ``todo`` through them; returns the sink's outputs.

    ``report`` receives what the stream reports (:class:`RunSink`); ``progress`` and
    ``known_total`` (``None``: a lazy source's, counted as it goes) are the bars'; ``failure``
    is the cluster's own failure check (SLURM worker jobs that never started). A lost scheduler
    is raised as ``SchedulerLostError`` (the caller records it: nothing can be removed or
    flushed there). ``done`` replaces Dask's ``as_completed`` (unit tests without a cluster).
    """
    client = services.client
    keep = settings.keep_outputs
    host = StageHost(run_id, list(stages), counting=services.completion is not None,
                     checkpoints=services.planner.runtime if services.planner is not None
                     else None,
                     drop_outputs_of=-1 if keep else plan.groups[-1].index,
                     pack_outputs_of=plan.groups[-1].index if keep else -1)
    extensions.notify("run_connected", client=client, stages=stages)  # e.g. NeMo's loguru
    register_stage_host(client, host)
    stream = SourceStream(client, plan, todo, host=host.name, run_id=run_id, stop=stop,
                          sink=RunSink(report, services, stop),
                          failure=failure if callable(failure) else None, settings=settings,
                          done=done)
    bars = StageBars(stages, plan, known_total, progress, report.live.dashboard,
                     on_advance=report.live.stage_advanced)
    lost = False
    try:
        with performance_report(client, performance_report_path, skip=lambda: lost):
            try:
                return stream.run(bars).outputs
            except SchedulerLostError:
                lost = True  # nothing can be cancelled, reported or removed there
                raise
    finally:
        bars.close()
        if not lost:
            try:
                client.unregister_worker_plugin(host.name)
            except Exception as exc:  # noqa: BLE001 (teardown must not hide the run's error)
                logger.warning("Could not remove worker plugin %s: %s", host.name, exc)


class RunSink(StreamSink):
    """What the stream reports, into the run's report (live progress, events, stage counts)
    and services (the checkpoint's ``+1``s of each block of sources, the stage-checkpoint
    planner).

    Example:
        >>> # SourceStream(..., sink=RunSink(report, services, stop)): the counts follow it
    """

    def __init__(self, report: RunReport, services: RunServices, stop: StopSignal) -> None:
        self.report, self.services, self.stop = report, services, stop
        self.live, self.events, self.counts = report.live, report.events, report.counts

    def first_submit(self) -> None:
        if not self.stop.event.is_set():
            self.report.mark("first_submit")
        self.live.first_submit = time.time()

    def open_block(self, tasks: list[Any]) -> None:
        if self.services.completion is not None:
            self.services.completion.open_block(tasks)

    def resume_candidates(self, chunk: list[Any]) -> dict[str, Any] | None:
        planner = self.services.planner
        if planner is None:
            return None
        return {t._source_id: c for t in chunk if (c := planner.candidates(t._source_id))} or None

    def submitted(self, ids: list[str]) -> None:
        self.live.in_flight(len(ids))
        self.events.chunk_submitted(ids)  # source_start

    def returned(self, ids: list[str]) -> None:
        self.live.in_flight(-len(ids))

    def raised(self, ids: list[str]) -> None:
        self.live.chain_raised(ids)

    def finished(self, ids: list[str], result: Any) -> None:
        for i, c in result.counts.items():
            self.counts[i].merge(c)
        self.live.chunk_done(ids, result.failed, result.counts)
        self.events.chunk_done(ids, result)
        if self.services.planner is not None:
            self.services.planner.sources_finished(ids, result.failed)

    def cut_short(self, n: int) -> None:
        self.live.cut_short(n)

    def event(self, type_: str, **fields: Any) -> None:
        self.events.emit(type_, **fields)


def register_stage_host(client: Any, host: Any, attempts: int = 3) -> None:
    """Send the run's stages to every worker (the ``StageHost`` plugin).

    The scheduler keeps the plugin for workers that join later and sends it to the current
    ones; a worker lost while it is being sent fails the call (its connection closes). That
    is survived like a worker lost mid-run: the plugin goes again to the workers that remain.
    """
    for attempt in range(1, attempts + 1):
        try:
            client.register_plugin(host, name=host.name)
            return
        except OSError as exc:  # CommClosedError: a worker went away during the broadcast
            if attempt == attempts:
                raise
            logger.warning("a worker was lost while the stages were sent to the workers (%s); "
                           "sending them again to the %d that remain", exc,
                           len(client.nthreads()))
