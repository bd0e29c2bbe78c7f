"""Streaming sources through the cluster: the in-flight window, chunking, drain, worker watch.

At most ``window`` chains (one Dask task per fusion group, over a chunk of sources) are in
flight, and with ``max_concurrent_partitions`` at most that many sources across them
(:mod:`.window`); each finished chain submits the next. A stop request lets running chains
finish for ``drain-timeout`` seconds and then cancels them; the sources they held stay pending.

:class:`SourceStream` is given what it uses (the client, the plan, the sources, the run's stop
signal, :class:`StreamSettings`, and a :class:`StreamSink` to report to), not the run or the
executor; it returns a :class:`StreamResult` and raises ``SchedulerLostError`` when the
scheduler is gone, for the run to record.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from curator_dask import config as _config
from curator_dask.backends.dask.adapter import failed_among, source_files
from curator_dask.backends.dask.driver_gc import Freezer, frozen_heap
from curator_dask.backends.dask.heap_trim import HeapTrimmer
from curator_dask.backends.dask.start_gate import NotStarted, close_gate, finished_result, run_gated
from curator_dask.backends.dask.stop import StopSignal
from curator_dask.backends.dask.watches import SchedulerWatch, WorkerWatch, completed
from curator_dask.backends.dask.window import ChunkSizer, PartitionCap
from curator_dask.backends.dask.worker import GroupResult, PackedSources
from curator_dask.backends.dask.worker_faults import Chain, StallWatch, killed_worker_error
from curator_dask.errors import RunStopped, SchedulerLostError
from curator_dask.utils.run_keys import task_key

logger = logging.getLogger(__name__)

# Sources opened in the checkpoint at a time, ahead of their submission (one scheduler call).
OPEN_BLOCK = 4096


class StreamSink:
    """What a :class:`SourceStream` reports as it goes; every method is a no-op here.

    The run's sink (``backends/dask/run.py``) records into its live progress, events, stage
    counts, checkpoint and stage-checkpoint planner. ``ids`` are a chain's source ids (task ids
    without a checkpoint).
    """

    def first_submit(self) -> None:
        """The stream is about to submit its first chain."""

    def open_block(self, tasks: list[Any]) -> None:
        """Open these sources in the checkpoint (their ``+1``s) before any is submitted."""

    def resume_candidates(self, chunk: list[Any]) -> dict[str, Any] | None:
        """Stage-checkpoint entries to try for the chunk's sources, if any."""
        return None

    def submitted(self, ids: list[str]) -> None:
        """A chain over these sources was submitted."""

    def returned(self, ids: list[str]) -> None:
        """The chain is no longer in flight (finished, raised or cancelled)."""

    def raised(self, ids: list[str]) -> None:
        """A stage raised in the chain: its sources failed."""

    def finished(self, ids: list[str], result: GroupResult) -> None:
        """The chain finished: its last group's result (``result.failed``: the sources among
        ``ids`` that saw a ``FailedTask``)."""

    def cut_short(self, n: int) -> None:
        """``n`` sources still running were cancelled (they may still write outputs)."""

    def event(self, type_: str, **fields: Any) -> None:
        """A run event (``worker_lost``)."""


@dataclass(frozen=True)
class StreamSettings:
    """How a stream submits: the executor's and the run's choices, resolved by the run.

    Attributes:
        window: chains in flight (``None``: twice the worker threads).
        max_concurrent_partitions: ``"auto"`` or the most sources in flight at once.
        max_sources_per_task: the most sources packed into one chain (``ChunkSizer``).
        keep_outputs: keep the sink's output tasks (else only their counts).
        drain_timeout: seconds running chains get after a stop request.
        embedded: the embedded cluster (no worker at all is then a stall).
        adaptive: an adaptive cluster (a worker leaving is no warning).
        scheduler_lost_grace: seconds without a scheduler connection before giving up
            (``None``: config ``cluster.scheduler-lost-grace``).
        stalled_workers_grace: seconds every worker may stay stalled (``None``: config
            ``cluster.stalled-workers-grace``).

    Example:
        >>> StreamSettings(window=4).keep_outputs
        True
    """

    window: int | None = None
    max_concurrent_partitions: int | str = "auto"
    max_sources_per_task: int | None = None
    keep_outputs: bool = True
    drain_timeout: float = 60.0
    embedded: bool = False
    adaptive: bool = False
    scheduler_lost_grace: float | None = None
    stalled_workers_grace: float | None = None


