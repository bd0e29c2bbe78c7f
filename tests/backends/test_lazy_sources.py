"""Lazy sources (issue 25, item 3): a source stage of the own model may give an iterator, and
the engine pulls from it as its window frees; the driver never holds every source task.

Real LocalCluster processes, real checkpoints. The pull is observed through the work itself:
a stage on the workers writes one marker file per source, and the source generator, running in
the driver, counts the markers that exist when it makes its last task (with a list, all tasks
exist before anything is submitted, so none can). Memory is measured by
``benchmarks/bench_scale.py memory --source lazy``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import pytest

from curator_dask import DaskExecutor, FilePartitioningStage, Pipeline, StageError
from curator_dask.backends.counts import StageCount
from curator_dask.backends.dask.adapter import StageAdapter
from curator_dask.backends.dask.source_feed import LazySourceTasks, process_source
from curator_dask.errors import RunStopped
from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import EmptyTask, FileGroupTask, NoneTask, Task

pytestmark = pytest.mark.slow

EXECUTOR_KWARGS = {"max_in_flight": 2, "max_sources_per_task": 4}  # a small window to pull into


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """The driver pulls 16 sources at a time (4,096 in a real run), so that a run of a few
    hundred sources pulls many times."""
    from curator_dask.backends.dask import source_feed, streaming

    monkeypatch.setattr(source_feed, "CHECK_BLOCK", 16)
    monkeypatch.setattr(streaming, "OPEN_BLOCK", 16)


@dataclass
class Item(Task):
    """One source: ``data`` is its content id."""

    @property
    def num_items(self) -> int:
        return 1

    def validate(self) -> bool:
        return True

    def get_deterministic_id(self) -> str | None:
        return self.data


STOPPING: list = []  # the executor a stage asks to stop (Items.stop_at)


@dataclass
class Items(ProcessingStage):
    """``n`` items, from a generator (``lazy``) or as a list; ``seen`` counts the markers in
    ``marks`` that exist when the last item is made; ``fail_at`` raises there."""

    name: str = "items"
    n: int = 0
    lazy: bool = True
    marks: str = ""
    fail_at: int = -1
    stop_at: int = -1  # asks STOPPING[0] (an executor) to stop there

    def process(self, task):
        made = self._made()
        return made if self.lazy else list(made)

    def _made(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise RuntimeError(f"no item {i}")
            if i == self.stop_at:
                STOPPING[0].request_stop("enough for the test")
            if i == self.n - 1 and self.marks:
                done = len(os.listdir(self.marks))
                with open(os.path.join(self.marks, "seen"), "w") as f:
                    f.write(str(done))
            yield Item(dataset_name="lazy", data=f"item{i:05d}")


@dataclass
class Mark(ProcessingStage):
    """Writes one marker file per task into ``marks`` (on the workers)."""

    name: str = "mark"
    marks: str = ""

    def process(self, task):
        name = task._metadata.get("name", task.data)
        open(os.path.join(self.marks, name), "w").close()
        return task


def pipeline(n: int, marks: str, **items) -> Pipeline:
    return Pipeline(name="lazy").add_stage(Items(n=n, marks=marks, **items)).add_stage(
        Mark(marks=marks))


def seen(marks) -> int:
    return int((marks / "seen").read_text())


def test_a_lazy_source_is_pulled_as_the_window_frees(executor, tmp_path):
    lazy, eager = tmp_path / "lazy", tmp_path / "eager"
    lazy.mkdir(), eager.mkdir()
    got = pipeline(200, str(lazy)).run(executor=executor)
    listed = pipeline(200, str(eager), lazy=False).run(executor=executor)
    # with the generator, sources had been processed before the last one was made
    assert seen(lazy) > 0
    assert seen(eager) == 0  # with a list, every source exists before the first is sent
    # the same outputs, ids and counts either way
    assert sorted(t.task_id for t in got) == sorted(t.task_id for t in listed)
    assert sorted(t.task_id for t in got)[:2] == ["0_item00000_0", "0_item00001_0"]
    assert got.num_sources == listed.num_sources == 200 and got.skipped_sources == 0
    lazy_count, list_count = dict(got.stage_counts)["items"], dict(listed.stage_counts)["items"]
    assert (lazy_count.calls, lazy_count.tasks_in, lazy_count.tasks_out) == (
        list_count.calls, list_count.tasks_in, list_count.tasks_out) == (1, 1, 200)
    assert [p.stage_name for p in got[0]._stage_perf] == ["items", "mark"]


def test_a_checkpointed_lazy_source_skips_what_completed(executor, tmp_path):
    ckpt, marks = str(tmp_path / "ckpt"), tmp_path / "marks"
    marks.mkdir()
    first = pipeline(60, str(marks)).run(executor=executor, checkpoint_path=ckpt)
    assert first.checkpoint["completed"] == 60 and len(first) == 60
    for name in os.listdir(marks):
        os.remove(marks / name)
    second = pipeline(100, str(marks)).run(executor=executor, checkpoint_path=ckpt)
    assert second.num_sources == 100 and second.skipped_sources == 60 and len(second) == 40
    assert sorted(os.listdir(marks)) == sorted(
        [f"item{i:05d}" for i in range(60, 100)] + ["seen"])  # exactly the new ones ran
    assert (second.checkpoint["completed"], second.checkpoint["completed_in_run"]) == (100, 40)
    third = pipeline(100, str(marks)).run(executor=executor, checkpoint_path=ckpt)
    assert third.skipped_sources == 100 and len(third) == 0


def test_a_lazy_source_that_raises_fails_the_run_and_keeps_what_completed(executor, tmp_path):
    ckpt, marks = str(tmp_path / "ckpt"), tmp_path / "marks"
    marks.mkdir()
    with pytest.raises(StageError, match="items") as raised:
        pipeline(100, str(marks), fail_at=70).run(executor=executor, checkpoint_path=ckpt)
    assert "no item 70" in str(raised.value)
    done = {n for n in os.listdir(marks) if n.startswith("item")}
    assert done <= {f"item{i:05d}" for i in range(70)}
    again = pipeline(100, str(marks)).run(executor=executor, checkpoint_path=ckpt)
    # what completed before the error is skipped, the rest runs once
    assert again.skipped_sources + len(again) == 100 and again.skipped_sources > 0


def test_where_the_run_needs_every_source_it_takes_the_list(executor, tmp_path, caplog):
    marks = tmp_path / "marks"
    marks.mkdir()
    with caplog.at_level(logging.DEBUG, logger="curator_dask.backends.dask.source_feed"):
        # file groups in a checkpointed run: the partition record compares them all first
        got = Pipeline(name="files").add_stage(FilesThenMark(n=50, marks=str(marks))).add_stage(
            Mark(marks=str(marks))).run(executor=executor, checkpoint_path=str(tmp_path / "c"))
    assert len(got) == 50 and seen(marks) == 0  # all made before any was sent
    assert "taking them all at once: the checkpoint's partitioning check" in caplog.text
    assert (tmp_path / "c").exists()
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="curator_dask.backends.dask.source_feed"):
        alone = Pipeline(name="alone").add_stage(Items(n=30)).run(executor=executor)
    assert sorted(t.data for t in alone) == [f"item{i:05d}" for i in range(30)]
    assert "taking them all at once: the source stage's tasks are the run's outputs" in (
        caplog.text)


@dataclass
class FilesThenMark(Items):
    """``Items`` as file groups (each names one made-up file)."""

    def _made(self):
        for item in super()._made():
            yield FileGroupTask(dataset_name="lazy", data=[f"/in/{item.data}.jsonl"],
                                _metadata={"name": item.data})


def test_file_partitioning_yields_its_partitions_lazily(jsonl_input, tmp_path):
    stage = FilePartitioningStage(file_paths=os.path.dirname(jsonl_input[0]),
                                  files_per_partition=2)
    made = process_source(StageAdapter(stage), EmptyTask(), StageCount())
    assert isinstance(made, LazySourceTasks) and made.produced == 0
    first = next(made)
    assert made.produced == 1 and isinstance(first, FileGroupTask)
    rest = list(made)
    listed = stage.process(EmptyTask())  # process() still returns NeMo's list
    assert isinstance(listed, list) and [t.data for t in [first, *rest]] == [
        t.data for t in listed]
    assert [t.task_id for t in [first, *rest]] == [f"0_{t.get_deterministic_id()}"
                                                  for t in listed]


def test_a_lazy_source_keeps_positions_of_filtered_outputs_and_refuses_failed_tasks():
    class Mixed(ProcessingStage):
        name = "mixed"

        def process(self, task):
            yield FileGroupTask(dataset_name="d", data=["a"])
            yield None
            yield NoneTask()
            yield Item(dataset_name="d", data=None)  # no content id: its position

    count = StageCount()
    made = list(process_source(StageAdapter(Mixed()), EmptyTask(), count))
    assert [t.task_id.split("_")[1] for t in made][1:] == ["3"]
    assert count.tasks_out == 2 and count.filtered == 2 and count.calls == 1

    from curator_dask.tasks import FailedTask

    class Failing(ProcessingStage):
        name = "failing"

        def process(self, task):
            yield FailedTask()

    with pytest.raises(ValueError, match="FailedTask"):
        list(process_source(StageAdapter(Failing()), EmptyTask(), StageCount()))


def test_a_lazy_source_is_torn_down_when_the_run_ends(executor, tmp_path):
    torn = tmp_path / "torn"

    @dataclass
    class Counted(Items):
        def teardown(self):
            torn.write_text("down")

    marks = tmp_path / "marks"
    marks.mkdir()
    p = Pipeline(name="lazy").add_stage(Counted(n=20, marks=str(marks))).add_stage(
        Mark(marks=str(marks)))
    assert len(p.run(executor=executor)) == 20
    assert torn.read_text() == "down"


def test_a_run_stopped_while_its_lazy_source_still_gives_says_so_and_resumes(tmp_path):
    ckpt, marks = str(tmp_path / "ckpt"), tmp_path / "marks"
    marks.mkdir()
    # a cluster of its own: the run is stopped, in a window of one source
    with DaskExecutor(n_workers=1, progress=False, max_in_flight=1,
                      max_sources_per_task=1) as ex:
        STOPPING[:] = [ex]
        with pytest.raises(RunStopped, match="enough for the test") as stopped:
            pipeline(100, str(marks), stop_at=40).run(executor=ex, checkpoint_path=ckpt)
        assert "its source stage had given so far (it had more)" in str(stopped.value)
        again = pipeline(100, str(marks)).run(executor=ex, checkpoint_path=ckpt)
    # what the stopped run completed is skipped, the rest runs: every source once
    assert again.skipped_sources > 0 and again.skipped_sources + len(again) == 100
    assert again.checkpoint["completed"] == 100


@dataclass
class MarkFile(ProcessingStage):
    """Writes one marker file per file group, named after its file (on the workers)."""

    name: str = "mark_file"
    marks: str = ""

    def process(self, task):
        open(os.path.join(self.marks, os.path.basename(task.data[0])), "w").close()
        return task


@dataclass
class FilesCountingAtTeardown(FilePartitioningStage):
    """``FilePartitioningStage`` that counts the markers when it is torn down: when the run
    took every source (a list), before anything was sent; from a feed, once the last source
    has been pulled."""

    marks: str = ""

    def teardown(self):
        done = len(os.listdir(self.marks))
        with open(os.path.join(self.marks, "seen"), "w") as f:
            f.write(str(done))


def test_checkpointed_file_groups_are_compared_first_and_then_pulled(executor, tmp_path):
    """Issue 35, item 7: with a checkpoint, FilePartitioningStage's file groups are compared
    with the partition record before the first is sent (a refusal still processes nothing),
    from tasks made again, and then pulled as the window frees; the driver never takes the
    whole list."""
    from curator_dask.errors import PartitioningChangedError
    from curator_dask.sample_data import generate_jsonl

    generate_jsonl(str(tmp_path / "in"), files=60, docs_per_file=1, seed=35)
    ckpt, marks = str(tmp_path / "ckpt"), tmp_path / "marks"
    marks.mkdir()

    def run(**grouping):
        stage = FilesCountingAtTeardown(file_paths=str(tmp_path / "in"), marks=str(marks),
                                        **grouping)
        return Pipeline(name="files").add_stage(stage).add_stage(
            MarkFile(marks=str(marks))).run(executor=executor, checkpoint_path=ckpt)

    first = run(limit=40)
    # the stage was torn down after sources had been processed: pulled, not listed first
    assert seen(marks) > 0
    assert first.num_sources == 40 and first.checkpoint["completed"] == 40
    # the totals were known before the first source was sent, as with a list
    assert first.timings["sources_opened"] <= first.timings["first_submit"]
    for name in os.listdir(marks):
        os.remove(marks / name)
    second = run()
    assert second.num_sources == 60 and second.skipped_sources == 40 and len(second) == 20
    assert len([n for n in os.listdir(marks) if n.endswith(".jsonl")]) == 20  # the new ones
    for name in os.listdir(marks):
        os.remove(marks / name)
    with pytest.raises(PartitioningChangedError, match="60 input files of completed"):
        run(files_per_partition=2)
    assert os.listdir(marks) == ["seen"] and seen(marks) == 0  # compared before any was sent
