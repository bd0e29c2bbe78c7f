"""A job folder in Data-Juicer's layout, read as a curator_dask job: ``status``, ``stop`` and
``report`` work on a Data-Juicer recipe run.

A recipe run (``curator_dask/data_juicer/``) writes Data-Juicer's job folder, not this
package's: ``job_summary.json`` with Data-Juicer's keys (``status``, ``start_time``,
``process_id``, ``hostname``, ``total_partitions``, ``error_message``,
``resumption_command``...) and one ``events_<UTC stamp>.jsonl`` per attempt with Data-Juicer's
event records (``event_type``, ``partition_id``, ``operation_name``, ``operation_idx``,
``input_rows``, ``output_rows``, ``duration``...). This module turns both, as plain JSON, into
what the job tools read from a curator_dask job (``job_summary.json``'s ``state``, ``sources``
and ``stages``; ``events.jsonl``'s typed records), so the tools' code stays one:

- a **partition** is a source (``sources``: the job's partitions, done when
  ``partition_complete`` is logged), an **operator** a stage (its rows in and out, dropped,
  the partitions it ran on as tasks, its seconds), an **events file** an attempt (its name's
  stamp is the ``run_id``: Data-Juicer starts a new file for each run of the job);
- the stage counts and the sources describe the newest events file, the attempt the summary
  describes, as ``job_summary.json`` of a curator_dask job does;
- a whole-dataset operator (a ``scatter_gather`` node of ``dag_execution_plan.json``: a
  deduplicator) logs one ``op_complete`` per partition, each with the time of its one run over
  the dataset: its stage time counts that run once;
- Data-Juicer has no record of a driver's start time, so the recorded pid is the driver when
  the process with that pid started before the job did (a recycled pid started later).

Data-Juicer itself is not imported: the folder is read as JSON. A job folder is in this layout
when its summary has ``status`` and no ``state`` (:func:`is_dj_summary`).

Example:
    >>> is_dj_summary({"job_id": "j", "status": "running", "start_time": 1.0})
    True
    >>> is_dj_summary({"job_id": "j", "state": "running"})
    False
"""

from __future__ import annotations

import glob
import json
import os
import socket
import time
from typing import Any

from curator_dask.jobs.summary import SUMMARY_FILE, process_start_time

FORMAT = "data_juicer"  # the summary's ``format``: stop it with SIGTERM, report its partitions
PLAN_FILE = "dag_execution_plan.json"
EVENTS_GLOB = "events_*.jsonl"


def is_dj_summary(data: Any) -> bool:
    """Whether a ``job_summary.json`` is Data-Juicer's: ``status``, and no ``state``."""
    return isinstance(data, dict) and "status" in data and "state" not in data


def is_dj_folder(job_dir: str) -> bool:
    """Whether ``job_dir`` is a job folder in Data-Juicer's layout (its summary is)."""
    return is_dj_summary(_read_json(os.path.join(job_dir, SUMMARY_FILE)))


def event_files(job_dir: str) -> list[str]:
    """The folder's events files, one per attempt, oldest first (their names are UTC stamps,
    so the name order is the time order; the newest is the one Data-Juicer's tools read)."""
    return sorted(glob.glob(os.path.join(glob.escape(job_dir), EVENTS_GLOB)))


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read_lines(path: str) -> list[dict[str, Any]]:
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a torn last line of a killed writer
                if isinstance(record, dict):
                    records.append(record)
    except OSError:
        return []
    return records


def _iso(seconds: Any, millis: bool = False) -> str | None:
    """Epoch seconds as curator_dask writes times (``2026-12-01T21:35:57Z``, events with ms)."""
    if not isinstance(seconds, int | float):
        return None
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return text + (f".{int(seconds * 1000) % 1000:03d}Z" if millis else "Z")


def _run_id(path: str) -> str:
    return os.path.basename(path).removeprefix("events_").removesuffix(".jsonl")


def convergence_ops(job_dir: str) -> set[int]:
    """The indices of the whole-dataset operators (``scatter_gather`` nodes of the plan)."""
    plan = _read_json(os.path.join(job_dir, PLAN_FILE))
    nodes = plan.get("nodes") if isinstance(plan, dict) else None
    return {int(n["execution_order"]) - 1 for n in (nodes or {}).values()
            if isinstance(n, dict) and n.get("node_type") == "scatter_gather"
            and isinstance(n.get("execution_order"), int)}


