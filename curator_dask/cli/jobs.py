"""CLI commands for jobs: status, stop, report, and the job options of ``run``."""

from __future__ import annotations

import argparse
import sys

from curator_dask.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    PROG,
    UsageError,
    add_hidden_verbose,
    add_work_dir,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``status``, ``stop`` and ``report`` parsers to the top-level subparsers."""
    status = sub.add_parser("status", help="show jobs, or one job's progress",
                            description="Without JOB: a table of the jobs in the work dir. "
                                        "With JOB: its state and per-stage counts.")
    status.add_argument("job", nargs="?", metavar="JOB", help="a job id (resume token)")
    add_work_dir(status)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument("--watch", action="store_true",
                        help="a live table, refreshed every 2 s until the job is no longer "
                             "running")
    add_hidden_verbose(status)
    status.set_defaults(func=cmd_status)

    stop = sub.add_parser(
        "stop", help="stop a running job",
        description="Cooperative by default: the driver starts no new sources, lets running "
                    "ones finish, flushes completions and ends in state 'stopped'. --force then "
                    "sends SIGTERM (and SIGKILL after --timeout) to the recorded driver, after "
                    "checking its pid and start time.")
    stop.add_argument("job", metavar="JOB", help="the job id")
    add_work_dir(stop)
    stop.add_argument("--force", action="store_true", help="signal the driver if needed")
    stop.add_argument("--timeout", type=float, default=120, metavar="S",
                      help="seconds to wait for the job to stop (default 120)")
    add_hidden_verbose(stop)
    stop.set_defaults(func=cmd_stop)

    report = sub.add_parser(
        "report", help="write a job's HTML report",
        description="Write a self-contained HTML report of a job: per-stage throughput over "
                    "time, task durations, counts and the event log's warnings, next to Dask's "
                    "performance report for the run when one was recorded.")
    report.add_argument("job", metavar="JOB", help="the job id")
    add_work_dir(report)
    report.add_argument("-o", "--output", metavar="PATH",
                        help="where to write it (default: <job dir>/report.html)")
    add_hidden_verbose(report)
    report.set_defaults(func=cmd_report)


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
    """Without a job: the table of jobs. With one: its state and stages (``--watch``: live)."""
    from curator_dask import config

    work_dir = args.work_dir or config.get("jobs.work-dir")
    if args.job is None:
        return _status_all(work_dir, as_json=args.json)
    return _status_one(work_dir, args.job, as_json=args.json, watch=args.watch)


def _status_all(work_dir: str, *, as_json: bool) -> int:
    import json
    import os

    from curator_dask.jobs.summary import SUMMARY_FILE, read_summary

    rows = []
    names = sorted(os.listdir(work_dir)) if os.path.isdir(work_dir) else []
    for name in names:
        summary = read_summary(os.path.join(work_dir, name, SUMMARY_FILE))
        if summary is not None:
            rows.append({**summary, "state": _job_state(summary)})
    if as_json:
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


def _status_one(work_dir: str, job: str, *, as_json: bool, watch: bool) -> int:
    import json
    import os
    import time

    from curator_dask.jobs.summary import SUMMARY_FILE, read_summary

    path = os.path.join(work_dir, job, SUMMARY_FILE)

    def load() -> dict:
        summary = read_summary(path)
        if summary is None:
            raise UsageError(f"no job {job!r} in {work_dir}")
        summary["state"] = _job_state(summary)
        return summary

    summary = load()
    if as_json:
        # --watch --json: one JSON document per line until the job ends.
        from curator_dask.jobs.view import rates

        while True:
            summary["rates"] = rates(summary)
            print(json.dumps(summary, indent=None if watch else 2), flush=True)
            if not watch or summary["state"] != "running":
                return EXIT_OK
            time.sleep(2)
            summary = load()
    from rich.console import Console
    from rich.live import Live

    from curator_dask.jobs.view import render

    console = Console(width=None if sys.stdout.isatty() else 160)  # piped: no truncation
    if not watch:
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
