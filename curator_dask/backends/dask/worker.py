"""``StageHost``: the worker plugin that owns stage objects and their lifecycle on a worker.

- ``setup_on_node`` runs once per host, for every stage, before any ``setup`` on that host
  (an exclusive file lock in the host's temp directory orders the worker processes);
- ``setup`` runs once per worker per stage, the first time the worker runs that stage;
- ``teardown`` runs on each worker for the stages it set up, when the plugin is removed at the
  end of the run (also after a plugin ``setup`` that failed: then there is nothing to tear
  down).

Stages travel to each worker once, with the plugin, not with every task. Restoring and saving
stage checkpoints is ``resumability/stage_checkpoints/on_worker.py``'s; a group only hands it
the batches and carries its record on.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import logging
import os
import pickle
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

from distributed import WorkerPlugin, get_worker

from curator_dask.backends.counts import StageCount
from curator_dask.backends.dask import extensions
from curator_dask.backends.dask.adapter import StageAdapter, run_stages
from curator_dask.errors import StageError
from curator_dask.resumability.counters import DeltaLog
from curator_dask.resumability.plugin import TOPIC
from curator_dask.resumability.stage_checkpoints import (
    Candidate,
    CheckpointRecord,
    CheckpointRuntime,
)
from curator_dask.stages.base import ProcessingStage
from curator_dask.stages.model import model_of
from curator_dask.tasks import Task
from curator_dask.utils.unpicklable import RemadeWhenUnpickled

logger = logging.getLogger(__name__)


@dataclass
class GroupResult:
    """What a fusion group hands to the next one: tasks grouped by producing call, and counts.

    ``parked`` holds batches restored from a stage checkpoint, with the index of the group that
    takes them next; ``checkpoint`` is the chain's stage-checkpoint record (``None`` in a run
    without stage checkpoints).
    """

    batches: list[list[Task]]
    counts: dict[int, StageCount] = field(default_factory=dict)
    seconds: float = 0.0
    parked: list[tuple[int, list[list[Task]]]] = field(default_factory=list)
    # sources that saw a FailedTask; without a checkpoint, the task ids of the inputs a
    # FailedTask came from (the driver maps them to their sources)
    failed: set[str] = field(default_factory=set)
    ended: dict[int, float] = field(default_factory=dict)  # stage -> wall clock at group end
    checkpoint: CheckpointRecord | None = None
    # the last group's tasks as one pickle, when the driver keeps them (StageHost.pack_outputs_of)
    packed: bytes | None = None

    def tasks(self) -> list[Task]:
        if self.packed is not None:
            return pickle.loads(self.packed)
        parked = [t for _, batches in self.parked for group in batches for t in group]
        return [t for group in self.batches for t in group] + parked


def pack_tasks(tasks: list[Task]) -> bytes:
    """``tasks`` as one pickle: by value (cloudpickle) at once when a task's class lives in
    ``__main__`` (where Dask would have pickled twice, plain first), else as Dask pickles
    (plain, or cloudpickle where something inside needs it)."""
    if any(type(t).__module__ == "__main__" for t in tasks):
        import cloudpickle

        return cloudpickle.dumps(tasks, protocol=pickle.HIGHEST_PROTOCOL)
    from distributed.protocol.pickle import dumps

    return dumps(tasks)


class PackedSources:
    """A chain's source tasks on their way to its first group, pickled once, on the driver.

    Handed to ``Client.submit`` as the tasks themselves, each source task was pickled on the
    driver's main thread, unpickled by the scheduler (in the driver's event loop, with the
    embedded cluster) and pickled there again for the worker: and twice each time when its
    class lives in ``__main__`` (a script or notebook), since Dask tries the plain pickler
    first. As bytes they cross the scheduler as bytes; the worker unpickles them once
    (:meth:`group_result`). Measured with 200,000 tiny sources on 2 cores, the driver's event
    loop was the bottleneck of the run (benchmarks/RESULTS.md, "scale-memory by output mode").

    Example:
        >>> from curator_dask.tasks import FileGroupTask
        >>> packed = PackedSources.of([FileGroupTask(dataset_name="d", data=["a.jsonl"])])
        >>> [[t.data for t in batch] for batch in packed.group_result().batches]
        [[['a.jsonl']]]
    """

    __slots__ = ("payload",)

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    @classmethod
    def of(cls, tasks: list[Task]) -> PackedSources:
        return cls(pack_tasks(tasks))

    def group_result(self) -> GroupResult:
        """The tasks, one batch each, as the first group's input."""
        return GroupResult(batches=[[task] for task in pickle.loads(self.payload)])

    def __reduce__(self) -> tuple[Any, ...]:
        return (PackedSources, (self.payload,))

    def __sizeof__(self) -> int:
        return object.__sizeof__(self) + len(self.payload)


def node_dir(run_id: str) -> str:
    return os.path.join(tempfile.gettempdir(), "curator-dask", f"run-{run_id}")


