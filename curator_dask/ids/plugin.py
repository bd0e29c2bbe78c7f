"""``IdGeneratorPlugin``: one run's id generator as a Dask scheduler extension.

Why the scheduler and not a Dask actor: an actor lives on one worker and dies with it, taking
the ids it handed out with it, while the scheduler already is the run's single point of state
(the completion plugin lives there too) and outlives any worker. Workers reach it from inside a
task with one RPC per partition, on the handler ``curator_dask_ids``; one handler serves every
run's plugin, picking the run by its token in the calling task's key (``utils/run_keys``),
so several runs with ids can share a cluster.

With a checkpoint the registry is written to ``<checkpoint>/.curator_dask/id_generator.json``
(NeMo's JSON) by the completion plugin's writer thread before it commits completions
(``save_before_completions``), so a source recorded complete always has its range on disk.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback
from typing import Any, ClassVar

from distributed.diagnostics.plugin import SchedulerPlugin

from curator_dask.ids.generator import IdGeneratorBase
from curator_dask.utils.run_keys import is_run_key, run_token
from curator_dask.utils.unpicklable import RemadeWhenUnpickled

logger = logging.getLogger(__name__)

HANDLER = "curator_dask_ids"


def plugin_name(run_id: str) -> str:
    return f"curator-dask-ids-{run_id}"


def close_handler_name(run_id: str) -> str:
    return f"curator_dask_ids_close_{run_id}"


def to_wire(generator: IdGeneratorBase) -> dict[str, Any]:
    """The state as plain lists (msgpack keeps their order)."""
    return {"next_id": generator.next_id,
            "batches": [[k, a, b] for k, (a, b) in generator.batch_registry.items()]}


def from_wire(state: dict[str, Any]) -> IdGeneratorBase:
    return IdGeneratorBase(state["next_id"], {k: (a, b) for k, a, b in state["batches"]})


def serve(generator: IdGeneratorBase, action: str, *, files: Any = None, count: int = 0,
          batch_key: str | None = None) -> Any:
    """One request of a worker (or of the driver) against ``generator``."""
    if action == "register":
        return generator.register_batch(files, count)
    if action == "range":
        return list(generator.get_batch_range(files, batch_key))
    if action == "state":
        return to_wire(generator)
    msg = f"unknown id generator request {action!r}"
    raise ValueError(msg)


def call_from_worker(worker: Any, action: str, **kwargs: Any) -> Any:
    """The scheduler RPC of a stage inside a Dask task (its key names the run)."""
    from distributed.utils import sync

    try:
        key = worker.get_current_task()
    except KeyError:
        key = None  # not in a task thread (a worker plugin hook): the only run, if one
    method = getattr(worker.scheduler, HANDLER)
    answer = sync(worker.loop, method, action=action, key=None if key is None else str(key),
                  **kwargs)
    if answer is None:  # the scheduler has no such handler (it logs a warning and answers None)
        msg = ("this task asked the Dask scheduler for document ids, but no run with ids is in "
               "progress on it: a stage that generates or assigns ids (_generate_ids / "
               "_assign_ids) needs create_id_generator_actor() on the driver before "
               "Pipeline.run")
        raise RuntimeError(msg)
    return answer


def dispatch(scheduler: Any, comm: Any = None, action: str = "", key: str | None = None,
             run: str | None = None, **kwargs: Any) -> Any:
    """The handler every run's plugin shares: finds the run (by ``run`` id, or the token in
    the calling task's ``key``) and serves the request."""
    plugins = [p for p in list(scheduler.plugins.values()) if isinstance(p, IdGeneratorPlugin)]
    if run is not None:
        chosen = [p for p in plugins if p.run_id == run]
    else:
        chosen = [p for p in plugins if key is not None and is_run_key(key, p.token)]
        if not chosen and len(plugins) == 1:
            chosen = plugins  # a task outside the run's own keys (a user's Dask code)
    if len(chosen) != 1:
        msg = (f"no single run with an id generator matches task {key!r} on this scheduler "
               f"(runs with ids: {sorted(p.run_id for p in plugins)}); call register_batch / "
               "get_batch_range from a stage of the run")
        raise LookupError(msg)
    return chosen[0].handle(action, **kwargs)


def shared_handler(scheduler: Any) -> Any:
    """:func:`dispatch` for this scheduler, as a named function (distributed logs handlers by
    ``__name__``, which a ``functools.partial`` lacks)."""

    def curator_dask_ids(comm: Any = None, **msg: Any) -> Any:
        return dispatch(scheduler, comm, **msg)

    return curator_dask_ids


