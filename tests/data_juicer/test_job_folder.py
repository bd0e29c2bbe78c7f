"""Data-Juicer's job folder written by curator_dask, read by Data-Juicer's own code and tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator_dask.data_juicer.job_folder import (
    HASH_ALGORITHM,
    DJJobFolder,
    batches_hashes,
    content_hash,
    partition_metadata,
    partition_mismatch,
    read_partitioning_info,
    row_hash,
    table_hashes,
    write_partitioning_info,
)
from curator_dask.errors import PartitionRecordError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROWS = [
    {"text": "Grüße, 世界 🌍 — \"quoted\" \\ back", "meta": {"lang": "de", "score": 0.5,
                                                           "tags": ["a", "b"]}, "n": 1},
    {"text": "", "meta": {"lang": None, "score": -1e-300, "tags": []}, "n": None},
    {"text": "line\nbreak\ttab\u2028sep", "meta": None, "n": 2**62},
    {"text": None, "meta": {"lang": "zh", "score": float("inf"), "tags": None}, "n": -7},
    {"text": "1.0", "meta": {"lang": "", "score": 3.0, "tags": ["ü" * 50]}, "n": 0},
]


def dj_content_hash(table: pa.Table, batch_rows: int) -> tuple[str, int]:
    """Data-Juicer's own hash of ``table``, over batches as Ray hands them to it."""
    from data_juicer.core.executor.ray_executor_partitioned import (
        _combine_partition_hash_partials,
        _hash_partition_batch,
    )

    partials = [_hash_partition_batch(batch).to_pylist()[0]
                for batch in table.to_batches(max_chunksize=batch_rows)]
    return _combine_partition_hash_partials(partials)


def dj_row_hash(row: dict) -> str:
    from data_juicer.core.executor.ray_executor_partitioned import PartitionedRayExecutor

    return PartitionedRayExecutor._compute_row_hash(None, row)  # it uses nothing of self


# ------------------------------------------------------------------------------ hashes


@pytest.mark.parametrize("batch_rows", [1, 2, 5])
def test_content_hash_equals_data_juicers_own(batch_rows: int) -> None:
    table = pa.Table.from_pylist(ROWS)
    rows = table.to_pylist()
    expected, count = dj_content_hash(table, batch_rows)
    assert count == len(rows)
    assert content_hash(rows) == expected
    hashes = table_hashes(table)
    assert hashes == {"content_hash": expected, "first_row_hash": dj_row_hash(rows[0]),
                      "last_row_hash": dj_row_hash(rows[-1]), "num_rows": len(rows)}
    assert batches_hashes(table.to_batches(max_chunksize=batch_rows)) == hashes


def test_row_hash_equals_data_juicers_own_also_where_json_fails() -> None:
    unsortable = {1: "a", "b": 2}  # json.dumps(sort_keys=True) raises: both fall back to str()
    for row in [*ROWS, unsortable, {"when": time.gmtime(0)}, {}]:
        assert row_hash(row) == dj_row_hash(row)
    assert content_hash([unsortable]) != content_hash([{"1": "a", "b": 2}])


def test_content_hash_exact_vector_and_order() -> None:
    # A fixed vector: a change of this value would refuse every resume of a recorded job.
    assert content_hash([{"text": "a"}, {"text": "b"}]) == (
        "f8de2ae83b1b5d6b68f86cd54f78d4a87ff721929bb8ee4d37198f9f88065cd5")
    assert content_hash([{"text": "b"}, {"text": "a"}]) != content_hash(
        [{"text": "a"}, {"text": "b"}])
    empty = table_hashes(pa.table({"text": pa.array([], pa.string())}))
    assert empty["num_rows"] == 0 and empty["first_row_hash"] == ""
    assert empty["content_hash"] == content_hash([])