@contextlib.contextmanager
def _host_lock(path: str) -> Iterator[None]:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def setup_node_once(run_id: str, stages: list[ProcessingStage], worker_id: str) -> None:
    """Run ``setup_on_node`` of every stage once on this host for ``run_id``."""
    directory = node_dir(run_id)
    done = os.path.join(directory, "node-setup.done")
    if os.path.exists(done):
        return
    with _host_lock(os.path.join(directory, "node-setup.lock")):
        if os.path.exists(done):
            return
        for stage in stages:
            model = model_of(stage)
            stage.setup_on_node(model.node_info(node_id=socket.gethostname()),
                                model.worker_metadata(worker_id=worker_id))
        with open(done, "w") as f:
            f.write(f"{worker_id}\n")


class StageHost(RemadeWhenUnpickled, WorkerPlugin):
    """Holds one run's stages on a worker and runs fusion groups for the driver."""

    _remade: ClassVar[dict[str, Any]] = {"_lock": threading.Lock}
    _lock: threading.Lock

    def __init__(self, run_id: str, stages: list[ProcessingStage], *, counting: bool = False,
                 checkpoints: CheckpointRuntime | None = None, drop_outputs_of: int = -1,
                 pack_outputs_of: int = -1, head: tuple[int, ...] | None = None):
        import cloudpickle

        self.run_id = run_id
        # A host for the head alone (``head``: its stage indices) runs before the run's main
        # host and is removed when the source tasks exist: ``setup_on_node`` of the head's
        # stages only, in a node directory of its own.
        self.head = head
        self.node_key = run_id if head is None else f"{run_id}-head"
        # cloudpickle, not pickle: stages defined in __main__, a notebook, or a module
        # registered with cloudpickle.register_pickle_by_value travel by value to workers
        # that cannot import them (distributed would pickle a plugin by reference).
        self._stages_payload = cloudpickle.dumps(stages)
        self.counting = counting
        self.checkpoints = checkpoints
        # the index of the last fusion group when the driver does not keep the sink's outputs:
        # its tasks are counted, then not sent back
        self.drop_outputs_of = drop_outputs_of
        # the index of the last fusion group when the driver keeps them: sent back as one
        # pickle (``GroupResult.packed``), which the driver unpickles outside Dask's event loop
        self.pack_outputs_of = pack_outputs_of
        self.name = plugin_name(run_id) + ("" if head is None else "-head")
        # Where the plugin runs (set by ``setup``): the stages, this worker's id, and the
        # adapters of the stages it set up, made under the lock.
        self.stages: list[ProcessingStage] = []
        self.worker_id = ""
        self._adapters: dict[int, StageAdapter] = {}
        self._make_remade()  # the lock (each copy of the plugin makes its own)

    def setup(self, worker: Any = None) -> None:
        import cloudpickle

        self.worker_id = str(getattr(worker, "name", "") or getattr(worker, "address", ""))
        self.stages = cloudpickle.loads(self._stages_payload)
        quiet_stage_errors()
        # e.g. NeMo: loguru to the driver, its readers' ids to the scheduler, not Ray
        extensions.notify("worker_setup", host=self, stages=self.stages)

    def teardown(self, worker: Any = None) -> None:
        errors = []
        for index in sorted(self._adapters):
            try:
                self.stages[index].teardown()
            except Exception as exc:  # noqa: BLE001 (tear down every stage, then report)
                errors.append(f"{self.stages[index].name}: {exc!r}")
        self._adapters.clear()
        shutil.rmtree(node_dir(self.node_key), ignore_errors=True)
        extensions.notify("worker_teardown", host=self, stages=self.stages)
        if errors:
            logger.warning("teardown failed on %s: %s", self.worker_id, "; ".join(errors))

    def adapter(self, index: int) -> StageAdapter:
        found = self._adapters.get(index)
        if found is not None:  # set up already: no lock on the per-task path
            return found
        with self._lock:
            found = self._adapters.get(index)
            if found is None:
                on_node = (self.stages if self.head is None
                           else [self.stages[i] for i in self.head])
                setup_node_once(self.node_key, on_node, self.worker_id)
                stage = self.stages[index]
                stage.setup(model_of(stage).worker_metadata(worker_id=self.worker_id))
                found = self._adapters[index] = StageAdapter(self.stages[index])
            return found

    def run_group(
        self,
        group_index: int,
        stage_indices: tuple[int, ...],
        previous: GroupResult | PackedSources,
        resume: dict[str, list[Candidate]] | None = None,
    ) -> GroupResult:
        started = time.perf_counter()
        if isinstance(previous, PackedSources):  # a chain's first group
            previous = previous.group_result()
        adapters = [self.adapter(i) for i in stage_indices]
        deltas = DeltaLog() if self.counting else None
        ck = self.checkpoints
        record = None
        if ck is not None:  # a copy: the record received may be the previous group's, stored
            record = (previous.checkpoint.copy() if previous.checkpoint is not None
                      else CheckpointRecord())
        out = GroupResult(batches=[], counts=dict(previous.counts), seconds=previous.seconds,
                          failed=set(previous.failed), ended=dict(previous.ended),
                          checkpoint=record)
        active = list(previous.batches)
        if ck is not None and record is not None and group_index == 0:
            ck.note_inputs(active, record)
            if resume:
                active, restored = ck.restore(active, resume, deltas, record)
                out.parked.extend(restored)
        for next_group, batches in previous.parked:
            if next_group == group_index:
                active.extend(batches)
            else:
                out.parked.append((next_group, batches))
        if ck is None or record is None:  # (the record exists where ck does)
            # Without a checkpoint no task has a source id: the inputs a FailedTask came from
            # are collected instead, for the driver to name their sources.
            parents: set[str] | None = None if deltas is not None else set()
            out.batches, stage_counts = run_stages(adapters, active, deltas, parents)
            out.failed.update(deltas.failed if deltas is not None else parents or ())
        else:
            stage_counts = [StageCount() for _ in adapters]
            out.batches = ck.run_per_source(group_index, active, partial(run_stages, adapters),
                                            stage_counts, deltas, record, failed=out.failed)
        if deltas:
            # Sent before this task's result: the scheduler sees a parent's deltas first.
            get_worker().log_event(TOPIC, deltas.message(self.run_id))
        out.counts.update(zip(stage_indices, stage_counts, strict=True))
        now = time.time()
        out.ended.update(dict.fromkeys(stage_indices, now))
        out.seconds += time.perf_counter() - started
        if group_index == self.drop_outputs_of:
            out.batches, out.parked = [], []
        elif group_index == self.pack_outputs_of:
            out.packed = pack_tasks(out.tasks())
            out.batches, out.parked = [], []
        return out

    def run_head(self, tasks: list[Task]) -> tuple[list[Task], list[StageCount]]:
        """The head's stages over one batch of initial tasks: the source tasks they make, and
        one ``StageCount`` per head stage. No deltas: sources are opened on the driver."""
        if self.head is None:
            msg = (f"StageHost {self.name!r} holds the run's main stages, not its head: run the "
                   "head on the host made with head=<its stage indices>")
            raise TypeError(msg)
        batches, counts = run_stages([self.adapter(i) for i in self.head], [list(tasks)])
        return [t for group in batches for t in group], counts