class IdGeneratorPlugin(RemadeWhenUnpickled, SchedulerPlugin):
    """The id registry of one run, on the scheduler (see the module docstring).

    Example:
        >>> plugin = IdGeneratorPlugin("0123456789ab", to_wire(IdGeneratorBase()))
        >>> plugin.name, plugin.token
        ('curator-dask-ids-0123456789ab', '01234567')
    """

    _remade: ClassVar[dict[str, Any]] = {"_lock": threading.Lock, "_save_lock": threading.Lock}
    _lock: threading.Lock
    _save_lock: threading.Lock

    def __init__(self, run_id: str, state: dict[str, Any], *,
                 checkpoint_file: str | None = None, storage_options: dict | None = None,
                 owner: str | None = None) -> None:
        self.run_id = run_id
        self.name = plugin_name(run_id)
        self.token = run_token(run_id)
        self.state: dict[str, Any] | None = state  # the generator's, until ``start``
        self.checkpoint_file = checkpoint_file
        self.storage_options = dict(storage_options or {})
        self.owner = owner
        self.errors: list[str] = []
        # On the scheduler, from ``start`` on:
        self.scheduler: Any = None
        self.generator: IdGeneratorBase | None = None
        self._saved: tuple[int, int] | None = None  # (next id, groups) the checkpoint holds
        self._closed = True  # until start: nothing to close
        # requests (event loop) against snapshots (threads): _lock; saves: _save_lock
        self._make_remade()

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        if self.state is None:
            msg = (f"the id generator plugin {self.name} was started twice; register a new "
                   "IdGeneratorPlugin for each start")
            raise RuntimeError(msg)
        self.generator = from_wire(self.state)
        self.state = None  # the generator holds it now
        self._saved = self._version()
        self._closed = False
        scheduler.handlers[HANDLER] = shared_handler(scheduler)
        scheduler.handlers[close_handler_name(self.run_id)] = self.close_handler

    def _started(self) -> IdGeneratorBase:
        if self.generator is None:
            msg = (f"the id generator plugin {self.name} was asked before its start on the "
                   "scheduler: register it with client.register_plugin first")
            raise RuntimeError(msg)
        return self.generator

    def _version(self) -> tuple[int, int]:
        # Registrations only add: (next id, number of groups) changes with each of them.
        generator = self._started()
        return generator.next_id, len(generator.batch_registry)

    def handle(self, action: str, **kwargs: Any) -> Any:
        with self._lock:
            return serve(self._started(), action, **kwargs)

    def snapshot(self) -> IdGeneratorBase:
        with self._lock:
            return self._started().copy()

    # -- the checkpoint ----------------------------------------------------------------------
    def save_before_completions(self, run_id: str) -> None:
        """Called by the completion plugin's writer thread before each commit."""
        if run_id == self.run_id:
            self.save()

    def save(self) -> None:
        """Write the registry to the checkpoint when it changed since the last write."""
        if self.checkpoint_file is None:
            return
        with self._save_lock:
            with self._lock:
                version = self._version()
                if version == self._saved:
                    return
                snapshot = self._started().copy()
            snapshot.to_disk(self.checkpoint_file, self.storage_options)
            self._saved = version

    # -- the end of the run -----------------------------------------------------------------
    async def close_handler(self, comm: Any = None) -> dict[str, Any]:
        """Save, remove the plugin and its handlers, and return the state to the driver."""
        await self.close()
        state = to_wire(self.snapshot())
        state["errors"] = list(self.errors)
        return state

    async def close(self) -> None:
        """Idempotent; also called at the scheduler's shutdown."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.to_thread(self.save)
        except Exception:  # noqa: BLE001 (kept for the driver)
            self.errors.append(traceback.format_exc())
        scheduler = self.scheduler
        scheduler.handlers.pop(close_handler_name(self.run_id), None)
        if self.name in scheduler.plugins:
            scheduler.remove_plugin(self.name)
        if not any(isinstance(p, IdGeneratorPlugin) for p in scheduler.plugins.values()):
            scheduler.handlers.pop(HANDLER, None)

    def remove_client(self, scheduler: Any = None, client: str | None = None,
                      **kwargs: Any) -> None:
        if self.owner is not None and client == self.owner and not self._closed:
            logger.warning("id generator: owning client %s disconnected; saving and removing "
                           "run %s's ids", client, self.run_id)
            asyncio.ensure_future(self.close())
