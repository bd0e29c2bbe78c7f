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
    status = sub.add_parser(
        "status", help="show jobs, or one job's progress",
        description="Without JOB: a table of the jobs in the work dir and of the running jobs "
                    "in the per-user job index (every job is recorded there when it starts, so "
                    "this works from any directory), each with its work dir; --all lists every "
                    "job of the index. With JOB: its state and per-stage counts; JOB is looked "
                    "up in the work dir, then in the index (or give the job's folder). The "
                    "index is $CURATOR_DASK_JOB_INDEX, default "
                    "$XDG_STATE_HOME/curator_dask/jobs.json (~/.local/state/...).")
    status.add_argument("job", nargs="?", metavar="JOB",
                        help="a job id (resume token) or a job's folder")
    add_work_dir(status)
    status.add_argument("--all", action="store_true", dest="all_jobs",
                        help="without JOB: every job of the job index, not only the work "
                             "dir's and the running ones")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument("--watch", action="store_true",
                        help="redraw every --interval seconds: with JOB until the job is no "
                             "longer running (or Ctrl+C), without JOB (the jobs table) until "
                             "Ctrl+C")
    status.add_argument("--interval", type=float, metavar="S",
                        help="seconds between redraws (default 2); implies --watch")
    status.add_argument("--detailed", action="store_true",
                        help="with JOB: also per stage (its first Dask task, Dask tasks, "
                             "whether it raised, stage checkpoints) and per partition (each "
                             "Dask task of sources: state, sources done and failed, when it "
                             "was submitted and ended), from the event log")
    add_hidden_verbose(status)
    status.set_defaults(func=cmd_status)

    stop = sub.add_parser(
        "stop", help="stop a running job",
        description="Leaves a stop request in the job folder for the running attempt; its "
                    "driver notices it within half a second, starts no new sources, lets "
                    "running ones finish (config execution.drain-timeout), flushes completions "
                    "and ends in state 'stopped'. Waits up to --timeout for that. JOB is looked "
                    "up in the work dir, then in the per-user job index (or give the job's "
                    "folder). --list (without JOB) lists the running jobs instead.")
    stop.add_argument("job", nargs="?", metavar="JOB", help="the job id, or the job's folder")
    add_work_dir(stop)
    stop.add_argument("--list", action="store_true", dest="list_jobs",
                      help="list the running jobs (of the job index and the work dir, whose "
                           "driver is alive), one per line: id, pid and host, start, sources "
                           "done, folder; stops nothing")
    stop.add_argument("--force", action="store_true",
                      help="if the job still runs after 5 s (or --timeout, if shorter), cancel "
                           "the run's Dask tasks on its scheduler and wait up to --timeout; if "
                           "the driver still runs (or the scheduler cannot be reached, as with "
                           "TLS), send it SIGTERM, and SIGKILL if it still runs --timeout "
                           "later; signals go only to the recorded driver, on its host, after "
                           "checking its pid and start time")
    stop.add_argument("--timeout", type=float, default=120, metavar="S",
                      help="seconds to wait for the job to stop (default 120); with --force, "
                           "also the wait after cancelling and after SIGTERM")
    add_hidden_verbose(stop)
    stop.set_defaults(func=cmd_stop)

    report = sub.add_parser(
        "report", help="write a job's HTML report",
        description="Write a self-contained HTML report of a job: the error of a failed "
                    "attempt, per-stage counts, rows processed over time per fusion group, task "
                    "durations and the event log's warnings, next to Dask's performance report "
                    "for the run when one was recorded. JOB is looked up in the work dir, then "
                    "in the per-user job index.")
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

    work_dir = args.work_dir or config.get("jobs.work-dir")
    check_job_ids(work_dir, args.job_id, args.resume)
    return {"work_dir": work_dir, "job_id": args.job_id,
            "resume": args.resume,
            "verify_content": args.verify_content,
            "command": f"{PROG} " + shlex.join(kept)}