_SCALARS = st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(
    allow_nan=False) | st.text(max_size=20)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "text": st.text(max_size=40) | st.none(),
    "n": st.integers(-2**63, 2**63 - 1) | st.none(),
    "meta": st.fixed_dictionaries({"x": st.floats(allow_nan=False) | st.none(),
                                   "tags": st.lists(st.text(max_size=5), max_size=3)}),
}), min_size=1, max_size=12), st.integers(1, 5))
def test_content_hash_property_equals_data_juicer(rows: list[dict], batch_rows: int) -> None:
    table = pa.Table.from_pylist(rows)
    expected, _ = dj_content_hash(table, batch_rows)
    assert content_hash(table.to_pylist()) == expected == table_hashes(table)["content_hash"]


# ------------------------------------------------------------------- partitioning_info


def make_partitions(table: pa.Table, bounds: list[int]) -> list[dict]:
    return [partition_metadata(i, start, end, table_hashes(table.slice(start, end - start)))
            for i, (start, end) in enumerate(zip(bounds, bounds[1:], strict=False))]


def test_partitioning_info_is_read_by_data_juicers_loader(tmp_path) -> None:
    from data_juicer.core.executor.ray_executor_partitioned import (
        _PARTITION_CONTENT_HASH_ALGORITHM,
        PartitioningInfo,
        PartitionMetadata,
    )

    table = pa.Table.from_pylist(ROWS)
    parts = make_partitions(table, [0, 2, 4, 5])
    folder = DJJobFolder(str(tmp_path), "job")
    folder.record_partitions(parts, total_rows=5, dataset_path="/data/in.jsonl")
    assert [PartitionMetadata(**p).to_dict() for p in parts] == parts

    info = PartitioningInfo.load(folder.partitioning_info_path)
    assert info is not None and _PARTITION_CONTENT_HASH_ALGORITHM == HASH_ALGORITHM
    assert (info.num_partitions, info.total_rows, info.hash_algorithm, info.deterministic) == (
        3, 5, HASH_ALGORITHM, True)
    assert [p.to_dict() for p in info.partitions] == parts
    with open(folder.partitioning_info_path) as f:
        assert list(json.load(f)) == list(info.to_dict())  # Data-Juicer's keys, its order
    # What Data-Juicer's strict resume checks of each partition.
    for meta, start in zip(info.partitions, [0, 2, 4], strict=True):
        rows = table.slice(meta.start_row, meta.row_count)
        assert meta.start_row == start
        assert dj_content_hash(rows, 2) == (meta.content_hash, meta.row_count)
        assert dj_row_hash(rows.to_pylist()[0]) == meta.first_row_hash


def test_partitioning_info_written_by_data_juicer_is_read(tmp_path) -> None:
    from data_juicer.core.executor.ray_executor_partitioned import (
        PartitioningInfo,
        PartitionMetadata,
    )

    table = pa.Table.from_pylist(ROWS)
    path = str(tmp_path / "partitioning_info.json")
    parts = make_partitions(table, [0, 3, 5])
    PartitioningInfo(num_partitions=2, total_rows=5,
                     partitions=[PartitionMetadata(**p) for p in parts]).save(path)
    data = read_partitioning_info(path)
    assert data["partitions"] == parts
    assert partition_mismatch(parts[1], table_hashes(table.slice(3, 2))) is None
    changed = table_hashes(pa.Table.from_pylist([ROWS[3], {**ROWS[4], "n": 1}]))
    assert "partition 1 (rows 3 to 5)" in partition_mismatch(parts[1], changed)


def test_partitioning_info_refused(tmp_path) -> None:
    table = pa.Table.from_pylist(ROWS)
    parts = make_partitions(table, [0, 2, 5])
    path = str(tmp_path / "p.json")
    with pytest.raises(PartitionRecordError, match="missing"):
        read_partitioning_info(path)
    with pytest.raises(PartitionRecordError, match="PartitionMetadata"):
        write_partitioning_info(path, [{**parts[0], "extra": 1}, parts[1]], 5)
    with pytest.raises(PartitionRecordError, match="cover 5 rows but total_rows is 6"):
        write_partitioning_info(path, parts, 6)
    with pytest.raises(ValueError, match="hashes cover 2 rows"):
        partition_metadata(0, 0, 3, table_hashes(table.slice(0, 2)))
    write_partitioning_info(path, parts, 5)
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
    with open(path) as f:
        data = json.load(f)
    with open(path, "w") as f:
        json.dump({**data, "hash_algorithm": "md5"}, f)
    with pytest.raises(PartitionRecordError, match="'md5'"):
        read_partitioning_info(path)