def _plan_ops(job_dir: str) -> dict[int, str]:
    """Operator index -> name, from the plan (every operator, also those not reached)."""
    plan = _read_json(os.path.join(job_dir, PLAN_FILE))
    nodes = plan.get("nodes") if isinstance(plan, dict) else None
    return {int(n["execution_order"]) - 1: str(n.get("operation_name"))
            for n in (nodes or {}).values()
            if isinstance(n, dict) and isinstance(n.get("execution_order"), int)}


def _stage_names(ops: dict[int, str]) -> dict[int, str]:
    """A unique stage name per operator: its name, with its index where a recipe repeats it."""
    seen: dict[str, int] = {}
    for name in ops.values():
        seen[name] = seen.get(name, 0) + 1
    return {i: name if seen[name] == 1 else f"{name} (op {i})" for i, name in ops.items()}


# ------------------------------------------------------------------------------- event log


def _translate(record: dict[str, Any], names: dict[int, str]) -> dict[str, Any] | None:
    """One Data-Juicer event as the record of this package's event log (``None``: no
    counterpart: DAG bookkeeping, ``partition_resume``...)."""
    kind = record.get("event_type")
    part = record.get("partition_id")
    task = {"scope": "task", "task_id": f"partition {part}"} if part is not None else {}
    idx = record.get("operation_idx")
    name = names.get(idx) if isinstance(idx, int) else None
    stage = {"stage": name or str(record.get("operation_name")), "index": idx}
    if kind == "job_start":
        resuming = (record.get("metadata") or {}).get("is_resuming")
        return {"type": "run_resume" if resuming else "job_start",
                "pid": record.get("process_id"), "total_partitions": record.get(
                    "total_partitions")}
    if kind in ("job_complete", "job_failed"):
        return {"type": kind, "duration": record.get("duration"),
                "error": record.get("error_message")}
    if kind in ("partition_start", "partition_complete", "partition_failed"):
        types = {"partition_start": "source_start", "partition_complete": "source_complete",
                 "partition_failed": "source_failed"}
        return {"type": types[kind], **task, "count": 1, "source_ids": [str(part)],
                "error": record.get("error_message")}
    if kind == "op_start":
        return {"type": "stage_start", **stage, **task}
    if kind == "op_complete":
        rows_in, rows_out = record.get("input_rows"), record.get("output_rows")
        dropped = rows_in - rows_out if isinstance(rows_in, int) and isinstance(
            rows_out, int) else None
        return {"type": "stage_complete", **stage, **task, "ended": record.get("timestamp"),
                "duration": record.get("duration"), "rows_in": rows_in, "rows_out": rows_out,
                "rows_dropped": dropped, "tasks_in": 1, "tasks_out": 1}
    if kind == "op_failed":
        return {"type": "stage_failed", **stage, **task, "error": record.get("error_message")}
    if kind in ("checkpoint_save", "checkpoint_load"):
        return {"type": kind, **stage, **task, "count": 1, "path": record.get("checkpoint_path")}
    return None


def _attempt_events(path: str, names: dict[int, str], job_id: str, seq: int
                    ) -> list[dict[str, Any]]:
    run_id = _run_id(path)
    out: list[dict[str, Any]] = []
    started: set[Any] = set()
    for record in _read_lines(path):
        fields = _translate(record, names)
        if fields is None:
            continue
        if fields["type"] == "stage_start":  # once per stage and attempt, as this log has it
            if fields["stage"] in started:
                continue
            started.add(fields["stage"])
        seq += 1
        out.append({"seq": seq, "job_id": record.get("job_id", job_id), "run_id": run_id,
                    "ts": _iso(record.get("timestamp"), millis=True),
                    **{k: v for k, v in fields.items() if v is not None}})
        if fields["type"] in ("job_start", "run_resume") and fields.get("total_partitions"):
            total = int(fields["total_partitions"])
            seq += 1
            out.append({"seq": seq, "job_id": out[-1]["job_id"], "run_id": run_id,
                        "ts": out[-1]["ts"], "type": "sources_planned", "total": total,
                        "skipped": 0, "to_process": total})
    return out


def events(job_dir: str) -> list[dict[str, Any]]:
    """Every attempt's events, translated to this package's event records, oldest first.

    An attempt whose job summary says ``stopped`` and that logged no end (Data-Juicer has no
    event for a stop) ends with a ``job_stopped`` record at the summary's stop time.
    """
    raw = _read_json(os.path.join(job_dir, SUMMARY_FILE))
    raw = raw if isinstance(raw, dict) else {}
    job_id = str(raw.get("job_id") or os.path.basename(os.path.normpath(job_dir)))
    names = _stage_names(_plan_ops(job_dir))
    out: list[dict[str, Any]] = []
    files = event_files(job_dir)
    for path in files:
        out += _attempt_events(path, names, job_id, out[-1]["seq"] if out else 0)
    ends = {"job_complete", "job_failed", "job_stopped"}
    if (files and raw.get("status") == "stopped"
            and not any(e["type"] in ends for e in out if e["run_id"] == _run_id(files[-1]))):
        out.append({"seq": (out[-1]["seq"] if out else 0) + 1, "job_id": job_id,
                    "run_id": _run_id(files[-1]),
                    "ts": _iso(raw.get("stop_time") or raw.get("end_time"), millis=True),
                    "type": "job_stopped", "error": raw.get("stop_reason")})
    return out


