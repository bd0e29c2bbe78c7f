"""CLI commands for jobs and checkpoints: status, stop, checkpoint inspect, job options."""

from __future__ import annotations

import argparse
import sys

from curator_dask.cli.common import EXIT_FAILED, EXIT_OK, PROG, UsageError


def job_kwargs(args: argparse.Namespace) -> dict:
    """Job options for Pipeline.run; the resume hint repeats this command line."""
    import shlex

    if args.no_job:
        if args.resume or args.job_id:
            raise UsageError("--no-job cannot be combined with --resume or --job-id")
        return {}
    kept, skip = [], False
    for token in args.argv:
        if skip:
            skip = False
            continue
        if token in ("--resume", "--job-id"):
            skip = True
            continue
        if token.startswith(("--resume=", "--job-id=")):
            continue
        kept.append(token)
    from curator_dask import config

    return {"work_dir": args.work_dir or config.get("jobs.work-dir"), "job_id": args.job_id,
            "resume": args.resume,
            "verify_content": args.verify_content,
            "command": f"{PROG} " + shlex.join(kept)}


def _job_state(summary: dict) -> str:
    """The recorded state, or ``running (driver gone)`` when its driver (checked by pid and
    start time, on its host) no longer exists."""
    import socket

    from curator_dask.jobs.control import is_recorded_driver

    state = summary.get("state", "?")
    if (state == "running" and summary.get("host") == socket.gethostname()
            and not is_recorded_driver(summary)):
        return "running (driver gone)"
    return state


def cmd_status(args: argparse.Namespace) -> int:
    import json
    import os
    import time

    from curator_dask import config
    from curator_dask.jobs.summary import SUMMARY_FILE, read_summary

    work_dir = args.work_dir or config.get("jobs.work-dir")
    if args.job is None:
        rows = []
        names = sorted(os.listdir(work_dir)) if os.path.isdir(work_dir) else []
        for name in names:
            summary = read_summary(os.path.join(work_dir, name, SUMMARY_FILE))
            if summary is not None:
                rows.append({**summary, "state": _job_state(summary)})
        if args.json:
            print(json.dumps(rows, indent=2))
            return EXIT_OK
        if not rows:
            print(f"no jobs in {work_dir}")
            return EXIT_OK
        from rich.console import Console
        from rich.table import Table

        table = Table(show_edge=False, header_style="bold")
        for column in ("job", "state", "started", "ended", "sources", "skipped", "completed",
                       "failed"):
            table.add_column(column, justify="left" if column in ("job", "state") else "right")
        for r in rows:
            src = r.get("sources") or {}
            table.add_row(r["job_id"], r["state"], str(r.get("started", "")),
                          str(r.get("ended") or ""),
                          *(str(src.get(k, "")) for k in ("total", "skipped", "completed",
                                                          "failed")))
        Console(width=None if sys.stdout.isatty() else 160).print(table)
        return EXIT_OK
    path = os.path.join(work_dir, args.job, SUMMARY_FILE)

    def load() -> dict:
        summary = read_summary(path)
        if summary is None:
            raise UsageError(f"no job {args.job!r} in {work_dir}")
        summary["state"] = _job_state(summary)
        return summary

    summary = load()
    if args.json:
        # --watch --json: one JSON document per line until the job ends.
        while True:
            from curator_dask.jobs.view import rates

            summary["rates"] = rates(summary)
            print(json.dumps(summary, indent=None if args.watch else 2), flush=True)
            if not args.watch or summary["state"] != "running":
                return EXIT_OK
            time.sleep(2)
            summary = load()
    from rich.console import Console
    from rich.live import Live

    from curator_dask.jobs.view import render

    console = Console(width=None if sys.stdout.isatty() else 160)  # piped: no truncation
    if not args.watch:
        console.print(render(summary))
        return EXIT_OK
    with Live(render(summary), console=console, refresh_per_second=2) as live:
        while summary["state"] == "running":
            time.sleep(2)
            summary = load()
            live.update(render(summary))
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    import os
    import signal

    from curator_dask import config
    from curator_dask.jobs.control import (
        StopError,
        cancel_run_tasks,
        request_stop,
        signal_driver,
        wait_for_state,
    )
    from curator_dask.jobs.summary import SUMMARY_FILE, read_summary

    job_dir = os.path.join(args.work_dir or config.get("jobs.work-dir"), args.job)
    summary = read_summary(os.path.join(job_dir, SUMMARY_FILE))
    if summary is None:
        raise UsageError(f"no job {args.job!r} in {os.path.dirname(job_dir)}")
    if summary.get("state") != "running":
        print(f"job {args.job} is not running (state: {summary.get('state')})")
        return EXIT_OK
    request_stop(job_dir)
    state = wait_for_state(job_dir, args.timeout if not args.force else min(args.timeout, 5))
    if state == "running" and args.force:
        try:
            n = cancel_run_tasks(read_summary(os.path.join(job_dir, SUMMARY_FILE)) or {},
                                 timeout=max(1.0, min(args.timeout, 10.0)))
            print(f"cancelled {n} Dask tasks of the run on its scheduler")
            state = wait_for_state(job_dir, args.timeout)
        except StopError as exc:
            print(f"{PROG} stop: could not cancel through the scheduler: {exc}",
                  file=sys.stderr)
    if state == "running" and args.force:
        try:
            pid = signal_driver(job_dir, signal.SIGTERM)
            print(f"sent SIGTERM to driver {pid}")
            state = wait_for_state(job_dir, args.timeout)
            if state == "running":
                signal_driver(job_dir, signal.SIGKILL)
                print(f"sent SIGKILL to driver {pid}")
                state = "killed"
        except StopError as exc:
            print(f"{PROG} stop: {exc}", file=sys.stderr)
            return EXIT_FAILED
    print(f"job {args.job}: {state}")
    return EXIT_OK if state != "running" else EXIT_FAILED


