"""Data-Juicer's job folder, written by curator_dask, so Data-Juicer's own job tools read it.

Owns the layout Data-Juicer 1.6.1's ``ray_partitioned`` executor leaves under
``{work_dir}/{job_id}/`` and the tools of ``data_juicer.utils.job`` read (``JobUtils``,
``python -m data_juicer.utils.job.monitor`` / ``stopper`` / ``snapshot``):

- ``events_{UTC %Y%m%d_%H%M%S}.jsonl``: one JSON object a line, the fields of Data-Juicer's
  ``Event`` in its order, ``None`` left out; ``process_id`` is the driver's pid, which is how
  Data-Juicer's stopper finds the process to stop (it reads every ``process_id`` of the newest
  events file and sends each SIGTERM, then SIGKILL after ``--timeout`` seconds, default 30).
- ``job_summary.json``: created at start with ``status: running`` and ``start_time`` (1.6.1
  only updates an existing one, and its ``JobUtils`` needs both), updated at the end.
- ``dag_execution_plan.json``: Data-Juicer's partitioned DAG (one node per operator and
  partition, one scatter-gather node per whole-dataset operator).
- ``checkpoints/partitioning_info.json``: Data-Juicer's ``PartitioningInfo`` exactly, with the
  ``sha256-sequence-v1`` content hash of every partition's input rows; per-operator checkpoints
  named ``checkpoints/checkpoint_op_XXXX_partition_YYYY.parquet``.
- ``metadata/dataset_mapping.json``: the partitions with their row counts and state, which
  ``JobUtils`` reads to count the partitions not started yet and the samples.

Data-Juicer is not imported: the hashes and formats are reproduced here (the tests compare them
with Data-Juicer's own functions).

Example:
    >>> import tempfile
    >>> folder = DJJobFolder(tempfile.mkdtemp(), "20260805_115141_81270d")
    >>> folder.resume_token_line()[:36]
    'Resume token: 20260805_115141_81270d'
    >>> row_hash({"text": "a"})
    '97f32851a3a22314'
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from curator_dask.data_juicer.partition_record import (
    HASH_ALGORITHM,
    PARTITION_FIELDS,
    batches_hashes,
    content_hash,
    partition_metadata,
    partition_mismatch,
    read_partitioning_info,
    row_hash,
    table_hashes,
    write_json_atomic,
    write_partitioning_info,
)

__all__ = [
    "EVENT_FIELDS",
    "EVENT_TYPES",
    "HASH_ALGORITHM",
    "PARTITION_FIELDS",
    "DJJobFolder",
    "batches_hashes",
    "content_hash",
    "partition_metadata",
    "partition_mismatch",
    "read_partitioning_info",
    "row_hash",
    "table_hashes",
    "write_partitioning_info",
]

# Data-Juicer's EventType values (core/executor/event_logging_mixin.py).
EVENT_TYPES = frozenset({
    "job_start", "job_complete", "job_failed", "job_restart",
    "partition_start", "partition_complete", "partition_failed", "partition_resume",
    "op_start", "op_complete", "op_failed", "checkpoint_save", "checkpoint_load",
    "processing_start", "processing_complete", "processing_error",
    "dag_build_start", "dag_build_complete", "dag_node_ready", "dag_node_start",
    "dag_node_complete", "dag_node_failed", "dag_parallel_group_start",
    "dag_parallel_group_complete", "dag_execution_plan_saved", "dag_execution_plan_loaded",
})

# Data-Juicer's Event dataclass fields, in its order: a record lists them in this order.
EVENT_FIELDS = (
    "event_type", "timestamp", "message", "event_id", "job_id", "partition_id",
    "operation_name", "operation_idx", "status", "duration", "error_message", "stack_trace",
    "retry_count", "checkpoint_path", "op_args", "input_rows", "output_rows", "output_path",
    "partition_meta", "config", "metadata", "total_partitions", "successful_partitions",
    "failed_partitions", "job_duration", "completion_time", "failure_time", "error_type",
    "process_id", "thread_id",
)
_AUTO_FIELDS = frozenset({"event_type", "timestamp", "job_id", "process_id", "thread_id"})
_GLOBAL_OP_PATTERNS = ("deduplicator", "global_", "full_dataset_")
_CHECKPOINT_NAME = re.compile(r"^checkpoint_op_(\d{4,})_partition_(\d{4,})\.parquet$")



# ------------------------------------------------------------------------------- job folder


def _is_parquet_file(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() < 12:  # smaller cannot hold 2 magics and a footer length
                return False
            f.seek(-4, os.SEEK_END)
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def _checkpoint_complete(path: str) -> bool:
    # Data-Juicer (Ray's write_parquet) writes a folder of Parquet files under this name;
    # curator_dask may write one file. Either counts only when every Parquet file is whole.
    if os.path.isdir(path):
        files = [os.path.join(path, n) for n in os.listdir(path) if n.endswith(".parquet")]
        return bool(files) and all(_is_parquet_file(f) for f in files)
    return _is_parquet_file(path)


def _events_file_name() -> str:
    return f"events_{datetime.now(UTC).strftime('%Y%m%d_%H%M%S')}.jsonl"


def _config_file(config: dict[str, Any]) -> str | None:
    value = config.get("config")
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    return None if value is None else str(value)


class DJJobFolder:
    """The job folder ``{work_dir}/{job_id}`` of one Data-Juicer recipe run, in its layout.

    Write events from the driver only: each event carries this process's pid (or the pid that
    :meth:`start` recorded, for a copy sent elsewhere), and Data-Juicer's stopper sends SIGTERM
    to every pid it finds in the newest events file.

    Example:
        >>> import tempfile
        >>> folder = DJJobFolder(tempfile.mkdtemp(), "job1")
        >>> folder.checkpoint_path(3, 1).endswith("checkpoints/checkpoint_op_0003_partition_0001.parquet")
        True
    """  # noqa: E501 (a doctest line)

    def __init__(self, work_dir: str, job_id: str, events_file: str | None = None) -> None:
        self.work_dir = work_dir
        self.job_id = job_id
        self.root = os.path.join(work_dir, job_id)
        self.checkpoint_dir = os.path.join(self.root, "checkpoints")
        self.metadata_dir = os.path.join(self.root, "metadata")
        self.logs_dir = os.path.join(self.root, "logs")
        self.summary_path = os.path.join(self.root, "job_summary.json")
        self.dag_plan_path = os.path.join(self.root, "dag_execution_plan.json")
        self.partitioning_info_path = os.path.join(self.checkpoint_dir, "partitioning_info.json")
        self.dataset_mapping_path = os.path.join(self.metadata_dir, "dataset_mapping.json")
        # One events file per run, as Data-Juicer's EventLogger: a resumed run starts a new
        # one, and the tools read the newest (by modification time).
        self.events_path = os.path.join(self.root, events_file or _events_file_name())
        self.pid: int | None = None
        self._lock = threading.Lock()
        self._mapping: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_path(self, op_index: int, partition_index: int) -> str:
        """Data-Juicer's checkpoint of ``partition_index`` after operator ``op_index``."""
        name = f"checkpoint_op_{op_index:04d}_partition_{partition_index:04d}.parquet"
        return os.path.join(self.checkpoint_dir, name)

    def temp_checkpoint_path(self, op_index: int, partition_index: int) -> str:
        """A path to write a checkpoint to before :meth:`commit_checkpoint` (Data-Juicer's
        name pattern does not match it, so a half-written one is never read)."""
        name = os.path.basename(self.checkpoint_path(op_index, partition_index))
        return os.path.join(self.checkpoint_dir, f".{name}.{uuid.uuid4().hex[:8]}.tmp")

    def commit_checkpoint(self, temp_path: str, op_index: int, partition_index: int) -> str:
        """Move a checkpoint written at ``temp_path`` to its name; returns that path."""
        final = self.checkpoint_path(op_index, partition_index)
        if os.path.isdir(final) and os.path.isdir(temp_path):
            shutil.rmtree(final)  # os.replace cannot replace a non-empty folder
        os.replace(temp_path, final)
        return final

    def latest_checkpoints(self) -> dict[int, int]:
        """Partition index -> highest operator index with a complete checkpoint (Data-Juicer's
        ``find_latest_checkpoint`` for every partition, ignoring incomplete files)."""
        latest: dict[int, int] = {}
        try:
            names = os.listdir(self.checkpoint_dir)
        except FileNotFoundError:
            return latest
        for name in names:
            match = _CHECKPOINT_NAME.match(name)
            if match is None:
                continue
            op_index, part = int(match.group(1)), int(match.group(2))
            if op_index > latest.get(part, -1) and _checkpoint_complete(
                    os.path.join(self.checkpoint_dir, name)):
                latest[part] = op_index
        return latest

    # ------------------------------------------------------------------ events

    def log_event(self, event_type: str, message: str | None = None, **fields: Any,
                  ) -> dict[str, Any]:
        """Append one event to the events file, as Data-Juicer's ``_log_event`` writes it.

        ``fields`` are fields of Data-Juicer's ``Event`` (``partition_id``, ``operation_name``,
        ``metadata``...); ``event_id`` defaults to Data-Juicer's ``{type}_{second}_{8 hex}``.
        Returns the record written.
        """
        if event_type not in EVENT_TYPES:
            msg = (f"{event_type!r} is not a Data-Juicer event type; use one of "
                   f"{sorted(EVENT_TYPES)}")
            raise ValueError(msg)
        unknown = set(fields) - (set(EVENT_FIELDS) - _AUTO_FIELDS)
        if unknown:
            msg = (f"{sorted(unknown)} are not fields of a Data-Juicer event; put them in "
                   f"metadata=")
            raise ValueError(msg)
        now = time.time()
        values = dict(fields, event_type=event_type, timestamp=now, job_id=self.job_id,
                      message=message if message is not None else event_type.replace("_", " "),
                      process_id=self.pid if self.pid is not None else os.getpid(),
                      thread_id=threading.get_ident())
        if values.get("event_id") is None:
            values["event_id"] = f"{event_type}_{int(now)}_{uuid.uuid4().hex[:8]}"
        record = {k: values[k] for k in EVENT_FIELDS if values.get(k) is not None}
        line = json.dumps(record, default=str) + "\n"
        with self._lock:
            os.makedirs(self.root, exist_ok=True)
            # One write call of a line on an O_APPEND file: lines of threads never interleave.
            with open(self.events_path, "a") as f:
                f.write(line)
        return record

    def _dag_node(self, op_name: str, op_index: int, partition_id: int | None) -> str:
        node = f"op_{op_index + 1:03d}_{op_name}"
        return node if partition_id is None else f"{node}_partition_{partition_id}"

    def partition_start(self, partition_id: int, total_partitions: int,
                        resumed_from: int | None = None) -> None:
        """``partition_start`` (and ``partition_resume`` when ``resumed_from`` names the
        operator whose checkpoint it continues from)."""
        self.log_event("partition_start",
                       f"Starting processing of partition {partition_id + 1}/{total_partitions}",
                       partition_id=partition_id)
        if resumed_from is not None:
            self.log_event(
                "partition_resume",
                f"Partition {partition_id} resumed from operation {resumed_from} checkpoint",
                event_id=f"partition_resume_{partition_id}_{int(time.time())}",
                partition_id=partition_id,
                metadata={"resume_operation": resumed_from,
                          "checkpoint_path": self.checkpoint_path(resumed_from, partition_id),
                          "resume_reason": "resume"})
        self._set_partition_state(partition_id, "processing", processing_start_time=time.time())

    def partition_complete(self, partition_id: int, total_partitions: int) -> None:
        """``partition_complete`` of a partition all of whose operators ran."""
        self.log_event("partition_complete",
                       f"Completed processing of partition {partition_id + 1}/{total_partitions}",
                       partition_id=partition_id)
        self._set_partition_state(partition_id, "completed", processing_end_time=time.time())

    def partition_failed(self, partition_id: int, error: str, retry_count: int = 0) -> None:
        """``partition_failed`` as Data-Juicer's ``log_partition_failed`` writes it."""
        self.log_event(
            "partition_failed",
            f"Partition {partition_id} failed after {retry_count} retries: {error}",
            event_id=f"partition_failed_{partition_id}_{int(time.time())}",
            partition_id=partition_id, error_message=error, retry_count=retry_count,
            status="failed",
            metadata={"retry_count": retry_count, "failure_time": time.time(),
                      "error_type": type(error).__name__})
        self._set_partition_state(partition_id, "failed", error_message=error,
                                  processing_end_time=time.time())

    def op_start(self, partition_id: int | None, op_name: str, op_index: int,
                 op_args: dict[str, Any] | None = None) -> None:
        """``op_start`` as Data-Juicer's ``log_op_start`` writes it."""
        self.log_event(
            "op_start",
            f"Operation {op_name} (idx {op_index}) started on partition {partition_id}",
            event_id=f"op_start_{partition_id}_{op_index}_{int(time.time())}",
            partition_id=partition_id, operation_name=op_name, operation_idx=op_index,
            op_args=op_args or {},
            metadata={"operation_idx": op_index, "operation_args": op_args or {},
                      "start_time": time.time(), "operation_class": op_name,
                      "dag_node_id": self._dag_node(op_name, op_index, partition_id)})

    def op_complete(self, partition_id: int | None, op_name: str, op_index: int,
                    duration: float, input_rows: int | None = None,
                    output_rows: int | None = None, checkpoint_path: str | None = None) -> None:
        """``op_complete`` with Data-Juicer's metadata; ``duration`` and the row counts are
        also set at the top level, where ``JobUtils`` reads them (Data-Juicer leaves them 0)."""
        metadata: dict[str, Any] = {"duration_seconds": duration,
                                    "checkpoint_path": checkpoint_path,
                                    "completion_time": time.time(), "operation_class": op_name}
        if input_rows:
            metadata["input_rows"] = input_rows
        if output_rows:
            metadata["output_rows"] = output_rows
        if input_rows and output_rows is not None:
            if duration > 0:
                metadata["throughput_rows_per_second"] = input_rows / duration
            metadata["reduction_ratio"] = (input_rows - output_rows) / input_rows
        metadata["dag_node_id"] = self._dag_node(op_name, op_index, partition_id)
        self.log_event(
            "op_complete",
            f"Operation {op_name} (idx {op_index}) completed on partition {partition_id} "
            f"in {duration:.3f}s",
            event_id=f"op_complete_{partition_id}_{op_index}_{int(time.time())}",
            partition_id=partition_id, operation_name=op_name, operation_idx=op_index,
            status="success", duration=duration, input_rows=input_rows,
            output_rows=output_rows, metadata=metadata)

    def op_failed(self, partition_id: int | None, op_name: str, op_index: int, error: str,
                  retry_count: int = 0) -> None:
        """``op_failed`` as Data-Juicer's ``log_op_failed`` writes it."""
        self.log_event(
            "op_failed",
            f"Operation {op_name} (idx {op_index}) failed on partition {partition_id}: {error}",
            event_id=f"op_failed_{partition_id}_{op_index}_{int(time.time())}",
            partition_id=partition_id, operation_name=op_name, operation_idx=op_index,
            error_message=error, retry_count=retry_count, status="failed",
            metadata={"retry_count": retry_count, "failure_time": time.time(),
                      "error_type": type(error).__name__, "operation_class": op_name,
                      "dag_node_id": self._dag_node(op_name, op_index, partition_id)})

    def checkpoint_saved(self, partition_id: int, op_name: str, op_index: int) -> None:
        """``checkpoint_save`` for the checkpoint of ``partition_id`` after ``op_index``."""
        self._checkpoint_event("checkpoint_save", "saved", "save_time", partition_id, op_name,
                               op_index)

    def checkpoint_loaded(self, partition_id: int, op_name: str, op_index: int) -> None:
        """``checkpoint_load`` for the checkpoint of ``partition_id`` after ``op_index``."""
        self._checkpoint_event("checkpoint_load", "loaded", "load_time", partition_id, op_name,
                               op_index)

    def _checkpoint_event(self, event_type: str, verb: str, time_key: str, partition_id: int,
                          op_name: str, op_index: int) -> None:
        path = self.checkpoint_path(op_index, partition_id)
        self.log_event(
            event_type,
            f"Checkpoint {verb} for operation {op_name} (idx {op_index}) on partition "
            f"{partition_id}",
            event_id=f"{event_type}_{partition_id}_{op_index}_{int(time.time())}",
            partition_id=partition_id, operation_name=op_name, operation_idx=op_index,
            checkpoint_path=path,
            metadata={"checkpoint_path": path, "operation_idx": op_index,
                      "operation_class": op_name, time_key: time.time()})

    # ------------------------------------------------------------------ partitions

    def record_partitions(self, partitions: list[dict[str, Any]], total_rows: int,
                          dataset_path: str | None = None) -> None:
        """Write ``checkpoints/partitioning_info.json`` and ``metadata/dataset_mapping.json``
        (the partitions ``JobUtils`` counts, all pending) for ``partitions`` from
        :func:`partition_metadata`."""
        write_partitioning_info(self.partitioning_info_path, partitions, total_rows)
        now = time.time()
        mapping = {
            "original_dataset_path": dataset_path or "",
            "original_dataset_size": total_rows,
            "partition_count": len(partitions),
            "partition_size": max((p["row_count"] for p in partitions), default=0),
            "mapping_version": "1.0",
            "created_timestamp": now,
            "partitions": [{
                "partition_id": p["partition_id"], "original_start_idx": p["start_row"],
                "original_end_idx": p["end_row"], "sample_count": p["row_count"],
                "file_size_bytes": 0, "checksum": p["content_hash"], "created_timestamp": now,
                "file_path": None, "processing_status": "pending", "error_message": None,
                "processing_start_time": None, "processing_end_time": None, "retry_count": 0,
            } for p in partitions],
        }
        with self._lock:
            self._mapping = mapping
            write_json_atomic(self.dataset_mapping_path, mapping)

    def _set_partition_state(self, partition_id: int, status: str, **fields: Any) -> None:
        with self._lock:
            if self._mapping is None:
                return
            for part in self._mapping["partitions"]:
                if part["partition_id"] == partition_id:
                    part.update(fields, processing_status=status)
            write_json_atomic(self.dataset_mapping_path, self._mapping)

    # ------------------------------------------------------------------ job summary

    def _read_summary(self) -> dict[str, Any]:
        try:
            with open(self.summary_path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _update_summary(self, **fields: Any) -> dict[str, Any]:
        with self._lock:
            summary = self._read_summary()
            summary.update(fields)
            write_json_atomic(self.summary_path, summary)
        return summary

    def start(self, config: dict[str, Any], total_ops: int, *, total_partitions: int | None = None,
              executor_type: str = "dask", resuming: bool = False,
              resumption_command: str | None = None) -> None:
        """Create the folder, ``job_summary.json`` (``status: running``, ``start_time``, this
        process's pid) and the ``job_start`` event, whose ``process_id`` lets Data-Juicer's
        stopper find this process. Call it in the process that must receive SIGTERM."""
        self.pid = os.getpid()
        for folder in (self.root, self.checkpoint_dir, self.metadata_dir, self.logs_dir):
            os.makedirs(folder, exist_ok=True)
        now = time.time()
        previous = self._read_summary() if resuming else {}
        config_file = _config_file(config)
        checkpoint = config.get("checkpoint") or {}
        partition = config.get("partition") or {}
        summary = {
            "job_id": self.job_id,
            "start_time": now,
            "work_dir": self.root,
            "job_dir": self.root,
            "config_file": config_file,
            "executor_type": executor_type,
            "status": "running",
            "resumption_command": resumption_command or (
                f"python -m curator_dask run {config_file or 'RECIPE.yaml'} "
                f"--resume {self.job_id}"),
            "event_log_file": self.events_path,
            "event_log_dir": self.logs_dir,
            "checkpoint_dir": self.checkpoint_dir,
            "metadata_dir": self.metadata_dir,
            "process_id": self.pid,
            "hostname": socket.gethostname(),
            "total_ops": total_ops,
            "total_partitions": total_partitions,
        }
        if previous.get("start_time") is not None:
            summary["original_start_time"] = previous.get("original_start_time",
                                                          previous["start_time"])
        with self._lock:
            write_json_atomic(self.summary_path, summary)
        dataset_info = {k: config[k] for k in ("dataset_path", "dataset") if k in config}
        self.log_event(
            "job_start", "Job started", event_id=f"job_start_{int(now)}", config=config,
            total_partitions=total_partitions,
            metadata={
                "total_partitions": total_partitions,
                "num_partitions": total_partitions,
                "total_ops": total_ops,
                "checkpoint_enabled": checkpoint.get("enabled", True)
                and checkpoint.get("strategy") != "disabled",
                "checkpoint_strategy": checkpoint.get("strategy"),
                "is_resuming": resuming,
                "job_id": self.job_id,
                "config_summary": {**dataset_info, "executor_type": executor_type,
                                   "partition_size": partition.get("size"),
                                   "checkpoint_strategy": checkpoint.get("strategy")},
            })

    def _elapsed(self) -> float:
        start = self._read_summary().get("start_time")
        return time.time() - start if isinstance(start, int | float) else 0.0

    def complete(self, duration: float, export_path: str) -> None:
        """``job_complete`` and ``job_summary.json`` with ``status: completed``."""
        now = time.time()
        self.log_event(
            "job_complete", f"Job completed successfully in {duration:.2f}s",
            event_id=f"job_complete_{int(now)}", status="completed", duration=duration,
            metadata={"status": "completed", "duration_seconds": duration,
                      "completion_time": now, "output_path": export_path})
        self._update_summary(status="completed", end_time=now, duration=duration,
                             error_message=None, export_path=export_path)

    def failed(self, error: str, duration: float | None = None) -> None:
        """``job_failed`` and ``job_summary.json`` with ``status: failed`` and the error."""
        now = time.time()
        took = self._elapsed() if duration is None else duration
        self.log_event(
            "job_failed", f"Job failed: {error}", event_id=f"job_failed_{int(now)}",
            status="failed", error_message=error, duration=took,
            metadata={"status": "failed", "duration_seconds": took, "failure_time": now,
                      "error_type": type(error).__name__})
        self._update_summary(status="failed", end_time=now, duration=took, error_message=error)

    def stopped(self, reason: str = "stop requested") -> None:
        """``job_summary.json`` with ``status: stopped`` (as Data-Juicer's stopper leaves it).
        No event: Data-Juicer has no event type for a stop, and a job without ``job_complete``
        is one its tools (and ``--resume``) treat as resumable."""
        now = time.time()
        self._update_summary(status="stopped", end_time=now, duration=self._elapsed(),
                             stop_time=now, stop_reason=reason)

    # ------------------------------------------------------------------ DAG, token

    def write_dag_plan(self, op_names: list[str], num_partitions: int = 1,
                       convergence_points: list[int] | None = None) -> str:
        """Write ``dag_execution_plan.json`` as Data-Juicer's partitioned strategy plans it and
        log ``dag_execution_plan_saved``; returns its path.

        ``convergence_points`` are the indices of whole-dataset operators (default: the names
        Data-Juicer's ``is_global_operation`` recognises: deduplicators, ``global_*``,
        ``full_dataset_*``).
        """
        if convergence_points is None:
            convergence_points = [i for i, name in enumerate(op_names)
                                  if any(p in name.lower() for p in _GLOBAL_OP_PATTERNS)]
        nodes: dict[str, dict[str, Any]] = {}
        for pid in range(num_partitions):
            for idx, name in enumerate(op_names):
                node = self._dag_node(name, idx, pid)
                nodes[node] = {"node_id": node, "operation_name": name,
                               "node_type": "partition_operation", "partition_id": pid,
                               "execution_order": idx + 1, "dependencies": []}
        sg_nodes = {}
        for idx in convergence_points:
            node = f"sg_{idx:03d}_{op_names[idx]}"
            sg_nodes[idx] = node
            deps = ([self._dag_node(op_names[idx - 1], idx - 1, pid)
                     for pid in range(num_partitions)] if idx > 0 else [])
            nodes[node] = {"node_id": node, "operation_name": op_names[idx],
                           "node_type": "scatter_gather", "partition_id": None,
                           "execution_order": idx + 1, "dependencies": deps}
        for pid in range(num_partitions):
            previous: str | None = None
            for idx, name in enumerate(op_names):
                if idx in sg_nodes:
                    previous = sg_nodes[idx]
                    continue
                node = self._dag_node(name, idx, pid)
                if previous:
                    nodes[node]["dependencies"].append(previous)
                previous = node
        plan = {
            "nodes": {node_id: {
                "node_id": node["node_id"], "operation_name": node["operation_name"],
                "node_type": node["node_type"], "partition_id": node["partition_id"],
                "config": {}, "dependencies": node["dependencies"],
                "execution_order": node["execution_order"], "estimated_duration": 0.0,
                "metadata": {},
            } for node_id, node in nodes.items()},
            "metadata": {"created_at": time.time(), "total_nodes": len(nodes)},
        }
        write_json_atomic(self.dag_plan_path, plan)
        self.log_event(
            "dag_execution_plan_saved", f"DAG execution plan saved to {self.dag_plan_path}",
            event_id=f"dag_execution_plan_saved_{int(time.time())}",
            metadata={"plan_path": self.dag_plan_path, "node_count": len(nodes),
                      "edge_count": 0, "parallel_groups_count": 0, "save_time": time.time()})
        return self.dag_plan_path

    def resume_token_line(self) -> str:
        """The line Data-Juicer logs when a new job with checkpoints starts."""
        return (f"Resume token: {self.job_id}. Rerun the original command with --resume "
                f"{self.job_id} to resume this job.")