# ------------------------------------------------------------------------------- summary


def stage_rows(records: list[dict[str, Any]], ops: dict[int, str],
               convergence: set[int]) -> list[dict[str, Any]]:
    """Per operator, in recipe order, the stage row of a summary from one attempt's records:
    ``tasks_in``/``tasks_out`` (the partitions it completed on), ``items_in``/``items_out``
    (rows), ``rows_dropped``, ``failed`` (``op_failed``), ``seconds`` and ``sources_done``.
    Every operator of ``ops`` (the plan's) is listed, zeros where none ran.

    Example:
        >>> recs = [{"type": "stage_complete", "stage": "f", "index": 0, "task_id": f"p{i}",
        ...          "rows_in": 10, "rows_out": 7, "duration": 0.5} for i in range(2)]
        >>> row = stage_rows(recs, {0: "f", 1: "g"}, set())[0]
        >>> row["items_in"], row["items_out"], row["rows_dropped"], row["seconds"]
        (20, 14, 6, 1.0)
    """
    names = _stage_names(ops)
    rows: dict[int, dict[str, Any]] = {
        i: {"stage": names[i], "index": i, "tasks_in": 0, "tasks_out": 0, "items_in": 0,
            "items_out": 0, "rows_dropped": 0, "filtered": 0, "failed": 0, "seconds": 0.0,
            "sources_done": 0} for i in sorted(ops)}
    done: dict[int, set[Any]] = {}
    for e in records:
        idx = e.get("index")
        if not isinstance(idx, int) or e.get("type") not in ("stage_complete", "stage_failed"):
            continue
        row = rows.setdefault(idx, {"stage": e.get("stage"), "index": idx, "tasks_in": 0,
                                    "tasks_out": 0, "items_in": 0, "items_out": 0,
                                    "rows_dropped": 0, "filtered": 0, "failed": 0,
                                    "seconds": 0.0, "sources_done": 0})
        if e["type"] == "stage_failed":
            row["failed"] += 1
            continue
        row["tasks_in"] += 1
        row["tasks_out"] += 1
        rows_in, rows_out = e.get("rows_in"), e.get("rows_out")
        row["items_in"] += int(rows_in or 0)
        row["items_out"] += int(rows_out or 0)
        if isinstance(rows_in, int) and isinstance(rows_out, int):
            row["rows_dropped"] += rows_in - rows_out
        seconds = float(e.get("duration") or 0)
        # a whole-dataset operator ran once over every partition: its time counts once
        row["seconds"] = max(row["seconds"], seconds) if idx in convergence else (
            row["seconds"] + seconds)
        done.setdefault(idx, set()).add(e.get("task_id"))
    for idx, tasks in done.items():
        rows[idx]["sources_done"] = len(tasks)
    return [rows[i] for i in sorted(rows)]


def _driver_start(raw: dict[str, Any]) -> float | None:
    """The start time of the recorded driver when it still runs on this host: the process of
    that pid, if it started before the job did (one started later reuses the pid)."""
    pid, started = raw.get("process_id"), raw.get("start_time")
    if raw.get("hostname") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return None
    actual = process_start_time(pid)
    if actual is None or not isinstance(started, int | float) or actual > started + 1.0:
        return None
    return actual