class _StageErrorRecords(logging.Filter):
    """distributed logs every failed task at ERROR ("Compute Failed"), the exception's repr
    (its traceback one escaped line) included. For a :class:`StageError` the driver reports
    the same error readably (files, stage, exception, traceback), so that record becomes one
    INFO line of curator_dask here; every other failure is logged as distributed logs it."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if not str(record.msg).startswith("Compute Failed") or len(args) < 4:
            return True
        text = str(args[3])
        prefix = f"{StageError.__name__}("
        if not text.startswith(prefix):
            return True
        try:
            message = str(ast.literal_eval(text[len(prefix):-1]))
        except (ValueError, SyntaxError):
            message = text
        logger.info("task %s failed (the driver reports it): %s", args[0],
                    message.splitlines()[0] if message else text)
        return False


def quiet_stage_errors() -> None:
    """Install :class:`_StageErrorRecords` on ``distributed.worker`` (once per process).

    Example:
        >>> quiet_stage_errors(); quiet_stage_errors()
        >>> sum(isinstance(f, _StageErrorRecords)
        ...     for f in logging.getLogger("distributed.worker").filters)
        1
    """
    target = logging.getLogger("distributed.worker")
    if not any(isinstance(f, _StageErrorRecords) for f in target.filters):
        target.addFilter(_StageErrorRecords())


def plugin_name(run_id: str) -> str:
    return f"curator-dask-stages-{run_id}"


def run_group(
    name: str,
    group_index: int,
    stage_indices: tuple[int, ...],
    previous: GroupResult | PackedSources,
    resume: dict[str, list[Candidate]] | None = None,
) -> GroupResult:
    """The Dask task of one fusion group: find this run's ``StageHost`` and run the group."""
    return host_of(name).run_group(group_index, stage_indices, previous, resume)


def run_head_batch(name: str, tasks: list[Task]) -> tuple[list[Task], list[StageCount]]:
    """The Dask task of one batch of initial tasks through the head (``StageHost.run_head``)."""
    return host_of(name).run_head(tasks)


def host_of(name: str) -> StageHost:
    """This worker's ``StageHost`` plugin ``name`` (the run's, or its head's)."""
    host = get_worker().plugins[name]
    if not isinstance(host, StageHost):
        msg = (f"worker plugin {name!r} is a {type(host).__name__}, not a StageHost: another "
               "plugin was registered under the run's name; give it a name of its own")
        raise TypeError(msg)
    return host
