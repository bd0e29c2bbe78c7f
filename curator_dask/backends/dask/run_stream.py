"""The stream step of a run: its stages sent to the workers once, its sources streamed.

:func:`stream_sources` makes the run's ``StageHost`` worker plugin and sends it
(:func:`register_stage_host`), builds the :class:`~.streaming.SourceStream` from the run's and the
executor's settings, with a :class:`RunSink` that records what the stream reports into the run,
and removes the plugin afterwards (which tears the stages down on the workers).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from curator_dask.backends.dask.perf_report import performance_report
from curator_dask.backends.dask.progress import StageBars
from curator_dask.backends.dask.streaming import SourceStream, StreamSettings, StreamSink
from curator_dask.backends.dask.worker import StageHost
from curator_dask.classes import is_nemo
from curator_dask.errors import SchedulerLostError

if TYPE_CHECKING:
    from curator_dask.backends.dask.run import DaskRun

logger = logging.getLogger(__name__)


def stream_sources(run: DaskRun) -> list[Any]:
    """Send ``run``'s stages to the workers once, then stream its sources through them;
    returns the sink's outputs. A lost scheduler is recorded on the run
    (``run.scheduler_lost``: nothing can be removed or flushed there) and raised."""
    executor = run.executor
    keep = executor.keep_outputs
    host = StageHost(run.run_id, list(run.stages), counting=run.completion is not None,
                     checkpoints=run.planner.runtime if run.planner is not None else None,
                     drop_outputs_of=-1 if keep else run.plan.groups[-1].index,
                     pack_outputs_of=run.plan.groups[-1].index if keep else -1)
    if any(is_nemo(s) for s in run.stages):
        from curator_dask.nemo.logs import forward_to_driver

        forward_to_driver(run.client)
    register_stage_host(run.client, host)
    todo, run.todo, run.sources = run.todo, [], []  # the stream lets each go in turn
    cluster = executor.cluster
    failure = getattr(cluster, "failure", None)
    stream = SourceStream(
        run.client, run.plan, todo, host=host.name, run_id=run.run_id, stop=run.stop,
        sink=RunSink(run), failure=failure if callable(failure) else None,
        settings=StreamSettings(
            window=executor.max_in_flight,
            max_concurrent_partitions=run.options.max_concurrent_partitions,
            max_sources_per_task=executor.max_sources_per_task, keep_outputs=keep,
            drain_timeout=executor.drain_timeout, adaptive=executor.adapt is not None,
            embedded=hasattr(cluster, "curator_dask_start_method")))
    bars = StageBars(run.stages, run.plan, run.n_todo if run.feed is None else None,
                     executor.progress,
                     run.live.dashboard, on_advance=run.live.stage_advanced)
    try:
        with performance_report(run.client, run.options.performance_report,
                                skip=lambda: run.scheduler_lost is not None):
            try:
                return stream.run(bars).outputs
            except SchedulerLostError as exc:
                run.scheduler_lost = str(exc)  # nothing can be cancelled or flushed there
                raise
    finally:
        bars.close()
        if run.scheduler_lost is None:
            try:
                run.client.unregister_worker_plugin(host.name)
            except Exception as exc:  # noqa: BLE001 (teardown must not hide the run's error)
                logger.warning("Could not remove worker plugin %s: %s", host.name, exc)


class RunSink(StreamSink):
    """What the stream reports, into the run's live progress, events, stage counts, checkpoint
    (the ``+1``s of each block of sources) and stage-checkpoint planner.

    Example:
        >>> # SourceStream(..., sink=RunSink(run)): the run's counts follow the stream
    """

    def __init__(self, run: DaskRun) -> None:
        self._run = run
        self.live, self.events, self.counts = run.live, run.events, run.counts

    def first_submit(self) -> None:
        if not self._run.stop.event.is_set():
            self._run.mark("first_submit")
        self.live.first_submit = time.time()

    def open_block(self, tasks: list[Any]) -> None:
        if self._run.completion is not None:
            self._run.completion.open_block(tasks)

    def resume_candidates(self, chunk: list[Any]) -> dict[str, Any] | None:
        planner = self._run.planner
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
        if self._run.planner is not None:
            self._run.planner.sources_finished(ids, result.failed)

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
