"""Streaming sources through the cluster: the in-flight window, chunking, drain, worker watch.

At most ``window`` chains (one Dask task per fusion group, over a chunk of sources) are in
flight, and with ``max_concurrent_partitions`` at most that many sources across them
(:mod:`.window`); each finished chain submits the next. A stop request lets running chains
finish for ``drain-timeout`` seconds and then cancels them; the sources they held stay pending.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from typing import Any

from curator_dask import config as _config
from curator_dask.backends.dask.adapter import failed_among, source_files
from curator_dask.backends.dask.keys import task_key
from curator_dask.backends.dask.window import ChunkSizer, PartitionCap
from curator_dask.backends.dask.worker import GroupResult, run_group
from curator_dask.backends.dask.worker_faults import Chain, StallWatch, killed_worker_error
from curator_dask.errors import RunStopped, SchedulerLostError

logger = logging.getLogger(__name__)

# Sources opened in the checkpoint at a time, ahead of their submission (one scheduler call).
OPEN_BLOCK = 4096


class StopSignal:
    """A stop request: safe to set from a signal handler or another thread.

    Example:
        >>> stop = StopSignal()
        >>> stop.request("received SIGUSR1")
        >>> stop.requested, stop.reason
        (True, 'received SIGUSR1')
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.requested = False
        self.reason = "stop requested"

    def request(self, reason: str = "stop requested") -> None:
        self.reason = reason
        self.requested = True
        self.event.set()

    def reset(self) -> None:
        self.event.clear()
        self.requested = False


class SchedulerWatch:
    """Whether the client's connection to the scheduler is gone for longer than ``grace``.

    A client whose scheduler died keeps reconnecting; its futures then never finish (a result
    download in flight is never delivered), so the run asks this watch instead of waiting.
    """

    def __init__(self, client: Any, grace: float) -> None:
        self.client, self.grace = client, grace
        self._since: float | None = None
        self.address = getattr(getattr(client, "scheduler", None), "address", None)

    def lost(self) -> str | None:
        """``None`` while connected, else why the run must give up on its scheduler."""
        if self.client.status == "running":
            self._since = None
            return None
        now = time.monotonic()
        self._since = self._since or now
        if now - self._since < self.grace:
            return None
        return (f"lost the Dask scheduler {self.address}: no connection for {self.grace:.0f} s "
                f"(client status {self.client.status!r})")


def completed(done: Any, lost: Any) -> Any:
    """``(future, result)`` of chains as they finish; raises :class:`SchedulerLostError` when
    ``lost()`` says the scheduler is gone, instead of waiting for futures that cannot finish
    (``lost()`` may also raise the cluster's own error itself).

    A chain that raised yields its ``(type, error, traceback)``, for the caller to count its
    sources and raise; a cancelled one yields its ``CancelledError`` as the result (a drain
    or ``stop --force`` cancelled it).
    """
    while True:
        if done.has_ready():
            yield from done.next_batch(block=False)
            continue
        if done.is_empty():
            return
        reason = lost()
        if reason is not None:
            raise SchedulerLostError(reason)
        with done.thread_condition:
            done.thread_condition.wait(timeout=0.1)


class WorkerWatch:
    """``worker_lost`` events: the scheduler's worker set, compared every 2 s and at the end.

    On an adaptive cluster workers leave as a matter of course (idle worker jobs are released,
    a lost one is replaced): a worker leaving is then an INFO line, not a warning.
    """

    def __init__(self, client: Any, workers: Any, emit: Any, adaptive: bool = False) -> None:
        self.client, self.emit, self.adaptive = client, emit, adaptive
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(set(workers),),
                                        name="curator-dask-workers", daemon=True)
        self._thread.start()

    def _run(self, known: set[str]) -> None:
        while True:
            last = self._done.wait(2.0)
            try:
                now = set(self.client.nthreads())
            except Exception:  # noqa: BLE001 (the run itself reports a lost scheduler)
                return
            for address in sorted(known - now):
                if self.adaptive:
                    logger.info("worker %s left the adaptive cluster", address)
                else:
                    logger.warning("worker %s left the cluster", address)
                self.emit("worker_lost", worker=address, remaining=len(now),
                          adaptive=self.adaptive)
            known = now
            if last:
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=10)


