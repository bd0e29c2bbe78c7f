"""The package's Dask plugins create all their state in ``__init__`` (issue 23, item 5), as
distributed's own do: a hook that runs before another (``teardown`` of a ``StageHost`` whose
``setup`` failed, ``close`` of a scheduler plugin that never started) finds every attribute,
and each plugin still pickles on its way to the workers or the scheduler.

The end-to-end case is real: a stage that cannot be unpickled on a worker (its
``__setstate__`` raises in any process but the driver) makes the ``StageHost``'s ``setup``
fail on every worker of a real LocalCluster.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
from dataclasses import dataclass, field
from typing import Any

import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from curator_dask.backends.dask.worker import StageHost
from curator_dask.ids.generator import IdGeneratorBase
from curator_dask.ids.plugin import IdGeneratorPlugin, to_wire
from curator_dask.resumability.plugin import CompletionPlugin
from curator_dask.sample_data import generate_jsonl
from curator_dask.stages.base import ProcessingStage

UNPICKLE_ERROR = "this stage cannot be unpickled outside the driver"


@dataclass
class OnlyOnTheDriver(ProcessingStage):
    """Unpickles only in the process that made it: on a worker, ``StageHost.setup`` fails."""

    name: str = "only_on_the_driver"
    driver_pid: int = field(default_factory=os.getpid)

    def process(self, task: Any) -> Any:
        return task

    def __setstate__(self, state: dict[str, Any]) -> None:
        if os.getpid() != state["driver_pid"]:
            raise RuntimeError(UNPICKLE_ERROR)
        self.__dict__.update(state)


@dataclass
class Passing(ProcessingStage):
    name: str = "passing"

    def process(self, task: Any) -> Any:
        return task


class FakeScheduler:
    """A stand-in for ``distributed.Scheduler`` (as in tests/resumability/test_plugin_hooks.py):
    only what the scheduler plugins touch in ``start`` and ``close``."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}
        self.plugins: dict[str, Any] = {}

    def remove_plugin(self, name: str) -> None:
        self.plugins.pop(name, None)


def test_stage_host_teardown_without_setup_or_after_a_failed_one():
    host = StageHost("run-a", [Passing()])
    host.teardown()  # setup never ran on this copy

    shipped = pickle.loads(pickle.dumps(StageHost("run-b", [OnlyOnTheDriver(driver_pid=-1)])))
    with pytest.raises(RuntimeError, match=UNPICKLE_ERROR):
        shipped.setup()
    shipped.teardown()  # nothing was set up: nothing to tear down, nothing raised


def test_stage_host_gains_no_attribute_where_it_runs():
    host = StageHost("run-c", [Passing(), Passing(name="second")])
    shipped = pickle.loads(pickle.dumps(host))  # as distributed sends it to a worker
    made = set(vars(shipped))
    assert made == set(vars(host))
    shipped.setup()
    shipped.adapter(1)
    shipped.teardown()
    assert set(vars(shipped)) == made


def test_scheduler_plugins_gain_no_attribute_in_start(tmp_path):
    async def body() -> None:
        plugins = [
            CompletionPlugin(str(tmp_path / "ckpt"), "run-d", writer_id="w", flush_interval=0.01),
            IdGeneratorPlugin("0123456789ab", to_wire(IdGeneratorBase())),
        ]
        for plugin in plugins:
            await plugin.close()  # never started: nothing to close
            shipped = pickle.loads(pickle.dumps(plugin))  # as register_plugin sends it
            made = set(vars(shipped))
            assert made == set(vars(plugin)), type(plugin).__name__
            scheduler = FakeScheduler()
            scheduler.plugins[shipped.name] = shipped
            await shipped.start(scheduler)
            assert set(vars(shipped)) == made, type(plugin).__name__
            await shipped.close()

    asyncio.run(body())


@pytest.mark.slow
def test_a_stage_that_cannot_reach_the_workers_fails_with_its_own_error(executor, tmp_path,
                                                                         caplog):
    generate_jsonl(str(tmp_path / "in"), files=2, docs_per_file=2, seed=3)
    pipeline = (Pipeline(name="unpicklable")
                .add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
                .add_stage(OnlyOnTheDriver())
                .add_stage(JsonlWriter(path=str(tmp_path / "out"))))
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError, match=UNPICKLE_ERROR):
        pipeline.run(executor)
    client = executor.client
    # Every StageHost still registered is removed, as the cluster's close would: each worker
    # runs its teardown now, while its log can still be read.
    left = client.run_on_scheduler(
        lambda dask_scheduler: [n for n in dask_scheduler.worker_plugins
                                if n.startswith("curator-dask-stages-")])
    for name in left:
        client.unregister_worker_plugin(name)
    logs = [text for records in client.get_worker_logs().values() for _, text in records]
    assert any("failed to setup" in text and UNPICKLE_ERROR in text for text in logs), logs
    spurious = [t for t in logs if "failed to teardown" in t or "_adapters" in t]
    assert not spurious, spurious
    assert "Could not remove worker plugin" not in caplog.text
