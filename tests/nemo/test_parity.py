"""NeMo Curator's own pipeline and stages on ``DaskExecutor``, without Ray, against NeMo's own
semantics (its ``BaseStageAdapter`` in process): the same files, bytes, names and task ids,
NeMo's task classes, ``_stage_perf`` and lifecycle. Mirrors what NeMo Curator's
``tests/backends/test_integration.py`` asserts of each of its backends."""

from __future__ import annotations

import json
import sys

import pytest
from nemo_curator.tasks import FileGroupTask
from nemo_curator.tasks.utils import TaskPerfUtils
from nemo_curator.utils.performance_utils import StagePerfStats

from tests.nemo.nemo_pipelines import (
    CountRows,
    InProcessExecutor,
    LifecycleRecorder,
    curation_pipeline,
    files_of,
    write_input,
)

STAGES = ["file_partitioning", "jsonl_reader", "word_count", "UrlRemover", "add_id",
          "count_rows", "jsonl_writer"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, executor):
    """The curation pipeline (plus a metrics stage) under the reference and under Dask."""
    root = tmp_path_factory.mktemp("parity")
    data = write_input(root / "input")
    reference = curation_pipeline(data, root / "ref", extra=[CountRows()]).run(
        executor=InProcessExecutor())
    dask = curation_pipeline(data, root / "dask", extra=[CountRows()]).run(executor=executor)
    return root, reference, dask


def test_same_files_bytes_and_names(runs):
    root, _, _ = runs
    ref, got = files_of(root / "ref"), files_of(root / "dask")
    assert len(ref) == 3
    assert got == ref  # names and bytes


def test_same_task_ids_and_addid_values(runs):
    root, reference, dask = runs
    assert sorted(t.task_id for t in dask) == sorted(t.task_id for t in reference)
    rows = [json.loads(line) for data in files_of(root / "dask").values()
            for line in data.decode().splitlines()]
    assert rows and all(r["doc_id"].startswith("0_") for r in rows)
    # AddId writes "<task id of its input>_<row>": the lineage ids of NeMo's adapters.
    ref_rows = [json.loads(line) for data in files_of(root / "ref").values()
                for line in data.decode().splitlines()]
    assert sorted(r["doc_id"] for r in rows) == sorted(r["doc_id"] for r in ref_rows)
    assert not any("https://" in r["text"] for r in rows)  # UrlRemover ran
    inputs = [json.loads(line) for data in files_of(root / "input").values()
              for line in data.decode().splitlines()]
    kept = {d["id"] for d in inputs if len(d["text"].split()) >= 6}  # WordCountFilter ran
    assert 0 < len(kept) < len(inputs)
    assert sorted(r["id"] for r in rows) == sorted(kept)


def test_returns_nemo_task_classes(runs):
    _, _, dask = runs
    assert dask and all(type(t) is FileGroupTask for t in dask)  # the writer's output tasks
    assert all(t.data and t.data[0].endswith(".jsonl") for t in dask)


def test_stage_perf_is_nemo_shaped_one_entry_per_stage(runs):
    _, reference, dask = runs
    for task in dask:
        assert [p.stage_name for p in task._stage_perf] == [
            p.stage_name for p in next(r for r in reference if r.task_id == task.task_id
                                       )._stage_perf]
        assert all(type(p) is StagePerfStats for p in task._stage_perf)
    metrics = TaskPerfUtils.collect_stage_metrics(dask)
    assert set(metrics) == set(STAGES) - {"file_partitioning"}  # the reader starts new tasks
    assert {"process_time", "actor_idle_time", "input_data_size_mb",
            "num_items_processed"} <= set(metrics["word_count"])
    # the custom metric the stage logged with _log_metrics, per call
    ref_metrics = TaskPerfUtils.collect_stage_metrics(reference)
    assert sorted(metrics["count_rows"]["custom.rows_seen"]) == sorted(
        ref_metrics["count_rows"]["custom.rows_seen"])
    assert metrics["count_rows"]["custom.rows_seen"].sum() > 0


def test_lifecycle_setup_on_node_once_before_setup_then_teardown(tmp_path, executor):
    logs = tmp_path / "lifecycle"
    logs.mkdir()
    data = write_input(tmp_path / "input", files=4, docs=10)
    pipeline = curation_pipeline(data, tmp_path / "out", add_id=False,
                                 extra=[LifecycleRecorder(log_dir=str(logs))])
    pipeline.run(executor=executor)
    per_process = {p.stem: [line.split(" ", 1) for line in p.read_text().splitlines()]
                   for p in logs.iterdir()}
    timeline = sorted((int(t), what) for calls in per_process.values() for t, what in calls)
    calls = [what for _, what in timeline]
    node, setup = "setup_on_node nemo_curator.backends.base", "setup nemo_curator.backends.base"
    # one node: setup_on_node exactly once, with NeMo's NodeInfo, before any setup
    assert calls.count(node) == 1
    assert calls.index(node) < calls.index(setup)
    for own in per_process.values():
        mine = [what for _, what in own]
        if "process" in mine:  # every process that ran the stage set it up first...
            assert mine.index(setup) < mine.index("process")
            assert mine[-1] == "teardown"  # ...and tore it down at the end of the run
    assert calls.count("process") == 2  # 4 files, 2 per partition


def test_nemo_stays_unimported_by_a_plain_curator_dask_pipeline(tmp_path):
    import subprocess

    code = ("import sys\n"
            "from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline\n"
            f"p = Pipeline().add_stage(JsonlReader(file_paths={str(tmp_path / 'in')!r}))\n"
            f"p.add_stage(JsonlWriter(path={str(tmp_path / 'out')!r}))\n"
            "p.run(executor=DaskExecutor(n_workers=1, progress=False))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('nemo_curator', 'ray')))")
    write_input(tmp_path / "in", files=2, docs=3)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