@dataclass
class StreamResult:
    """What a stream that ran to its end returns: the sink's output tasks (empty without
    ``keep_outputs``) and how many sources finished."""

    outputs: list[Any]
    finished: int


class SourceStream:
    """Streams one run's sources through the cluster; :meth:`run` is the driver's main loop.

    Args:
        client: the run's ``distributed.Client``.
        plan: the run's ``ExecutionPlan`` (its fusion groups).
        sources: the source tasks to process, taken over (each is let go once submitted): a
            list, or an iterator pulled from as the window frees (``source_feed.SourceFeed``).
        host: the name of the run's ``StageHost`` worker plugin, already registered.
        run_id: the run's id (its token is in every Dask key).
        stop: the run's :class:`~curator_dask.backends.dask.stop.StopSignal`.
        sink: where progress, counts and events go (:class:`StreamSink`).
        settings: :class:`StreamSettings`.
        failure: the cluster's own failure, if it can fail (``SlurmClusterHandle.failure``).
        done: the completion queue (default: ``distributed.as_completed(with_results=True)``).

    Example:
        >>> # SourceStream(client, plan, todo, host=host.name, run_id=run_id, stop=stop,
        >>> #              sink=StreamSink(), settings=StreamSettings(window=4)).run()
    """

    def __init__(self, client: Any, plan: Any, sources: list[Any] | Iterator[Any], *,
                 host: str, run_id: str, stop: StopSignal, sink: StreamSink | None = None,
                 settings: StreamSettings | None = None,
                 failure: Callable[[], BaseException | None] | None = None,
                 done: Any = None) -> None:
        settings = settings or StreamSettings()
        if done is None:
            from distributed import as_completed

            done = as_completed(with_results=True)
        self.client, self.plan, self.stop, self.host, self.run_id = (client, plan, stop, host,
                                                                     run_id)
        self.sink, self.settings, self.failure, self.done = (sink or StreamSink(), settings,
                                                             failure, done)
        # taken over: each source task is let go once submitted (flat memory at 10^6 sources);
        # an iterator (a lazy source's SourceFeed) is pulled from as the window frees
        self.pending: collections.deque = collections.deque()
        self.feed: Iterator[Any] | None = None
        if isinstance(sources, list):
            self.pending.extend(sources)
            sources.clear()
        else:
            self.feed = iter(sources)
        self.total: int | None = None if self.feed is not None else len(self.pending)
        self.submitted_sources = 0
        self.opened = 0  # sources at the front of ``pending`` opened in the checkpoint
        workers = client.nthreads()  # {address: threads}
        threads = sum(workers.values())
        self.workers = workers
        self.window = settings.window or max(1, 2 * threads)
        self.cap = PartitionCap(settings.max_concurrent_partitions)
        self.sizer = ChunkSizer(threads=threads, limit=settings.max_sources_per_task)
        self.in_flight: dict[Any, list[str]] = {}  # last future of a chain -> its source ids
        self.chains: dict[Any, list[Any]] = {}  # last future of a chain -> all its futures
        self.files: dict[Any, list[str]] = {}  # last future of a chain -> its input files
        self.outputs: list[Any] = []
        self.finished = 0
        self.bars: Any = _NoBars()
        self._ended = False
        self._freezer: Any = Freezer(False)
        self._trimmer = HeapTrimmer()  # the driver's freed memory back to the system
        self.scheduler = SchedulerWatch(client, float(
            _config.get("cluster.scheduler-lost-grace", settings.scheduler_lost_grace)))
        self.stall = StallWatch(  # the embedded cluster's nannies restart lost workers
            client, _config.get("cluster.stalled-workers-grace", settings.stalled_workers_grace),
            groups=plan.groups, embedded=settings.embedded)

    def run(self, bars: Any = None) -> StreamResult:
        """Submit, collect and resubmit until every source finished (the result) or a stop
        drained (``RunStopped``); ``SchedulerLostError`` when the scheduler is gone."""
        self.bars = bars if bars is not None else _NoBars()
        threading.Thread(target=self._drain, name="curator-dask-drain", daemon=True).start()
        watch = WorkerWatch(self.client, self.workers, self.sink.event,
                            adaptive=self.settings.adaptive)
        try:
            with frozen_heap(self.settings.keep_outputs) as self._freezer:
                self.sink.first_submit()
                self._fill()
                for future, result in completed(self.done, self._lost):
                    self._collect(future, result)
        except SchedulerLostError:
            raise  # nothing can be cancelled or flushed there: the run records the reason
        except BaseException:
            # Ctrl+C or a stage's error: running chains may still finish on the workers
            self.sink.cut_short(sum(len(ids) for ids in self.in_flight.values()))
            self.client.cancel(list(self.in_flight), force=True)
            raise
        finally:
            self._ended = True
            self.stop.event.set()  # releases the drain thread
            watch.stop()
        if self.total is None or self.finished < self.total:  # never a silent partial result
            reason = self.stop.reason if self.stop.requested else "the run ended early"
            raise RunStopped(reason)  # the run counts what completed, once flushed
        return StreamResult(self.outputs, self.finished)

    def _lost(self) -> str | None:
        """Why the chains in flight cannot finish: the scheduler is gone (the reason), or the
        cluster failed (raised: SLURM worker jobs that keep ending before their worker joins,
        ``SlurmClusterHandle.failure``; every worker stalled, ``StallWatch``)."""
        error = self.failure() if self.failure is not None else None
        if error is not None:
            raise error
        self.stall.check(self.finished, self._waiting)  # raises WorkerFailedError
        return self.scheduler.lost()

    def _waiting(self) -> list[tuple[Chain, int]]:
        """The chains in flight, each with the group it waits at (its first unfinished)."""
        return [(Chain(chain, self.in_flight[last], self.files.get(last, [])),
                 next((i for i, f in enumerate(chain) if f.status != "finished"), 0))
                for last, chain in self.chains.items() if last in self.in_flight]

    def _fill(self) -> None:
        """Submit chunks while fewer than ``window`` chains, and fewer sources than the
        partition cap, are in flight."""
        while len(self.in_flight) < self.window and self._submit_chunk():
            pass

    def _submit_chunk(self) -> bool:
        if self.stop.event.is_set():
            return False
        pending = self.pending
        self._pull(self.sizer.limit)
        size = self.cap.fit(min(len(pending), self.sizer.next_size(self._remaining())))
        if not size:
            return False
        self._open_ahead(size)
        chunk = [pending.popleft() for _ in range(size)]
        self.opened -= size
        self.submitted_sources += len(chunk)
        previous: Any = PackedSources.of(chunk)
        resume = self.sink.resume_candidates(chunk)
        chain = []
        name = task_key("chain", self.run_id, chunk)  # the same for each group's task
        for group in self.plan.groups:
            previous = self.client.submit(
                run_gated, self.host, group.index, group.stage_indices, previous,
                resume if group.index == 0 else None, name,
                key=task_key(group.label, self.run_id, chunk),
                resources=group.resource_dict or None, pure=False,
            )
            chain.append(previous)
            if group is not self.plan.groups[-1]:
                self.bars.watch(previous, group, len(chunk))
        self.chains[previous] = chain
        self.in_flight[previous] = [t._source_id or t.task_id for t in chunk]
        self.files[previous] = source_files(chunk)
        self.cap.took(len(chunk))
        self.sink.submitted(self.in_flight[previous])  # in flight; source_start
        self.done.add(previous)
        return True

    def _pull(self, n: int) -> None:
        """With a feed: pull sources until ``n`` are pending or the feed ends (then the total
        is known)."""
        if self.feed is None or len(self.pending) >= n:
            return
        self.pending.extend(itertools.islice(self.feed, n - len(self.pending)))
        if len(self.pending) < n:  # the feed is exhausted
            self.feed = None
            self.total = self.submitted_sources + len(self.pending)

    def _remaining(self) -> int:
        """Sources not submitted yet (a feed still pulling: as many as could still come)."""
        if self.feed is not None:
            return len(self.pending) + (1 << 40)
        return len(self.pending)

    def _open_ahead(self, size: int) -> None:
        """Open the next block of sources in the checkpoint (one call per ``OPEN_BLOCK``)
        when the chunk about to be submitted is not open yet."""
        if self.opened >= size:
            return
        self._pull(self.opened + OPEN_BLOCK)
        block = list(itertools.islice(self.pending, self.opened,
                                      self.opened + max(size - self.opened, OPEN_BLOCK)))
        self.sink.open_block(block)
        self.opened += len(block)

    def _collect(self, future: Any, result: Any) -> None:
        chain = self.chains.pop(future, None)
        files = self.files.pop(future, [])
        ids = self.in_flight.pop(future)
        self.sink.returned(ids)
        self.cap.released(len(ids))
        raised = future.status == "error"  # before release(), which makes it "cancelled"
        future.release()
        if raised:  # a stage raised: these sources failed, the run ends with its error
            self.sink.raised(ids)
            _, exc, tb = result
            if _killed_worker(exc):  # its workers died: said in the run's terms
                raise self._killed(Chain(chain or [future], ids, files), exc) from exc
            raise exc.with_traceback(tb)
        result = finished_result(result)
        if isinstance(result, NotStarted):  # refused by a drain's closed start gate
            return  # nothing ran: its sources stay pending
        if not isinstance(result, GroupResult):  # cancelled
            if getattr(result, "reason", None) == "scheduler-connection-lost":
                # the client cancels every future the moment its scheduler connection drops
                raise SchedulerLostError(f"lost the Dask scheduler {self.scheduler.address}: "
                                         "the connection to it was closed")
            if not self.stop.event.is_set():  # a drain, or `stop --force` on the scheduler
                self.stop.request("its Dask tasks were cancelled on the scheduler")
            return
        if self.settings.keep_outputs:
            self.outputs.extend(result.tasks())
            self._freezer.collected()
        result.failed = failed_among(ids, result.failed)
        self.sizer.observe(len(ids), result.seconds)
        self.bars.advance(self.plan.groups[-1], len(ids))
        self.finished += len(ids)
        self._trimmer.finished(len(ids))
        self.sink.finished(ids, result)
        self._fill()

    def _killed(self, chain: Chain, exc: Any) -> Exception:
        """Dask's ``KilledWorker`` as the run's error, blaming the chain the dead worker was
        running: this one, or another in flight that this one waited behind."""
        others = [c for c, _ in self._waiting()]
        return killed_worker_error(self.client, exc, [chain, *others], self.plan.groups)

    def _drain(self) -> None:
        self.stop.event.wait()
        if self._ended:
            return
        timeout = self.settings.drain_timeout
        cancelled, running = self._cancel_unstarted()
        logger.warning("%s: no new sources; %d queued tasks cancelled, waiting up to %.0f s for "
                       "%d running tasks", self.stop.reason, cancelled, timeout, running)
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline and not self._ended:
            time.sleep(0.05)
        if self.in_flight and not self._ended and self.client.status == "running":
            self.sink.cut_short(sum(len(ids) for ids in list(self.in_flight.values())))
            self.client.cancel(list(self.in_flight), force=True)

    def _cancel_unstarted(self) -> tuple[int, int]:
        """Close the run's start gate on every worker (:mod:`.start_gate`), then cancel the
        chains none of whose tasks had passed it (queued on the scheduler or a worker, or
        between two fusion groups): only those running may finish; the gate refuses every
        other one even where the cancel arrives late; the sources of a cancelled chain stay
        pending. Returns how many chains were cancelled and how many run on."""
        try:
            states = [pair for pairs in self.client.run(partial(close_gate, self.host)).values()
                      for pair in pairs]
        except Exception as exc:  # noqa: BLE001 (then every chain drains as before)
            logger.warning("could not close the start gate on the workers (%s): queued tasks "
                           "will run", exc)
            return 0, len(self.chains)
        running = {key for key, state in states if state != "memory"}
        # A chain whose last task already finished is done, not queued: its sources may be
        # recorded complete by now, so it is collected, never cancelled (the driver's counts
        # and the checkpoint would disagree).
        done = {key for key, state in states if state == "memory"}
        chains = list(self.chains.items())
        unstarted = [last for last, chain in chains
                     if last.status != "finished" and str(last.key) not in done
                     and not any(str(f.key) in running for f in chain)]
        if unstarted:
            try:
                self.client.cancel([f for last in unstarted for f in self.chains.get(last, ())],
                                   force=True)
            except Exception:
                if self.client.status == "running":
                    raise
                # the run ended meanwhile and its client closed: nothing is left to cancel
                # (the gate refuses whatever had not started)
                logger.debug("the drain's cancel found the client closed; nothing to cancel")
        return len(unstarted), len(chains) - len(unstarted)


class _NoBars:
    """No progress bars (a stream run without them, e.g. in a unit test)."""

    def watch(self, future: Any, group: Any, n: int) -> None:
        """Nothing to show."""

    def advance(self, group: Any, n: int) -> None:
        """Nothing to show."""


def _killed_worker(exc: BaseException) -> bool:
    from distributed.scheduler import KilledWorker

    return isinstance(exc, KilledWorker)