# ----------------------------------------------------------------------- the job folder


def write_checkpoint(folder: DJJobFolder, op: int, part: int) -> None:
    tmp = folder.temp_checkpoint_path(op, part)
    pq.write_table(pa.table({"text": ["x"]}), tmp)
    folder.commit_checkpoint(tmp, op, part)


def test_checkpoints_as_data_juicer_names_and_finds_them(tmp_path) -> None:
    from data_juicer.utils.ckpt_utils import RayCheckpointManager

    folder = DJJobFolder(str(tmp_path), "job")
    os.makedirs(folder.checkpoint_dir)
    assert folder.latest_checkpoints() == {}
    write_checkpoint(folder, 0, 0)
    write_checkpoint(folder, 2, 0)
    write_checkpoint(folder, 1, 1)
    # As Ray's write_parquet leaves it: a folder of Parquet files under the checkpoint's name.
    os.makedirs(folder.checkpoint_path(0, 2))
    pq.write_table(pa.table({"text": ["y"]}), os.path.join(folder.checkpoint_path(0, 2),
                                                           "part-0.parquet"))
    with open(folder.checkpoint_path(5, 1), "wb") as f:  # killed while writing
        f.write(b"PAR1\x00\x00")
    os.makedirs(folder.checkpoint_path(4, 2))  # an empty folder: nothing written yet
    assert folder.latest_checkpoints() == {0: 2, 1: 1, 2: 0}
    manager = RayCheckpointManager(folder.checkpoint_dir)
    assert manager.resolve_checkpoint_filename(2, 0) == os.path.basename(
        folder.checkpoint_path(2, 0))
    assert manager.find_latest_checkpoint(0)[0] == 2  # Data-Juicer counts names only
    assert manager.find_latest_checkpoint(1)[0] == 5


def test_dag_plan_equals_data_juicers_partitioned_plan(tmp_path) -> None:
    from data_juicer.core.executor.dag_execution_strategies import PartitionedDAGStrategy
    from data_juicer.core.executor.pipeline_dag import PipelineDAG

    class Op:
        def __init__(self, name: str) -> None:
            self._name = name

    names = ["clean_email_mapper", "words_num_filter", "document_deduplicator",
             "text_length_filter"]
    strategy = PartitionedDAGStrategy(3)
    nodes = strategy.generate_dag_nodes([Op(n) for n in names], convergence_points=[2])
    strategy.build_dependencies(nodes, [Op(n) for n in names], convergence_points=[2])
    os.makedirs(tmp_path / "dj")
    dag = PipelineDAG(str(tmp_path / "dj"))
    dag.nodes = nodes
    with open(dag.save_execution_plan()) as f:
        expected = json.load(f)

    folder = DJJobFolder(str(tmp_path), "job")
    with open(folder.write_dag_plan(names, num_partitions=3)) as f:
        ours = json.load(f)
    assert ours["nodes"] == expected["nodes"]
    assert list(ours["nodes"]) == list(expected["nodes"])
    assert ours["metadata"]["total_nodes"] == expected["metadata"]["total_nodes"] == 13
    loaded, theirs = PipelineDAG(folder.root), PipelineDAG(str(tmp_path / "dj"))
    assert loaded.load_execution_plan() and theirs.load_execution_plan()
    assert loaded.get_ready_nodes() == theirs.get_ready_nodes()
    assert "op_001_clean_email_mapper_partition_2" in loaded.get_ready_nodes()


