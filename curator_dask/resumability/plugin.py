"""``CompletionPlugin``: counts pending descendants of each source on the scheduler.

- The driver calls the ``open_sources`` handler once with every source: it answers which are
  already complete and opens the rest with their ``+1``.
- Workers send batched ``(task_id, source_id, delta)`` lists with ``Worker.log_event`` on the
  ``curator-dask-deltas`` topic, tagged with the run id; the worker's batched stream delivers
  them before the task-finished message, so a child's ``-1`` never overtakes its parent's
  fan-out ``+k``. Other topics and other runs are ignored, so several checkpointed pipelines
  can share one cluster.
- Counts are applied in the event loop (cheap, pure Python). LMDB commits happen on a writer
  thread, batched, at most ``flush_interval`` seconds after a source completes.
- Exceptions inside hooks are kept in ``errors`` (distributed would swallow them); the driver
  fails the run when any exist.
- The ``close`` handler (called by the driver at the end), the scheduler's shutdown, or the
  owning client's disconnect flush and close the store and unregister the plugin.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import traceback
from typing import Any, ClassVar

from distributed.diagnostics.plugin import SchedulerPlugin

from curator_dask.resumability.completed_set import CompletedSet
from curator_dask.resumability.counters import CounterBook
from curator_dask.resumability.store import CompletionStore
from curator_dask.utils.unpicklable import RemadeWhenUnpickled

logger = logging.getLogger(__name__)

TOPIC = "curator-dask-deltas"
_FLUSH = "flush"  # queue marker: commit what has been gathered now

# What the writer thread's queue carries: (newly completed, un-completed) source ids, the
# ``_FLUSH`` marker, or ``None`` (stop).
_QueueItem = tuple[list[str], list[str]] | str | None


def handler_names(run_id: str) -> dict[str, str]:
    """Scheduler handler names of one run's plugin."""
    ops = ("open_sources", "completed", "flush", "close")
    return {op: f"curator_dask_{op}_{run_id}" for op in ops}


def forget_events(scheduler: Any) -> None:
    """Drop the delta messages the scheduler keeps under our topic.

    The scheduler's event broker keeps the last ``distributed.scheduler.events-log-length``
    (100,000) messages of every topic for ``get_events``; a delta message is only for the
    plugins, which have all seen it by the time one of them runs (the broker calls them in
    turn as it publishes), so keeping them would hold every source's deltas in the
    scheduler's memory for nothing.
    """
    from curator_dask.utils import private_api

    broker = private_api.event_broker(scheduler)
    if broker is not None and hasattr(broker, "truncate"):
        broker.truncate(TOPIC)