def check_job_ids(work_dir: str, job_id: str | None, resume: str | None) -> None:
    """Refuse (``UsageError``, exit 2) a malformed ``--job-id``/``--resume`` token, the two
    naming different jobs, and a ``--resume`` token with no job in ``work_dir``: the message
    names the token, the folder looked in and the jobs found there."""
    import os

    from curator_dask.jobs.job import CONFIG_FILE, JobDirectory, validate_job_id

    for option, token in (("--job-id", job_id), ("--resume", resume)):
        if token is not None:
            try:
                validate_job_id(token)
            except ValueError as exc:
                raise UsageError(f"{option}: {exc}") from None
    if job_id is not None and resume is not None and job_id != resume:
        raise UsageError(f"--job-id {job_id!r} and --resume {resume!r} disagree; give one")
    if resume is None or JobDirectory(work_dir, resume).exists():
        return
    from curator_dask.jobs.index import find_job, index_path

    folder = os.path.abspath(work_dir)
    looked = os.path.join(folder, resume, CONFIG_FILE)
    elsewhere = find_job(resume, work_dir)
    if elsewhere:  # the per-user job index knows it: a resume runs in its work dir
        raise UsageError(f"--resume {resume}: no job {resume!r} in {folder} (looked for "
                         f"{looked}); the job index {index_path()} has it in {elsewhere[0]}: "
                         f"add --work-dir {os.path.dirname(elsewhere[0])}")
    if not os.path.isdir(folder):
        hint = "that folder does not exist; give --work-dir where the job ran"
    else:
        jobs = sorted(n for n in os.listdir(folder)
                      if os.path.isfile(os.path.join(folder, n, CONFIG_FILE)))
        shown = ", ".join(jobs[-5:]) + (f" (and {len(jobs) - 5} more)" if len(jobs) > 5 else "")
        hint = (f"jobs there: {shown}" if jobs else "there are no jobs there") + (
            f" ({PROG} status --work-dir {folder} lists them)" if jobs else
            "; give --work-dir where the job ran")
    raise UsageError(f"--resume {resume}: no job {resume!r} in {folder} (looked for "
                     f"{looked}, and in the job index {index_path()}); {hint}")


def resolve_job(work_dir: str, job: str) -> str:
    """The folder of job ``job`` (an id or a job's folder): ``<work_dir>/<job>``, else the
    per-user job index's; a :class:`UsageError` says where it looked when there is none, and
    lists the folders when the index has several jobs of that id."""
    import os

    from curator_dask.jobs.index import AmbiguousJobError, JobNotFoundError, locate_job

    try:
        return locate_job(job, work_dir)
    except JobNotFoundError as exc:
        if os.sep in job or job.startswith("."):  # a folder that is no job's
            raise UsageError(str(exc)) from None
        raise UsageError(f"no job {job!r} in {exc.work_dir} or in the job index {exc.index} "
                         "(give --work-dir where the job ran)") from None
    except AmbiguousJobError as exc:
        raise UsageError(f"job {job!r} is in several folders: {', '.join(exc.folders)}; give "
                         "--work-dir (the folder above the job's)") from None


def _interval(args: argparse.Namespace) -> float:
    """Seconds between ``--watch`` redraws: ``--interval`` (which implies ``--watch``) or 2."""
    if args.interval is None:
        return 2.0
    if not args.interval > 0:  # also NaN
        raise UsageError(f"--interval {args.interval:g}: give a number of seconds above 0 "
                         "(e.g. --interval 10)")
    args.watch = True
    return args.interval


def cmd_status(args: argparse.Namespace) -> int:
    """Without a job: the table of jobs (``--watch``: until Ctrl+C). With one: its state and
    stages (``--watch``: live until it ends, or Ctrl+C; ``--detailed``: with the event log's
    per-stage and per-partition detail)."""
    from curator_dask import config

    work_dir = args.work_dir or config.get("jobs.work-dir")
    interval = _interval(args)
    if args.job is None:
        if args.detailed:
            raise UsageError("--detailed shows one job: give JOB (the jobs table has no detail)")
        try:
            return _status_all(work_dir, all_jobs=args.all_jobs, as_json=args.json,
                               watch=args.watch, interval=interval)
        except KeyboardInterrupt:  # the way out of --watch
            return EXIT_OK
    if args.all_jobs:
        raise UsageError("--all lists jobs: give it without JOB")
    try:
        return _status_one(resolve_job(work_dir, args.job), args.job, as_json=args.json,
                           watch=args.watch, interval=interval, detailed=args.detailed)
    except KeyboardInterrupt:  # leaving --watch before the job ends
        return EXIT_OK


def _status_all(work_dir: str, *, all_jobs: bool, as_json: bool, watch: bool,
                interval: float) -> int:
    """The jobs table (or JSON) once, or with ``watch`` every ``interval`` s until Ctrl+C: in
    place on a terminal; piped, one timestamped table (or one JSON line) per refresh."""
    import json
    import time

    from rich.console import Console, Group
    from rich.live import Live
    from rich.text import Text

    from curator_dask.jobs.index import index_path, job_rows
    from curator_dask.jobs.status import JobList

    def shown() -> JobList | str:
        rows, hidden = job_rows(work_dir, all_jobs=all_jobs)
        listing = JobList(rows, hidden=hidden, work_dir=work_dir, index=index_path(), prog=PROG)
        if as_json:
            return json.dumps(listing.rows, indent=None if watch else 2)
        return listing

    # on a terminal, its width (work dirs shortened to fit); piped, 400: work dirs in full
    console = Console(width=None if sys.stdout.isatty() else 400)
    if watch and not as_json and console.is_terminal:
        with Live(shown(), console=console, refresh_per_second=2) as live:
            while True:
                time.sleep(interval)
                live.update(shown())
    while True:
        listing = shown()
        if as_json:
            print(listing, flush=True)
        else:
            # the time line and its table in one write: a reader never sees one without the other
            heading = f"jobs at {time.strftime('%H:%M:%S')} (Ctrl+C to stop):\n" if watch else ""
            console.print(Group(Text(heading, end=""), listing) if watch else listing)
            sys.stdout.flush()
        if not watch:
            return EXIT_OK
        time.sleep(interval)