def summary(job_dir: str, raw: dict[str, Any]) -> dict[str, Any]:
    """The summary ``status``, ``stop`` and ``report`` read, from Data-Juicer's ``raw``
    ``job_summary.json`` of ``job_dir`` and its newest events file (the attempt it describes).

    Keys as a curator_dask job's summary: ``job_id``, ``state`` (Data-Juicer's ``status``),
    ``pid``, ``host``, ``process_start`` (see :func:`_driver_start`), ``run_id``, ``started``,
    ``updated``, ``ended``, ``sources`` (the partitions: ``total``, ``skipped``,
    ``to_process``, ``completed``, ``failed``, ``in_flight``), ``stages`` (per operator,
    :func:`stage_rows`), ``failed_stage``, ``error``, ``resume_command``; plus ``format``
    (:data:`FORMAT`) and ``export_path``.
    """
    files = event_files(job_dir)
    run_id = _run_id(files[-1]) if files else None
    ops = _plan_ops(job_dir)
    records = [e for e in events(job_dir) if e["run_id"] == run_id] if files else []
    state = str(raw.get("status") or "?")
    total = raw.get("total_partitions")
    if not isinstance(total, int):
        total = next((e["total"] for e in records if e["type"] == "sources_planned"), 0)

    def partitions(kind: str) -> int:
        return len({e.get("task_id") for e in records if e["type"] == kind})

    completed, failed = partitions("source_complete"), partitions("source_failed")
    open_parts = max(0, partitions("source_start") - completed - failed)
    sources = {"total": total, "skipped": 0, "to_process": total, "completed": completed,
               "failed": failed, "in_flight": open_parts if state == "running" else 0}
    failures = [e for e in records if e["type"] == "stage_failed"]
    mtimes = [os.path.getmtime(p) for p in [os.path.join(job_dir, SUMMARY_FILE), *files[-1:]]
              if os.path.exists(p)]
    error = raw.get("error_message")
    if state == "stopped":
        reason = raw.get("stop_reason") or "stop requested"
        error = (f"{reason}: stopped after {completed} of {total} partitions completed (their "
                 "operators' checkpoints are kept)")
    out: dict[str, Any] = {
        "format": FORMAT, "job_id": raw.get("job_id") or os.path.basename(
            os.path.normpath(job_dir)), "state": state, "pid": raw.get("process_id"),
        "host": raw.get("hostname"), "process_start": _driver_start(raw), "run_id": run_id,
        "started": _iso(raw.get("start_time")), "updated": _iso(max(mtimes, default=None)),
        "ended": _iso(raw.get("end_time")), "ended_at": raw.get("end_time"),
        "processing_started": raw.get("start_time"), "sources": sources,
        "stages": stage_rows(records, ops, convergence_ops(job_dir)),
        "failed_stage": failures[-1].get("stage") if failures else None, "error": error,
        "resume_command": raw.get("resumption_command"), "export_path": raw.get("export_path"),
        "executor_type": raw.get("executor_type"),
    }
    if state in ("failed", "stopped") and open_parts:
        out["cancelled_at_end"] = open_parts  # pending: a resume runs them from checkpoints
    return out


def partition_rows(records: list[dict[str, Any]], run_id: str | None, *, running: bool = True
                   ) -> list[dict[str, Any]]:
    """Per partition, what the attempt ``run_id`` did with it (the report's partition table):
    ``partition``, ``state`` (``completed``, ``failed``, else ``running``, or ``not finished``
    when the attempt is not ``running``: it stays pending), ``rows_in`` (of the first operator
    it ran), ``rows_out`` (of the last), ``operators`` run, ``seconds`` (their time,
    whole-dataset operators included with their whole run) and ``resumed_after`` (the operator
    whose checkpoint it started from).

    Example:
        >>> recs = [{"run_id": "r", "type": "source_start", "task_id": "partition 0"},
        ...         {"run_id": "r", "type": "checkpoint_load", "task_id": "partition 0",
        ...          "stage": "a"},
        ...         {"run_id": "r", "type": "stage_complete", "task_id": "partition 0",
        ...          "stage": "b", "rows_in": 5, "rows_out": 3, "duration": 0.25}]
        >>> row = partition_rows(recs, "r")[0]
        >>> row["state"], row["rows_in"], row["rows_out"], row["resumed_after"]
        ('running', 5, 3, 'a')
    """
    parts: dict[str, dict[str, Any]] = {}
    for e in records:
        if e.get("run_id") != run_id or not e.get("task_id"):
            continue
        p = parts.setdefault(str(e["task_id"]), {
            "partition": str(e["task_id"]), "state": "running" if running else "not finished",
            "rows_in": None,
            "rows_out": None, "operators": 0, "seconds": 0.0, "resumed_after": None})
        kind = e.get("type")
        if kind == "checkpoint_load":
            p["resumed_after"] = e.get("stage")
        elif kind == "stage_complete":
            if p["rows_in"] is None:
                p["rows_in"] = e.get("rows_in")
            p["rows_out"] = e.get("rows_out")
            p["operators"] += 1
            p["seconds"] += float(e.get("duration") or 0)
        elif kind == "source_complete":
            p["state"] = "completed"
        elif kind in ("source_failed", "stage_failed"):
            p["state"] = "failed"
    return list(parts.values())