class CompletionPlugin(RemadeWhenUnpickled, SchedulerPlugin):
    """One checkpointed run's completion counter and LMDB writer, on the scheduler."""

    _remade: ClassVar[dict[str, Any]] = {"_queue": queue.Queue, "_cv": threading.Condition}
    # made by ``_make_remade`` (above), in ``__init__`` and in every unpickled copy
    _queue: queue.Queue[_QueueItem]
    _cv: threading.Condition

    def __init__(
        self,
        checkpoint_url: str,
        run_id: str,
        *,
        storage_options: dict | None = None,
        owner: str | None = None,
        writer_id: str | None = None,
        staged: bool | None = None,
        flush_interval: float = 0.2,
        publish_interval: float = 5.0,
    ) -> None:
        self.checkpoint_url = checkpoint_url
        self.run_id = run_id
        self.name = f"curator-dask-completion-{run_id}"
        self.storage_options = dict(storage_options or {})
        self.owner = owner
        self.writer_id = writer_id
        self.staged = staged
        self.flush_interval = flush_interval
        self.publish_interval = publish_interval
        self.errors: list[str] = []
        # On the scheduler, from ``start`` on: the store, the counters, the writer thread.
        self.scheduler: Any = None
        self.store: CompletionStore | None = None
        self.book: CounterBook | None = None
        self.loaded = 0  # sources the checkpoint held complete when the run started
        self.failed_sources: set[str] = set()
        self.warnings: dict[str, int] = {}
        self.deltas_received = 0
        self.completed_in_run = 0  # sources recorded complete by this run
        self._closed = True  # until start: nothing to close
        self._thread: threading.Thread | None = None
        self._submitted = 0
        self._committed = 0
        # what the writer thread commits (_queue), guarding _submitted / _committed (_cv)
        self._make_remade()

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self._closed = False
        # Opening the store and reading every writer's file can take a while: not on the loop.
        self.store, completed = await asyncio.to_thread(self._open_store)
        self.book = CounterBook(completed)
        self.loaded = len(completed)
        self._thread = threading.Thread(target=self._writer_loop, name=f"{self.name}-writer",
                                        daemon=True)
        self._thread.start()
        names = handler_names(self.run_id)
        scheduler.handlers[names["open_sources"]] = self.open_sources
        scheduler.handlers[names["completed"]] = self.completed_among
        scheduler.handlers[names["flush"]] = self.flush
        scheduler.handlers[names["close"]] = self.close_handler

    def _open_store(self) -> tuple[CompletionStore, CompletedSet]:
        store = CompletionStore(
            self.checkpoint_url, writer_id=self.writer_id, storage_options=self.storage_options,
            staged=self.staged, publish_interval=self.publish_interval,
        )
        return store, store.load_union()

    def _started(self) -> tuple[CompletionStore, CounterBook]:
        """The store and the counters, which ``start`` opens (before any handler exists)."""
        if self.store is None or self.book is None:
            msg = (f"the completion plugin {self.name} was used before its start on the "
                   "scheduler: register it with client.register_plugin first")
            raise RuntimeError(msg)
        return self.store, self.book

    async def close(self) -> None:
        """Flush and close the store (idempotent); also called at scheduler shutdown."""
        if self._closed or self._thread is None:  # closed, or the store never opened
            return
        self._closed = True
        await self._drain()
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)
        try:
            store, _ = self._started()
            await asyncio.to_thread(store.close)
        except Exception:  # noqa: BLE001 (kept for the driver)
            self.errors.append(traceback.format_exc())
        for handler in handler_names(self.run_id).values():
            self.scheduler.handlers.pop(handler, None)

    async def close_handler(self, comm: Any = None) -> dict[str, Any]:
        summary = await self.flush()
        await self.close()
        if self.name in self.scheduler.plugins:
            self.scheduler.remove_plugin(self.name)
        summary["errors"] = list(self.errors)
        return summary

    def remove_client(
        self, scheduler: Any = None, client: str | None = None, **kwargs: Any
    ) -> None:
        if self.owner is not None and client == self.owner and not self._closed:
            logger.warning("resumability: owning client %s disconnected; flushing %s", client,
                           self.checkpoint_url)
            scheduler = scheduler or self.scheduler

            async def _shutdown() -> None:
                await self.close()
                if self.name in scheduler.plugins:
                    scheduler.remove_plugin(self.name)

            asyncio.ensure_future(_shutdown())

    # -- counting ---------------------------------------------------------------------------
    def completed_among(self, comm: Any = None, source_ids: list | None = None) -> list[str]:
        """The ids among ``source_ids`` that the checkpoint marks complete (one vectorised
        lookup)."""
        _, book = self._started()
        return book.completed.among([str(s) for s in source_ids or ()])

    def open_sources(self, comm: Any = None, sources: list | None = None,
                     reopen: list | None = None, open: bool = True) -> list[str]:  # noqa: A002
        """Given ``[(task_id, source_id), ...]``: return the completed source ids and open the
        others with ``+1`` (with ``open=False``, later, a block at a time just before they are
        submitted: the counters of sources not yet sent hold no memory). Sources in ``reopen``
        are processed again even if complete (their input changed); they are recorded complete
        again when they finish."""
        try:
            _, book = self._started()
            book.reopen(str(s) for s in reopen or ())
            sources = sources or []
            sids = [str(s) for _, s in sources]
            hits = book.completed.mask(sids).tolist()  # one lookup for the batch
            if open:
                self._apply([(str(t), sid, 1) for (t, _), sid, hit in zip(
                    sources, sids, hits, strict=True) if not hit], opening=True)
            return [sid for sid, hit in zip(sids, hits, strict=True) if hit]
        except Exception:
            self.errors.append(traceback.format_exc())
            raise

    def log_event(self, topic: str, msg: Any) -> None:
        if topic != TOPIC or not isinstance(msg, dict) or msg.get("run") != self.run_id:
            return
        try:
            deltas = [(str(t), str(s), int(d)) for t, s, d in msg.get("deltas", ())]
            self.deltas_received += len(deltas)
            self.failed_sources.update(str(s) for s in msg.get("failed", ()))
            for text in msg.get("warnings", ()):
                self.warnings[text] = self.warnings.get(text, 0) + 1
            self._apply(deltas)
        except Exception:  # noqa: BLE001 (distributed's event broker would swallow it)
            self.errors.append(traceback.format_exc())
        finally:
            forget_events(self.scheduler)

    def _apply(self, deltas: list[tuple[str, str, int]], *, opening: bool = False) -> None:
        if self._closed:
            return  # like NeMo Curator's closed actor: late deltas are dropped
        _, book = self._started()
        done, undone = book.apply(deltas, opening=opening)
        self.completed_in_run += len(done) - len(undone)
        if done or undone:
            with self._cv:
                self._submitted += 1
            self._queue.put((done, undone))

    # -- the writer thread ------------------------------------------------------------------
    def _writer_loop(self) -> None:
        stop = False
        while not stop:
            batch: list[_QueueItem] = [self._queue.get()]
            # Gather what else arrives within flush_interval of the first item into one
            # transaction; a flush request or the stop marker commits at once.
            deadline = time.monotonic() + self.flush_interval
            while batch[-1] is not None and batch[-1] != _FLUSH:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    batch.append(self._queue.get(timeout=timeout))
                except queue.Empty:
                    break
            stop = None in batch
            entries = [e for e in batch if isinstance(e, tuple)]  # not None, not _FLUSH
            final: dict[str, bool] = {}
            for done, undone in entries:
                final.update(dict.fromkeys(done, True))
                final.update(dict.fromkeys(undone, False))
            try:
                store, _ = self._started()
                if any(final.values()):
                    self._save_dependents()
                store.update(add=[sid for sid, ok in final.items() if ok],
                             remove=[sid for sid, ok in final.items() if not ok])
                store.maybe_publish()
            except Exception:  # noqa: BLE001 (kept for the driver)
                self.errors.append(traceback.format_exc())
            with self._cv:
                self._committed += len(entries)
                self._cv.notify_all()

    def _save_dependents(self) -> None:
        """Save first what the completions about to be committed depend on: the run's id
        registry (``curator_dask.ids.plugin``), so a resumed run that skips a
        completed source finds the ids that source's outputs hold."""
        for plugin in list(self.scheduler.plugins.values()):
            save = getattr(plugin, "save_before_completions", None)
            if save is not None:
                save(self.run_id)

    def _wait_committed(self, target: int) -> None:
        with self._cv:
            self._cv.wait_for(lambda: self._committed >= target)

    async def _drain(self) -> None:
        with self._cv:
            target = self._submitted
            if self._committed >= target:
                return
        self._queue.put(_FLUSH)
        await asyncio.to_thread(self._wait_committed, target)

    async def flush(self, comm: Any = None) -> dict[str, Any]:
        """Wait until every completion is committed (and published when staged)."""
        if not self._closed:
            await self._drain()
            try:
                await asyncio.to_thread(self._started()[0].publish)
            except Exception:  # noqa: BLE001 (kept for the driver)
                self.errors.append(traceback.format_exc())
        store, book = self._started()
        return {
            "completed": len(book.completed),
            "loaded": self.loaded,
            "completed_in_run": self.completed_in_run,
            "pending": len(book.pending),
            "failed_sources": sorted(self.failed_sources),
            "warnings": dict(self.warnings),
            "deltas": self.deltas_received,
            "errors": list(self.errors),
            "unreadable": list(store.unreadable),
            "writer_file": store.remote_path,
        }
