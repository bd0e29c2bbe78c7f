"""``StageHost``: the worker plugin that owns stage objects and their lifecycle on a worker.

- ``setup_on_node`` runs once per host, for every stage, before any ``setup`` on that host
  (an exclusive file lock in the host's temp directory orders the worker processes);
- ``setup`` runs once per worker per stage, the first time the worker runs that stage;
- ``teardown`` runs on each worker for the stages it set up, when the plugin is removed at the
  end of the run.

Stages travel to each worker once, with the plugin, not with every task.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from distributed import WorkerPlugin, get_worker

from curator_dask.backends.dask.adapter import StageAdapter, StageCount, run_stages
from curator_dask.resumability.counters import DeltaLog
from curator_dask.resumability.plugin import TOPIC
from curator_dask.stages.base import NodeInfo, ProcessingStage, WorkerMetadata
from curator_dask.tasks import Task

logger = logging.getLogger(__name__)


@dataclass
class GroupResult:
    """What a fusion group hands to the next one: tasks grouped by producing call, and counts."""

    batches: list[list[Task]]
    counts: dict[int, StageCount] = field(default_factory=dict)
    seconds: float = 0.0

    def tasks(self) -> list[Task]:
        return [t for group in self.batches for t in group]


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
        node = NodeInfo(node_id=socket.gethostname())
        meta = WorkerMetadata(worker_id=worker_id)
        for stage in stages:
            stage.setup_on_node(node, meta)
        with open(done, "w") as f:
            f.write(f"{worker_id}\n")


class StageHost(WorkerPlugin):
    """Holds one run's stages on a worker and runs fusion groups for the driver."""

    def __init__(self, run_id: str, stages: list[ProcessingStage], *, counting: bool = False):
        import cloudpickle

        self.run_id = run_id
        # cloudpickle, not pickle: stages defined in __main__, a notebook, or a module
        # registered with cloudpickle.register_pickle_by_value travel by value to workers
        # that cannot import them (distributed would pickle a plugin by reference).
        self._stages_payload = cloudpickle.dumps(stages)
        self.counting = counting
        self.name = plugin_name(run_id)

    def setup(self, worker: Any = None) -> None:
        import cloudpickle

        self.stages = cloudpickle.loads(self._stages_payload)
        self.worker_id = str(getattr(worker, "name", "") or getattr(worker, "address", ""))
        self._lock = threading.Lock()
        self._adapters: dict[int, StageAdapter] = {}

    def teardown(self, worker: Any = None) -> None:
        errors = []
        for index in sorted(self._adapters):
            try:
                self.stages[index].teardown()
            except Exception as exc:  # noqa: BLE001 (tear down every stage, then report)
                errors.append(f"{self.stages[index].name}: {exc!r}")
        self._adapters.clear()
        shutil.rmtree(node_dir(self.run_id), ignore_errors=True)
        if errors:
            logger.warning("teardown failed on %s: %s", self.worker_id, "; ".join(errors))

    def adapter(self, index: int) -> StageAdapter:
        with self._lock:
            found = self._adapters.get(index)
            if found is None:
                setup_node_once(self.run_id, self.stages, self.worker_id)
                self.stages[index].setup(WorkerMetadata(worker_id=self.worker_id))
                found = self._adapters[index] = StageAdapter(self.stages[index])
            return found

    def run_group(self, stage_indices: tuple[int, ...], previous: GroupResult) -> GroupResult:
        started = time.perf_counter()
        adapters = [self.adapter(i) for i in stage_indices]
        deltas = DeltaLog() if self.counting else None
        batches, stage_counts = run_stages(adapters, previous.batches, deltas)
        if deltas:
            # Sent before this task's result: the scheduler sees a parent's deltas first.
            get_worker().log_event(TOPIC, deltas.message(self.run_id))
        counts = dict(previous.counts)
        counts.update(zip(stage_indices, stage_counts, strict=True))
        seconds = previous.seconds + time.perf_counter() - started
        return GroupResult(batches=batches, counts=counts, seconds=seconds)


def plugin_name(run_id: str) -> str:
    return f"curator-dask-stages-{run_id}"


def run_group(name: str, stage_indices: tuple[int, ...], previous: GroupResult) -> GroupResult:
    """The Dask task of one fusion group: find this run's ``StageHost`` and run the group."""
    host: StageHost = get_worker().plugins[name]
    return host.run_group(stage_indices, previous)
