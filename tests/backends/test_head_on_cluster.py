"""Given initial tasks, the head (the stages up to the source) runs on the cluster.

Before: with ``initial_tasks`` the first stage ran in the driver's process, one call after the
other, and its ``Resources`` were never checked (NeMo's arXiv iterate/extract stage ran that way).
Real LocalCluster processes, real files, a real checkpoint.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from curator_dask import JsonlWriter, Pipeline
from curator_dask.backends.dask.head import run_head
from curator_dask.backends.dask.plan import build_plan
from curator_dask.errors import ResourceUnavailableError
from curator_dask.lineage import assign_root_task_ids
from curator_dask.sample_data import generate_jsonl
from curator_dask.stages.text.io.reader.jsonl import JsonlReaderStage
from curator_dask.tasks import DocumentBatch, FileGroupTask
from tests.backends.dask_test_stages import PassFiles, StampPid, StampPidOnGpu

pytestmark = pytest.mark.slow

N = 12


def _initial() -> list[DocumentBatch]:
    return [DocumentBatch(dataset_name="urls", data=pa.table({"text": [f"document {i}"]}),
                          _metadata={"source_files": [f"/archives/{i}.tar"]})
            for i in range(N)]


def _pids(out: str) -> list[int]:
    rows = []
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            rows.extend(json.loads(line) for line in f)
    return [r["pid"] for r in rows]


def test_the_first_stage_over_initial_tasks_runs_on_the_workers(tmp_path, executor):
    out = str(tmp_path / "out")
    pipeline = Pipeline(name="head").add_stage(StampPid()).add_stage(JsonlWriter(path=out))
    result = pipeline.run(executor=executor, initial_tasks=_initial())
    pids = _pids(out)
    assert len(pids) == N
    workers = set(executor.start().run(os.getpid).values())
    assert os.getpid() not in pids  # before the fix: every row stamped with the driver's pid
    assert set(pids) <= workers
    head = dict(result.stage_counts)["stamp_pid"]
    assert (head.tasks_in, head.tasks_out) == (N, N)

    # the same source ids as the driver's head gives (ids and shards do not depend on where)
    reference = _initial()
    assign_root_task_ids(reference)
    stages = [StampPid(), JsonlWriter(path=str(tmp_path / "unused"))]
    stages[0].is_source_stage, stages[1].is_sink_stage = True, True
    from curator_dask.backends.counts import StageCount

    expected = run_head(stages, build_plan(stages, fuse=True), reference,
                        {0: StageCount(), 1: StageCount()})
    assert sorted(t.task_id.rsplit("_", 1)[0] for t in result) == sorted(
        t.task_id for t in expected)


def test_its_resources_are_checked_before_anything_runs(tmp_path, executor):
    out = tmp_path / "out"
    pipeline = (Pipeline(name="head-gpu").add_stage(StampPidOnGpu())
                .add_stage(JsonlWriter(path=str(out))))
    with pytest.raises(ResourceUnavailableError, match="stamp_pid_gpu"):
        pipeline.run(executor=executor, initial_tasks=_initial())
    assert not out.exists() or not os.listdir(out)


def test_a_checkpointed_run_from_initial_tasks_resumes(tmp_path, executor):
    """Initial file groups through a source stage on the cluster: content ids, recorded in the
    checkpoint, skipped by the next run."""
    paths = sorted(generate_jsonl(str(tmp_path / "in"), files=4, docs_per_file=3, seed=3))
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run():
        initial = [FileGroupTask(dataset_name="in", data=[p]) for p in paths]
        pipeline = (Pipeline(name="head-ckpt").add_stage(PassFiles())
                    .add_stage(JsonlReaderStage()).add_stage(StampPid())
                    .add_stage(JsonlWriter(path=out)))
        return pipeline.run(executor=executor, initial_tasks=initial, checkpoint_path=ckpt)

    first = run()
    assert len(first) == 4 and first.checkpoint["completed_in_run"] == 4
    assert len(os.listdir(out)) == 4
    again = run()
    assert again.skipped_sources == 4 and len(again) == 0