def _status_one(job_dir: str, job: str, *, as_json: bool, watch: bool, interval: float,
                detailed: bool) -> int:
    import json
    import time

    from curator_dask.jobs.status import load_job

    def load() -> dict:
        summary = load_job(job_dir)
        if summary is None:
            raise UsageError(f"job {job!r} in {job_dir} has no summary (yet)")
        return summary

    def with_detail(summary: dict) -> dict | None:
        if not detailed:
            return None
        from curator_dask.jobs.monitor import progress_data

        return progress_data(job_dir, detailed=True)

    summary = load()
    if as_json:
        # --watch --json: one JSON document per line until the job ends.
        from curator_dask.jobs.view import rates

        while True:
            summary["rates"] = rates(summary)
            data = with_detail(summary)
            if data is not None:  # the stage rows with their detail; partitions; attempts
                summary.update({k: data[k] for k in ("stages", "partitions",
                                                     "partitions_unlisted", "attempts")})
            print(json.dumps(summary, indent=None if watch else 2), flush=True)
            if not watch or summary["state"] != "running":
                return EXIT_OK
            time.sleep(interval)
            summary = load()
    from rich.console import Console
    from rich.live import Live

    from curator_dask.jobs.monitor import renderable

    console = Console(width=None if sys.stdout.isatty() else 160)  # piped: no truncation
    if not watch:
        console.print(renderable(summary, with_detail(summary)))
        return EXIT_OK
    with Live(renderable(summary, with_detail(summary)), console=console,
              refresh_per_second=2) as live:
        while summary["state"] == "running":
            time.sleep(interval)
            summary = load()
            live.update(renderable(summary, with_detail(summary)))
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    from curator_dask import config

    work_dir = args.work_dir or config.get("jobs.work-dir")
    if args.list_jobs:
        if args.job is not None:
            raise UsageError(f"--list lists the running jobs: give it without JOB ({args.job!r})"
                             f", or `{PROG} stop {args.job}` to stop that job")
        return _list_running(work_dir)
    if args.job is None:
        raise UsageError("give the JOB to stop, or --list to list the running jobs")
    from curator_dask.jobs.control import stop_job_dir

    def say(text: str, error: bool) -> None:
        if error:
            print(f"{PROG} stop: {text}", file=sys.stderr)
        else:
            print(text)

    try:
        outcome = stop_job_dir(resolve_job(work_dir, args.job), force=args.force,
                               timeout=args.timeout, say=say)
    except FileNotFoundError as exc:  # no summary yet
        raise UsageError(str(exc)) from None
    if outcome.error is not None:  # a forced stop could not signal the driver
        return EXIT_FAILED
    if outcome.was_running:
        print(f"job {outcome.job_id}: {outcome.state}")
    return EXIT_OK if outcome.state != "running" else EXIT_FAILED


def _list_running(work_dir: str) -> int:
    """``stop --list``: one line per running job; a line saying where it looked when none."""
    import os

    from curator_dask.jobs.api import list_running_jobs
    from curator_dask.jobs.index import index_path

    jobs = list_running_jobs(work_dir=work_dir)
    if not jobs:
        print(f"no running jobs in the job index {index_path()} or in "
              f"{os.path.abspath(work_dir)}")
        return EXIT_OK
    for job in jobs:
        src = job.get("sources") or {}
        done = int(src.get("skipped") or 0) + int(src.get("completed") or 0)
        print(f"{job['job_id']}  pid {job['pid']} on {job['host']}  started {job['started']}  "
              f"{done}/{src.get('total', '?')} sources done  {job['job_dir']}")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from curator_dask import config
    from curator_dask.jobs.events import has_event_log
    from curator_dask.jobs.report import write_report

    job_dir = resolve_job(args.work_dir or config.get("jobs.work-dir"), args.job)
    if not has_event_log(job_dir):
        raise UsageError(f"job {args.job!r} in {job_dir} has no event log")
    try:
        path = write_report(job_dir, args.output)
    except ImportError as exc:
        raise UsageError(f"{exc}; install it with: pip install bokeh") from None
    print(path)
    return EXIT_OK