def cmd_checkpoint_inspect(args: argparse.Namespace) -> int:
    import json

    from curator_dask.resumability.inspect import inspect_checkpoint, map_partitions

    if args.files_per_partition is not None and args.blocksize is not None:
        raise UsageError("--files-per-partition and --blocksize are exclusive (as in readers)")
    report = inspect_checkpoint(args.path)
    if args.input:
        map_partitions(report, args.input, files_per_partition=args.files_per_partition,
                       blocksize=args.blocksize, file_extensions=args.extensions)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return EXIT_OK
    print(f"checkpoint: {report.checkpoint}")
    print(f"metadata:   {report.metadata_dir}")
    print(f"writer files: {len(report.writers)}")
    for w in report.writers:
        state = f"{w.completed} completed" if w.error is None else f"UNREADABLE ({w.error})"
        print(f"  {w.path}  {w.size} bytes  {state}")
    print(f"completed sources (union): {len(report.completed)}")
    if report.partitions is not None:
        done = sum(p.complete for p in report.partitions)
        print(f"input: {len(report.partitions)} partitions: {done} complete, "
              f"{len(report.partitions) - done} pending")
        for p in report.partitions:
            mark = "complete" if p.complete else "pending "
            print(f"  {mark}  {p.source_id}  {', '.join(p.files)}")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    import os

    from curator_dask import config
    from curator_dask.jobs.report import write_report

    job_dir = os.path.join(args.work_dir or config.get("jobs.work-dir"), args.job)
    if not os.path.isfile(os.path.join(job_dir, "events.jsonl")):
        raise UsageError(f"no job {args.job!r} in {os.path.dirname(job_dir)}")
    try:
        path = write_report(job_dir, args.output)
    except ImportError as exc:
        raise UsageError(f"{exc}; install it with: pip install 'curator_dask[dashboard]'") from None
    print(path)
    return EXIT_OK