def run_partly(tmp_path) -> DJJobFolder:
    """A job of 3 partitions and 2 operators: partition 0 done, 1 running, 2 not started."""
    table = pa.Table.from_pylist(ROWS)
    folder = DJJobFolder(str(tmp_path), "job1")
    folder.start({"dataset_path": "/data/in.jsonl", "config": ["recipe.yaml"],
                  "checkpoint": {"strategy": "every_op"}}, total_ops=2, total_partitions=3)
    folder.record_partitions(make_partitions(table, [0, 2, 4, 5]), 5, "/data/in.jsonl")
    folder.write_dag_plan(["clean_email_mapper", "words_num_filter"], num_partitions=3)
    folder.partition_start(0, 3)
    for idx, name in enumerate(["clean_email_mapper", "words_num_filter"]):
        folder.op_start(0, name, idx, {"text_key": "text"})
        folder.op_complete(0, name, idx, duration=0.5, input_rows=2, output_rows=2 - idx)
        write_checkpoint(folder, idx, 0)
        folder.checkpoint_saved(0, name, idx)
    folder.partition_complete(0, 3)
    folder.partition_start(1, 3)
    folder.op_start(1, "clean_email_mapper", 0)
    return folder


def test_job_utils_reads_the_job(tmp_path) -> None:
    from data_juicer.core.executor.event_logging_mixin import EventLogger
    from data_juicer.utils.job.common import JobUtils, list_running_jobs
    from data_juicer.utils.job.snapshot import ProcessingSnapshotAnalyzer

    folder = run_partly(tmp_path)
    utils = JobUtils("job1", work_dir=folder.root)
    summary = utils.load_job_summary()
    assert summary["status"] == "running" and summary["start_time"] <= time.time()
    assert summary["process_id"] == os.getpid()
    events = utils.load_event_logs()
    assert {e["event_type"] for e in events} >= {"job_start", "partition_start", "op_start",
                                                 "op_complete", "checkpoint_save",
                                                 "partition_complete",
                                                 "dag_execution_plan_saved"}
    assert all(e["job_id"] == "job1" and e["process_id"] == os.getpid() for e in events)
    assert utils.extract_process_thread_ids()["process_ids"] == {os.getpid()}

    status = utils.get_partition_status()
    assert sorted(status) == [0, 1, 2]
    assert status[0]["status"] == "completed" and status[0]["sample_count"] == 2
    assert [(op["name"], op["idx"], op["output_rows"]) for op in status[0]["completed_ops"]] == [
        ("clean_email_mapper", 0, 2), ("words_num_filter", 1, 1)]
    assert [c["checkpoint_path"] for c in status[0]["checkpoints"]] == [
        folder.checkpoint_path(0, 0), folder.checkpoint_path(1, 0)]
    assert status[1]["status"] == "processing"
    assert status[1]["current_op"]["name"] == "clean_email_mapper"
    assert status[2]["status"] == "pending"
    progress = utils.calculate_overall_progress()
    assert (progress["total_partitions"], progress["completed_partitions"],
            progress["processing_partitions"], progress["total_samples"],
            progress["processed_samples"], progress["job_status"]) == (3, 1, 1, 5, 2, "running")
    assert [j["job_id"] for j in list_running_jobs(str(tmp_path))] == ["job1"]

    snapshot = ProcessingSnapshotAnalyzer(folder.root).generate_snapshot()
    assert snapshot.job_start_time == summary["start_time"]
    assert snapshot.resumable  # a checkpoint_save after its op_complete
    assert snapshot.dag_structure["metadata"]["total_nodes"] == 6

    logger = EventLogger(str(tmp_path / "logs"), job_id="job1", work_dir=folder.root)
    assert not logger.check_job_completion(logger.find_latest_events_file(folder.root))
    folder.partition_complete(1, 3)
    folder.complete(2.5, "/out/result.jsonl")
    assert logger.check_job_completion(logger.find_latest_events_file(folder.root))
    summary = utils.load_job_summary()
    assert (summary["status"], summary["duration"]) == ("completed", 2.5)
    assert utils.calculate_overall_progress()["job_status"] == "completed"