class SourceStream:
    """Streams one run's sources through the cluster; ``run`` returns the sink's outputs.

    ``run`` is the driver's main loop. ``host`` is the name of the run's ``StageHost`` worker
    plugin, already registered on the workers.
    """

    def __init__(self, run: Any, host: str, sources: list[Any]) -> None:
        from distributed import as_completed

        self.run_ = run
        self.client, self.plan, self.stop = run.client, run.plan, run.stop
        self.host = host
        self.total = len(sources)
        # taken over: each source task is let go once submitted (flat memory at 10^6 sources)
        self.pending: collections.deque = collections.deque(sources)
        sources.clear()
        self.remaining = self.total
        self.opened = 0  # sources at the front of ``pending`` opened in the checkpoint
        self.keep_outputs = run.executor.keep_outputs
        workers = self.client.nthreads()  # {address: threads}
        threads = sum(workers.values())
        self.workers = workers
        self.window = run.executor.max_in_flight or max(1, 2 * threads)
        self.cap = PartitionCap(run.options.max_concurrent_partitions)
        self.sizer = ChunkSizer(threads=threads, limit=run.executor.max_sources_per_task)
        self.done = as_completed(with_results=True)
        self.in_flight: dict[Any, list[str]] = {}  # last future of a chain -> its source ids
        self.chains: dict[Any, list[Any]] = {}  # last future of a chain -> all its futures
        self.files: dict[Any, list[str]] = {}  # last future of a chain -> its input files
        self.outputs: list[Any] = []
        self.finished = 0
        self._ended = False
        self.scheduler = SchedulerWatch(
            self.client, float(_config.get("cluster.scheduler-lost-grace")))
        self.stall = StallWatch(  # the embedded cluster's nannies restart lost workers
            self.client, _config.get("cluster.stalled-workers-grace"), groups=self.plan.groups,
            embedded=hasattr(run.executor.cluster, "curator_dask_start_method"))

    def run(self, bars: Any) -> list[Any]:
        """Submit, collect and resubmit until every source finished or a stop drained."""
        self.bars = bars
        threading.Thread(target=self._drain, name="curator-dask-drain", daemon=True).start()
        watch = WorkerWatch(self.client, self.workers, self.run_.events.emit,
                            adaptive=self.run_.executor.adapt is not None)
        try:
            self.run_.mark_first_submit()
            self._fill()
            for future, result in completed(self.done, self._lost):
                self._collect(future, result)
        except SchedulerLostError as exc:
            self.run_.scheduler_lost = str(exc)  # nothing can be cancelled or flushed there
            raise
        except BaseException:
            # Ctrl+C or a stage's error: running chains may still finish on the workers
            self.run_.live.cut_short(sum(len(ids) for ids in self.in_flight.values()))
            self.client.cancel(list(self.in_flight), force=True)
            raise
        finally:
            self._ended = True
            self.stop.event.set()  # releases the drain thread
            watch.stop()
        if self.finished < self.total:  # never a silent partial result
            reason = self.stop.reason if self.stop.requested else "the run ended early"
            raise RunStopped(reason)  # the run counts what completed, once flushed
        return self.outputs

    def _lost(self) -> str | None:
        """Why the chains in flight cannot finish: the scheduler is gone (the reason), or the
        cluster failed (raised: SLURM worker jobs that keep ending before their worker joins,
        ``SlurmClusterHandle.failure``; every worker stalled, ``StallWatch``)."""
        failure = getattr(self.run_.executor.cluster, "failure", None)
        error = failure() if callable(failure) else None
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
        size = self.cap.fit(min(len(pending), self.sizer.next_size(self.remaining)))
        if not size:
            return False
        self._open_ahead(size)
        chunk = [pending.popleft() for _ in range(size)]
        self.opened -= size
        self.remaining -= len(chunk)
        previous: Any = GroupResult(batches=[[task] for task in chunk])
        planner = self.run_.planner
        resume = None
        if planner is not None:
            resume = {t._source_id: c for t in chunk
                      if (c := planner.candidates(t._source_id))} or None
        chain = []
        for group in self.plan.groups:
            previous = self.client.submit(
                run_group, self.host, group.index, group.stage_indices, previous,
                resume if group.index == 0 else None,
                key=task_key(group.label, self.run_.run_id, chunk),
                resources=group.resource_dict or None, pure=False,
            )
            chain.append(previous)
            if group is not self.plan.groups[-1]:
                self.bars.watch(previous, group, len(chunk))
        self.chains[previous] = chain
        self.in_flight[previous] = [t._source_id or t.task_id for t in chunk]
        self.files[previous] = source_files(chunk)
        self.run_.live.in_flight(len(chunk))
        self.cap.took(len(chunk))
        self.run_.events.chunk_submitted(self.in_flight[previous])  # source_start
        self.done.add(previous)
        return True

    def _open_ahead(self, size: int) -> None:
        """Open the next block of sources in the checkpoint (one call per ``OPEN_BLOCK``)
        when the chunk about to be submitted is not open yet."""
        completion = self.run_.completion
        if completion is None or self.opened >= size:
            return
        block = list(itertools.islice(self.pending, self.opened,
                                      self.opened + max(size - self.opened, OPEN_BLOCK)))
        completion.open_block(block)
        self.opened += len(block)

    def _collect(self, future: Any, result: Any) -> None:
        chain = self.chains.pop(future, None)
        files = self.files.pop(future, [])
        ids = self.in_flight.pop(future)
        run = self.run_
        run.live.in_flight(-len(ids))
        self.cap.released(len(ids))
        raised = future.status == "error"  # before release(), which makes it "cancelled"
        future.release()
        if raised:  # a stage raised: these sources failed, the run ends with its error
            run.live.chain_raised(ids)
            _, exc, tb = result
            if _killed_worker(exc):  # its workers died: said in the run's terms
                raise self._killed(Chain(chain or [future], ids, files), exc) from exc
            raise exc.with_traceback(tb)
        if not isinstance(result, GroupResult):  # cancelled
            if getattr(result, "reason", None) == "scheduler-connection-lost":
                # the client cancels every future the moment its scheduler connection drops
                raise SchedulerLostError(f"lost the Dask scheduler {self.scheduler.address}: "
                                         "the connection to it was closed")
            if not self.stop.event.is_set():  # a drain, or `stop --force` on the scheduler
                self.stop.request("its Dask tasks were cancelled on the scheduler")
            return
        if self.keep_outputs:
            self.outputs.extend(result.tasks())
        result.failed = failed_among(ids, result.failed)
        for i, c in result.counts.items():
            run.counts[i].merge(c)
        self.sizer.observe(len(ids), result.seconds)
        self.bars.advance(self.plan.groups[-1], len(ids))
        self.finished += len(ids)
        run.live.chunk_done(ids, result.failed, result.counts)
        run.events.chunk_done(ids, result)
        if run.planner is not None:
            run.planner.sources_finished(ids, result.failed)
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
        timeout = self.run_.executor.drain_timeout
        cancelled = self._cancel_unstarted()
        logger.warning("%s: no new sources; %d queued tasks cancelled, waiting up to %.0f s for "
                       "%d running tasks", self.stop.reason, cancelled, timeout,
                       len(self.in_flight) - cancelled)
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline and not self._ended:
            time.sleep(0.05)
        if self.in_flight and not self._ended and self.client.status == "running":
            self.run_.live.cut_short(sum(len(ids) for ids in list(self.in_flight.values())))
            self.client.cancel(list(self.in_flight), force=True)

    def _cancel_unstarted(self) -> int:
        """Cancel the chains none of whose Dask tasks is running now (queued on the scheduler
        or a worker, or between two fusion groups): only running tasks may finish; the sources
        of a cancelled chain stay pending. Returns how many were cancelled."""
        try:
            states = [pair for pairs in self.client.run(task_states).values() for pair in pairs]
        except Exception as exc:  # noqa: BLE001 (then every chain drains as before)
            logger.warning("could not ask the workers what runs (%s): queued tasks will run", exc)
            return 0
        running = {key for key, state in states if state != "memory"}
        # A chain whose last task already finished is done, not queued: its sources may be
        # recorded complete by now, so it is collected, never cancelled (the driver's counts
        # and the checkpoint would disagree).
        done = {key for key, state in states if state == "memory"}
        unstarted = [last for last, chain in list(self.chains.items())
                     if last.status != "finished" and str(last.key) not in done
                     and not any(str(f.key) in running for f in chain)]
        if unstarted:
            self.client.cancel([f for last in unstarted for f in self.chains.get(last, ())],
                               force=True)
        return len(unstarted)


def _killed_worker(exc: BaseException) -> bool:
    from distributed.scheduler import KilledWorker

    return isinstance(exc, KilledWorker)


def task_states(dask_worker: Any) -> list[tuple[str, str]]:
    """``(key, state)`` of the tasks a worker is running now or holds the result of
    (``client.run`` calls it on each worker)."""
    return [(str(key), ts.state) for key, ts in dask_worker.state.tasks.items()
            if ts.state in ("executing", "long-running", "memory")]
