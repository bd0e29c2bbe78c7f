"""What keeps the driver's memory flat at 10^5-10^6 sources (issue 14, item 1).

Each test checks one mechanism on a real LocalCluster (its scheduler lives in this process, as
the driver's would): output tasks not kept when not asked for, Dask's message logs bounded,
delta messages not kept by the scheduler's event broker, sources opened in the checkpoint a
block at a time, and tasks whose framework fields do not cost a private ``__dict__``. The
numbers themselves are measured by ``benchmarks/bench_scale.py memory``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.resumability.plugin import TOPIC
from curator_dask.tasks import FileGroupTask, Task

pytestmark = pytest.mark.slow


def copy_pipeline(input_dir: str, output_dir: str) -> Pipeline:
    p = Pipeline(name="flat").add_stage(JsonlReader(file_paths=input_dir))
    return p.add_stage(JsonlWriter(path=output_dir))


def test_outputs_not_kept_when_not_asked_for(jsonl_input, tmp_path):
    input_dir = os.path.dirname(jsonl_input[0])
    with DaskExecutor(n_workers=1, progress=False, keep_outputs=False) as executor:
        result = copy_pipeline(input_dir, str(tmp_path / "out")).run(executor=executor)
        assert executor.settings()["keep_outputs"] is False
    assert list(result) == [] and result.num_outputs == 6 and result.num_sources == 6
    assert dict(result.stage_counts)["jsonl_writer"].tasks_out == 6
    assert len(list((tmp_path / "out").glob("*.jsonl"))) == 6  # the work itself is done


def test_outputs_kept_by_default(executor, jsonl_input, tmp_path):
    result = copy_pipeline(os.path.dirname(jsonl_input[0]), str(tmp_path / "out")).run(
        executor=executor)
    assert len(result) == result.num_outputs == 6
    assert all(isinstance(t, FileGroupTask) for t in result)


def test_dask_message_logs_and_delta_events_are_bounded(executor, jsonl_input, tmp_path):
    """The comms keep 16 messages (``cluster.message-log-length``), not Dask's 1,000; the
    scheduler's broker keeps no delta message once the completion plugin has applied it."""
    copy_pipeline(os.path.dirname(jsonl_input[0]), str(tmp_path / "out")).run(
        executor=executor, checkpoint_path=str(tmp_path / "ckpt"))
    client = executor.start()
    assert client.scheduler_comm.recent_message_log.maxlen == 16
    scheduler = executor.cluster.scheduler
    assert scheduler.stream_comms, "no worker streams to check"
    assert {c.recent_message_log.maxlen for c in scheduler.stream_comms.values()} == {16}
    assert scheduler.get_events(TOPIC) == ()


def test_sources_are_opened_a_block_at_a_time(executor, tmp_path):
    """``open_sources(now=False)`` says which are complete and opens none; ``open_block``
    opens the given ones (their +1), as the stream does just before submitting them."""
    from curator_dask.resumability.client import CompletionClient
    from curator_dask.stages.file_partitioning import FilePartitioningStage

    for i in range(5):
        (tmp_path / f"f{i}.jsonl").write_text('{"text": "x"}\n')
    stage = FilePartitioningStage(str(tmp_path), files_per_partition=1)
    sources = list(stage.process(None))
    for t in sources:
        t.task_id = f"0_{t.get_deterministic_id()}"
    client = executor.start()
    completion = CompletionClient(client, "blockrun", str(tmp_path / "ckpt"))
    try:
        plugin = executor.cluster.scheduler.plugins["curator-dask-completion-blockrun"]
        todo, skipped = completion.open_sources(sources, now=False)
        assert (len(todo), skipped) == (5, 0)
        assert plugin.book.pending == {}  # nothing opened yet
        assert [t._source_id for t in todo] == [t.get_source_id() for t in sources]
        completion.open_block(todo[:2])
        assert plugin.book.pending == {t._source_id: 1 for t in todo[:2]}
    finally:
        completion.close()


@dataclass
class Tiny(Task):
    """A source of one integer, as in benchmarks/bench_scale.py."""

    @property
    def num_items(self) -> int:
        return 1

    def validate(self) -> bool:
        return True


def test_framework_fields_keep_the_task_dict_shared():
    """Setting ``task_id`` and ``_source_id`` (as every stage boundary does) costs no memory
    per task: the fields are in the instance from its construction, so its ``__dict__``
    stays a key-sharing one (else about 270 bytes more per task)."""
    import tracemalloc

    tasks = [Tiny(dataset_name="d", data=i) for i in range(2000)]
    tracemalloc.start()
    try:
        for task in tasks:
            task.task_id, task._source_id = "0_1f82e4a37355", "1f82e4a37355"
        grown = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert grown / len(tasks) < 50, f"{grown / len(tasks):.0f} bytes per task"