def test_job_failed_and_summary_is_what_data_juicer_updates(tmp_path) -> None:
    from data_juicer.core.executor.event_logging_mixin import EventLoggingMixin

    folder = run_partly(tmp_path)
    folder.failed("worker died")
    with open(folder.summary_path) as f:
        summary = json.load(f)
    assert (summary["status"], summary["error_message"]) == ("failed", "worker died")
    assert summary["resumption_command"] == "python -m curator_dask run recipe.yaml --resume job1"

    class Mixin(EventLoggingMixin):  # Data-Juicer's own update of an existing summary
        def __init__(self, work_dir: str) -> None:
            self.work_dir = work_dir

    Mixin(folder.root)._update_job_summary("failed", error_message="again")
    with open(folder.summary_path) as f:
        assert json.load(f)["error_message"] == "again"


def test_events_are_data_juicers_records(tmp_path) -> None:
    from data_juicer.core.executor.event_logging_mixin import Event, EventType

    folder = run_partly(tmp_path)
    with open(folder.events_path) as f:
        records = [json.loads(line) for line in f]
    for record in records:
        event = Event(**{**record, "event_type": EventType(record["event_type"])})
        expected = {k: (v.value if isinstance(v, EventType) else v)
                    for k, v in event.__dict__.items() if v is not None}
        assert list(record.items()) == list(expected.items())
    ops = [r for r in records if r["event_type"] == "op_complete"]
    assert ops[0]["metadata"]["dag_node_id"] == "op_001_clean_email_mapper_partition_0"
    assert os.path.basename(folder.events_path).startswith("events_")
    with pytest.raises(ValueError, match="not a Data-Juicer event type"):
        folder.log_event("job_stopped")
    with pytest.raises(ValueError, match="not fields of a Data-Juicer event"):
        folder.log_event("job_start", rows=3)


def test_resume_token_line_is_data_juicers() -> None:
    folder = DJJobFolder("/w", "20260805_115141_81270d")
    assert folder.resume_token_line() == (
        "Resume token: 20260805_115141_81270d. Rerun the original command with --resume "
        "20260805_115141_81270d to resume this job.")


# ------------------------------------------------------------------- Data-Juicer's CLIs


def dj_tool(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=REPO)


def test_data_juicer_monitor_shows_the_progress(tmp_path) -> None:
    run_partly(tmp_path)
    done = dj_tool("data_juicer.utils.job.monitor", "job1", "--base-dir", str(tmp_path),
                   "--detailed")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "Status: RUNNING" in out
    assert "Dataset: /data/in.jsonl" in out and "Total Samples: 5" in out
    assert "Progress: 33.3% (1/3 partitions)" in out
    assert "1 completed, 1 processing, 0 failed" in out
    assert "Current: clean_email_mapper (op 0)" in out
    assert "words_num_filter" in out and "Total Checkpoints: 2" in out


CHILD = """
import signal, sys, time
from curator_dask.data_juicer.job_folder import DJJobFolder

folder = DJJobFolder(sys.argv[1], sys.argv[2])

def on_term(signum, frame):
    folder.stopped("received SIGTERM")
    sys.exit(0)

signal.signal(signal.SIGTERM, on_term)
folder.start({"dataset_path": "in.jsonl"}, total_ops=1, total_partitions=1)
folder.partition_start(0, 1)
print("ready", flush=True)
time.sleep(300)
"""


def test_data_juicer_stopper_stops_the_job(tmp_path) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), "job1"],
                             stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout.readline().strip() == "ready"
        # Reap the child as soon as it ends, so the stopper's wait never sees a zombie.
        reaper = threading.Thread(target=child.wait, daemon=True)
        reaper.start()
        done = dj_tool("data_juicer.utils.job.stopper", "job1", "--base-dir", str(tmp_path),
                       "--timeout", "60")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Terminated 1 processes" in done.stdout
        reaper.join(timeout=60)
        assert child.returncode == 0  # it ran its SIGTERM handler: SIGTERM, not SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with open(os.path.join(tmp_path, "job1", "job_summary.json")) as f:
        summary = json.load(f)
    # The stopper rewrites the summary after the process ended, over the child's own "stopped".
    assert (summary["status"], summary["stop_reason"]) == ("stopped", "manual_stop")
    assert summary["process_id"] == child.pid and summary["stop_time"] >= summary["start_time"]
