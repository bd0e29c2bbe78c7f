"""DaskExecutor end to end on a real LocalCluster (worker processes, real files)."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest

from curator_dask import DaskExecutor, Pipeline, ResourceUnavailableError, StageError
from curator_dask.stages.text.io.reader import JsonlReader
from curator_dask.stages.text.io.writer import JsonlWriter
from tests.backends.dask_test_stages import (
    AddLength,
    BatchRecorder,
    DropShort,
    FailOn,
    FailSoft,
    Interval,
    NeedsGpu,
    SplitIntoRows,
    StageWithSetup,
)

pytestmark = pytest.mark.slow


def _read_outputs(out_dir: str) -> dict[str, list[dict]]:
    result = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "*.jsonl"))):
        with open(path) as f:
            result[os.path.basename(path)] = [json.loads(line) for line in f]
    return result


def _fanout_pipeline(input_dir: str, out_dir: str, batch_log: str) -> Pipeline:
    p = Pipeline(name="fanout")
    p.add_stage(JsonlReader(file_paths=input_dir, files_per_partition=2, fields=["id", "text"]))
    p.add_stage(AddLength(column="doc_length_1"))
    p.add_stage(SplitIntoRows())
    p.add_stage(DropShort(min_chars=50))
    p.add_stage(BatchRecorder(log=batch_log, batch_size=3))
    p.add_stage(JsonlWriter(path=out_dir))
    return p


def test_fanout_filter_batch_ids_and_counts(executor, jsonl_input, tmp_path):
    input_dir = os.path.dirname(jsonl_input[0])
    out = str(tmp_path / "out")
    batch_log = str(tmp_path / "batches.log")
    result = _fanout_pipeline(input_dir, out, batch_log).run(executor=executor)

    all_docs = [json.loads(line) for p in jsonl_input for line in Path(p).read_text().splitlines()]
    long_docs = [d for d in all_docs if len(d["text"]) >= 50]
    assert 0 < len(long_docs) < len(all_docs)
    # One output task per kept row; ids: 0_<12 hex>_<reader 0>_<addlen 0>_<row>_<drop 0>_<batch 0>
    assert len(result) == len(long_docs)
    ids = [t.task_id for t in result]
    assert len(set(ids)) == len(ids)
    for task_id in ids:
        seg = task_id.split("_")
        assert seg[0] == "0" and len(seg[1]) == 12 and int(seg[1], 16) >= 0
        assert len(seg) == 8 and "" not in seg
        assert seg[2] == seg[3] == seg[5] == seg[6] == seg[7] == "0"
    # Sink outputs are the writer's FileGroupTasks, one file each, with the kept row.
    written = _read_outputs(out)
    assert len(written) == len(long_docs)
    assert sorted(d["id"] for rows in written.values() for d in rows) == sorted(
        d["id"] for d in long_docs)
    assert all(len(rows) == 1 and rows[0]["doc_length_1"] == len(rows[0]["text"])
               for rows in written.values())
    # Batches never mix tasks from different upstream calls and never exceed batch_size.
    sizes = [int(x) for x in Path(batch_log).read_text().split()]
    assert max(sizes) <= 3 and sum(sizes) == len(long_docs)
    counts = dict(result.stage_counts)
    assert counts["file_partitioning"].tasks_out == 3
    assert counts["jsonl_reader"].tasks_in == 3
    assert counts["split_into_rows"].tasks_out == len(all_docs)
    assert counts["drop_short"].filtered == len(all_docs) - len(long_docs)
    assert counts["jsonl_writer"].tasks_out == len(long_docs)
    assert result.num_sources == 3
    # Every stage's perf record is on the outputs (file_partitioning's is lost at the reader).
    names = [s.stage_name for s in result[0]._stage_perf]
    assert names == ["jsonl_reader", "add_length", "split_into_rows", "drop_short",
                     "batch_recorder", "jsonl_writer"]


def test_fusion_on_and_off_give_identical_ids_and_outputs(executor, jsonl_input, tmp_path):
    from distributed import get_task_stream

    input_dir = os.path.dirname(jsonl_input[0])
    client = executor.start()
    with get_task_stream(client=client) as fused_stream:
        fused = _fanout_pipeline(input_dir, str(tmp_path / "a"), str(tmp_path / "a.log")).run(
            executor=executor)
    with DaskExecutor(client=client, fuse=False, progress=False) as unfused_ex, \
            get_task_stream(client=client) as unfused_stream:
        unfused = _fanout_pipeline(input_dir, str(tmp_path / "b"), str(tmp_path / "b.log")).run(
            executor=unfused_ex)
    assert sorted(t.task_id for t in fused) == sorted(t.task_id for t in unfused)
    assert _read_outputs(str(tmp_path / "a")) == _read_outputs(str(tmp_path / "b"))

    def groups(stream) -> set[str]:  # Dask keys are <group label>-<run>-<source>
        return {str(d["key"]).rsplit("-", 2)[0] for d in stream.data}

    assert len(groups(fused_stream)) == 1 and "+" in next(iter(groups(fused_stream)))
    assert len(groups(unfused_stream)) > 1
    assert not any("+" in g for g in groups(unfused_stream))


def test_setup_on_node_once_per_host_before_setup(executor, jsonl_input, tmp_path):
    log_dir = tmp_path / "setup"
    log_dir.mkdir()
    p = Pipeline(name="setup")
    p.add_stage(JsonlReader(file_paths=os.path.dirname(jsonl_input[0])))
    p.add_stage(StageWithSetup(log_dir=str(log_dir)))
    p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
    result = p.run(executor=executor)
    assert len(result) == len(jsonl_input)
    calls = [line.split() for line in (log_dir / "calls.log").read_text().splitlines()]
    kinds = [c[0] for c in calls]
    assert kinds.count("setup_on_node") == 1
    assert kinds[0] == "setup_on_node"
    setup_pids = [c[1] for c in calls if c[0] == "setup"]
    process_pids = {c[1] for c in calls if c[0] == "process"}
    assert len(setup_pids) == len(set(setup_pids)) == len(process_pids)
    assert set(setup_pids) == process_pids
    assert kinds.count("process") == len(jsonl_input)
    # teardown ran on every worker that set the stage up, after the run
    assert sorted(c[1] for c in calls if c[0] == "teardown") == sorted(setup_pids)


def test_stage_error_names_stage_task_and_traceback(executor, jsonl_input, tmp_path):
    p = Pipeline(name="fails")
    p.add_stage(JsonlReader(file_paths=os.path.dirname(jsonl_input[0])))
    p.add_stage(FailOn(bad_id="2-0"))
    p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
    with pytest.raises(StageError) as info:
        p.run(executor=executor)
    err = info.value
    assert err.stage_name == "fail_on"
    assert len(err.task_ids) == 1 and err.task_ids[0].startswith("0_")
    assert err.task_ids[0].endswith("_0")
    assert "ValueError: boom on 2-0" in str(err)
    assert "Original traceback" in str(err) and "raise ValueError" in err.traceback_text
    # the cluster is still usable after a failed run
    ok = Pipeline(name="ok").add_stage(JsonlReader(file_paths=os.path.dirname(jsonl_input[0])))
    assert len(ok.run(executor=executor)) == len(jsonl_input)


def test_failed_task_is_dropped_and_counted(executor, jsonl_input, tmp_path):
    p = Pipeline(name="soft")
    p.add_stage(JsonlReader(file_paths=os.path.dirname(jsonl_input[0])))
    p.add_stage(FailSoft(bad_id="1-0"))
    p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
    result = p.run(executor=executor)
    assert len(result) == len(jsonl_input) - 1
    assert dict(result.stage_counts)["fail_soft"].failed == 1
    assert len(os.listdir(tmp_path / "out")) == len(jsonl_input) - 1


def test_unsatisfiable_gpu_stage_fails_fast(executor, jsonl_input, tmp_path):
    p = Pipeline(name="gpu")
    p.add_stage(JsonlReader(file_paths=os.path.dirname(jsonl_input[0])))
    p.add_stage(NeedsGpu())
    with pytest.raises(ResourceUnavailableError, match="needs_gpu.*GPU"):
        p.run(executor=executor)
    # before anything ran: no task of the run reached a worker
    assert not executor.start().run_on_scheduler(
        lambda dask_scheduler: [k for k in dask_scheduler.tasks if "needs_gpu" in str(k)])


def test_gpu_stage_runs_on_workers_with_gpu_resource(jsonl_input, tmp_path):
    p = Pipeline(name="gpu")
    p.add_stage(JsonlReader(file_paths=os.path.dirname(jsonl_input[0])))
    p.add_stage(NeedsGpu())
    p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
    from distributed import get_task_stream

    ex = DaskExecutor(n_workers=1, progress=False, cluster_kwargs={"resources": {"GPU": 1}})
    with ex, get_task_stream(client=ex.start()) as stream:
        result = p.run(executor=ex)
    assert len(result) == len(jsonl_input)
    # the GPU stage is its own Dask task (resources differ), between reader and writer
    groups = {str(d["key"]).rsplit("-", 2)[0] for d in stream.data}
    assert groups == {"jsonl_reader", "needs_gpu", "jsonl_writer"}
    assert ex._client is None  # embedded cluster closed after the run


def test_in_flight_window_bounds_concurrency(executor, jsonl_input, tmp_path):
    log = str(tmp_path / "intervals.log")
    p = Pipeline(name="window")
    p.add_stage(JsonlReader(file_paths=os.path.dirname(jsonl_input[0])))
    p.add_stage(Interval(log=log, seconds=0.15))
    with DaskExecutor(client=executor.start(), max_in_flight=1, progress=False) as ex:
        assert len(p.run(executor=ex)) == len(jsonl_input)
    spans = sorted(tuple(map(float, line.split())) for line in Path(log).read_text().splitlines())
    assert len(spans) == len(jsonl_input)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end  # never two chains at once


def test_running_scheduler_by_address(jsonl_input, tmp_path):
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        p = Pipeline(name="address")
        p.add_stage(JsonlReader(file_paths=os.path.dirname(jsonl_input[0])))
        p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
        result = p.run(executor=DaskExecutor(address=cluster.scheduler_address, progress=False))
        assert len(result) == len(jsonl_input)
        # the external cluster is left running
        assert cluster.scheduler_info["workers"]


def test_overwrite_mode_empties_the_output_when_the_run_starts(executor, jsonl_input, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.jsonl").write_text('{"old": 1}\n')
    writer = JsonlWriter(path=str(out), mode="overwrite")
    assert (out / "stale.jsonl").exists()  # building the stage deletes nothing
    p = Pipeline(name="overwrite")
    p.add_stage(JsonlReader(file_paths=os.path.dirname(jsonl_input[0])))
    p.add_stage(writer)
    result = p.run(executor=executor)
    assert sorted(os.listdir(out)) == sorted(os.path.basename(t.data[0]) for t in result)
    assert len(result) == len(jsonl_input)


def test_result_renders_as_a_table_in_notebooks(executor, jsonl_input, tmp_path):
    p = Pipeline(name="repr").add_stage(JsonlReader(file_paths=os.path.dirname(jsonl_input[0])))
    result = p.run(executor=executor)
    html = result._repr_html_()
    assert html.startswith("<table><caption>6 sources (0 skipped), 6 output tasks")
    assert html.count("<tr>") == 1 + 2  # header + file_partitioning + jsonl_reader
    assert ">jsonl_reader</td><td>6</td><td>6</td>" in html
