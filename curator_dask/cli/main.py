"""``python -m curator_dask``: the command line.

Exit codes: 0 success, 1 the pipeline failed, 2 usage or configuration error, 3 stopped by
SIGUSR1/SIGTERM after draining (unfinished sources stay pending), 130 interrupted.
Only argparse is imported at module level, so ``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    """A problem with the command line or the pipeline definition (exit code 2)."""


PROG = "python -m curator_dask"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run NeMo-Curator-style data-curation pipelines on Dask.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run = sub.add_parser(
        "run",
        help="run a pipeline",
        description=(
            "Run a pipeline on an embedded LocalCluster (default) or a running scheduler. "
            "PIPELINE is a YAML file (stages by import path, `_target_` plus keyword "
            "arguments) or `file.py:function` / `module:function` returning a Pipeline."
        ),
    )
    run.add_argument("pipeline", metavar="PIPELINE", help="pipeline.yaml or file.py:function")
    run.add_argument("--workers", type=int, metavar="N",
                     help="worker processes of the embedded cluster (default: CPU count)")
    run.add_argument("--threads-per-worker", type=int, metavar="N",
                     help="threads per embedded worker (default: 1)")
    run.add_argument("--address", metavar="ADDR",
                     help="scheduler address of a running cluster, e.g. tcp://10.0.0.5:8786")
    run.add_argument("--cluster", choices=["local", "slurm", "slurm-runner"], default=None,
                     help="slurm: start a dask-jobqueue SLURMCluster (jobqueue.slurm config); "
                          "slurm-runner: inside `srun` with 3+ tasks, rank 0 runs the "
                          "scheduler, rank 1 this pipeline, the others workers")
    run.add_argument("--scheduler-file", metavar="PATH",
                     help="--cluster slurm-runner: shared scheduler file "
                          "(default ./.curator-dask-scheduler-{job_id}.json)")
    run.add_argument("--jobs", type=int, metavar="N", help="SLURM worker jobs (--cluster slurm)")
    run.add_argument("--no-tls", action="store_true",
                     help="--cluster slurm without TLS (only on a private allocation)")
    run.add_argument("--checkpoint-path", metavar="PATH",
                     help="resume from and record completed sources at PATH")
    run.add_argument("--job-id", metavar="ID", help="name the job (default: a new UTC token)")
    run.add_argument("--resume", metavar="TOKEN",
                     help="continue job TOKEN after checking its configuration and inputs")
    run.add_argument("--work-dir", metavar="DIR",
                     help="where job folders go (default: config jobs.work-dir, "
                          "./curator-dask-jobs)")
    run.add_argument("--verify-content", action="store_true",
                     help="fingerprint inputs by content (sha256), not size and mtime")
    run.add_argument("--no-job", action="store_true",
                     help="run without a job folder (no event log, summary or resume token)")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    run.add_argument("--no-fuse", action="store_true", help="one Dask task per stage")
    run.add_argument("-v", "--verbose", action="count", default=0,
                     help="more log output (-v: debug for curator_dask, -vv: also Dask)")

    status = sub.add_parser("status", help="show jobs, or one job's progress",
                            description="Without JOB: a table of the jobs in the work dir. "
                                        "With JOB: its state and per-stage counts.")
    status.add_argument("job", nargs="?", metavar="JOB", help="a job id (resume token)")
    status.add_argument("--work-dir", metavar="DIR", help="default: config jobs.work-dir")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument("--watch", action="store_true",
                        help="refresh every 2 s until the job is no longer running")
    status.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)

    stop = sub.add_parser(
        "stop", help="stop a running job",
        description="Cooperative by default: the driver starts no new sources, lets running "
                    "ones finish, flushes completions and ends in state 'stopped'. --force then "
                    "sends SIGTERM (and SIGKILL after --timeout) to the recorded driver, after "
                    "checking its pid and start time.")
    stop.add_argument("job", metavar="JOB", help="the job id")
    stop.add_argument("--work-dir", metavar="DIR", help="default: config jobs.work-dir")
    stop.add_argument("--force", action="store_true", help="signal the driver if needed")
    stop.add_argument("--timeout", type=float, default=120, metavar="S",
                      help="seconds to wait for the job to stop (default 120)")
    stop.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)

    checkpoint = sub.add_parser("checkpoint", help="look at a checkpoint")
    checkpoint_sub = checkpoint.add_subparsers(dest="checkpoint_command", metavar="ACTION",
                                               required=True)
    inspect = checkpoint_sub.add_parser(
        "inspect",
        help="list writer files and completed sources",
        description=(
            "List the writer files of a checkpoint (completed counts, unreadable files) and, "
            "with --input, which input partitions are complete. Read-only."
        ),
    )
    inspect.add_argument("path", metavar="PATH", help="the checkpoint_path of the runs")
    inspect.add_argument("--input", metavar="GLOB",
                         help="the pipeline's input (file_paths) to map ids back to files")
    inspect.add_argument("--files-per-partition", type=int, metavar="N",
                         help="as the pipeline's reader (ids hash each file group)")
    inspect.add_argument("--blocksize", metavar="SIZE", help="as the pipeline's reader")
    inspect.add_argument("--extensions", metavar="EXT", nargs="+",
                         help="file extensions to include (default: .jsonl .json .parquet)")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)

    slurm = sub.add_parser("slurm", help="SLURM job arrays")
    slurm_sub = slurm.add_subparsers(dest="slurm_command", metavar="ACTION", required=True)
    retry = slurm_sub.add_parser(
        "retry",
        help="print the array shards that have no completion manifest",
        description=(
            "Print the shards of an array run that wrote no completion manifest, as an "
            "sbatch --array expression (--format array) or as 'ARRAY OFFSET MINIMUM TOTAL' "
            "lines (--format fields). Prints nothing when every shard completed."
        ),
    )
    retry.add_argument("--checkpoint-path", required=True, help="the array run's checkpoint")
    retry.add_argument("--format", choices=["array", "fields"], default="array")
    retry.add_argument("--max-array-size", type=int, default=None, metavar="N",
                       help="split into windows below the cluster's MaxArraySize")
    retry.add_argument("--submit", metavar="PIPELINE",
                       help="resubmit the missing shards of PIPELINE with sbatch (job options "
                            "below apply)")
    _add_job_options(retry)
    retry.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)
    retry.set_defaults(subparser=retry)  # its own usage line for argparse-style errors

    submit = slurm_sub.add_parser(
        "submit",
        help="submit a pipeline as a SLURM job array",
        description=(
            "Render an sbatch array script that runs PIPELINE as array shards with a shared "
            "checkpoint (each task processes the sources whose sha256(task id) falls in its "
            "shard), submit it and print the job id. --dry-run prints the script instead."
        ),
    )
    submit.add_argument("pipeline", metavar="PIPELINE", help="pipeline.yaml or file.py:function")
    submit.add_argument("--array", required=True, help="SLURM array indices, e.g. 0-19")
    submit.add_argument("--checkpoint-path", required=True, help="shared checkpoint path")
    submit.add_argument("--total-shards", type=int, metavar="N",
                        help="logical shard count (default: the array's task count)")
    submit.add_argument("--shard-index-offset", type=int, default=0, metavar="K",
                        help="added to SLURM_ARRAY_TASK_ID (windows over MaxArraySize)")
    submit.add_argument("--minimum-shard-index", type=int, default=0, metavar="M")
    _add_job_options(submit)
    submit.add_argument("--dry-run", action="store_true", help="print the script, submit nothing")
    submit.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)
    return parser


def _add_job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--partition", help="SLURM partition")
    p.add_argument("--time", default="01:00:00", help="time limit (default 01:00:00)")
    p.add_argument("--cpus-per-task", type=int, default=16, help="CPUs per array task")
    p.add_argument("--mem", help="memory per node, e.g. 32G")
    p.add_argument("--nodes", type=int, default=1, help="nodes per array task")
    p.add_argument("--requeue", action="store_true", help="let SLURM requeue preempted tasks")
    p.add_argument("--job-name", default="curator-array")
    p.add_argument("--output", default="array_%A_%a.log", help="log file pattern")
    p.add_argument("--signal-grace", type=int, default=120, metavar="S",
                   help="seconds before the time limit at which SLURM sends USR1 (drain)")
    p.add_argument("--dask-runner-tasks", type=int, metavar="N",
                   help="run each array task as one srun step of N tasks (N >= 3; for several "
                        "nodes): scheduler, driver and N-2 Dask workers (SLURMRunner)")


def _job_spec(args: argparse.Namespace, pipeline: str, **shards: object):
    import os

    from curator_dask.slurm.sbatch import ArrayJobSpec

    return ArrayJobSpec(
        pipeline=pipeline, checkpoint_path=os.path.abspath(args.checkpoint_path),
        partition=args.partition, time=args.time, cpus_per_task=args.cpus_per_task,
        mem=args.mem, nodes=args.nodes, requeue=args.requeue, job_name=args.job_name,
        output=args.output, signal_grace=args.signal_grace,
        dask_runner_tasks=args.dask_runner_tasks, **shards,
    )


def _configure_logging(verbose: int) -> None:
    import logging

    import dask.config

    # distributed sets up its own INFO logging when imported; keep it quiet unless -vv.
    dask.config.set({"logging.distributed": "debug" if verbose >= 2 else "warning"})
    logging.basicConfig(
        level=logging.DEBUG if verbose >= 2 else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    logging.getLogger("curator_dask").setLevel(logging.DEBUG if verbose else logging.INFO)


def _print_summary(result) -> None:
    rows = result.counts_table() if hasattr(result, "counts_table") else []
    if not rows:
        return
    width = max(len(r["stage"]) for r in rows)
    print(f"{'stage':<{width}}  {'tasks in':>9} {'tasks out':>9} {'items in':>10} "
          f"{'items out':>10} {'seconds':>8}")
    for r in rows:
        print(f"{r['stage']:<{width}}  {r['tasks_in']:>9} {r['tasks_out']:>9} "
              f"{r['items_in']:>10} {r['items_out']:>10} {r['seconds']:>8.2f}")
    print(f"{result.num_sources} sources, {len(result)} output tasks, {result.wall_time:.2f} s")
    if getattr(result, "job_id", None):
        print(f"job {result.job_id}")


def _job_kwargs(args: argparse.Namespace) -> dict:
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


def _run_in_slurm_runner(args: argparse.Namespace, pipeline):
    """One `srun` step: dask-jobqueue's SLURMRunner gives rank 0 the scheduler, rank 1 this
    pipeline (the driver, which alone writes manifests) and the other ranks workers."""
    import os

    from dask_jobqueue.slurm import SLURMRunner
    from distributed import Client

    from curator_dask.backends.dask import DaskExecutor

    scheduler_file = args.scheduler_file or os.path.join(
        os.getcwd(), ".curator-dask-scheduler-{job_id}.json")
    with SLURMRunner(scheduler_file=scheduler_file,
                     scheduler_options={"dashboard_address": None}) as runner, \
            Client(runner) as client:
        # Only the client rank gets here; scheduler and worker ranks exit inside the runner.
        os.environ["CURATOR_DASK_SLURM_DRIVER"] = "1"
        client.wait_for_workers(runner.n_workers, timeout=300)
        executor = DaskExecutor(client=client, progress=False if args.no_progress else None,
                                fuse=False if args.no_fuse else None)
        return pipeline.run(executor=executor, checkpoint_path=args.checkpoint_path)


def cmd_run(args: argparse.Namespace) -> int:
    from curator_dask.cli.loader import PipelineDefinitionError, load_pipeline

    for name in ("workers", "threads_per_worker"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.scheduler_file and args.cluster != "slurm-runner":
        raise UsageError("--scheduler-file needs --cluster slurm-runner")
    if args.jobs is not None and args.cluster != "slurm":
        raise UsageError("--jobs needs --cluster slurm")
    if args.cluster in ("slurm", "slurm-runner") and args.address:
        raise UsageError("--cluster slurm starts its own scheduler; drop --address")
    if args.address and (args.workers or args.threads_per_worker):
        raise UsageError("--workers/--threads-per-worker configure the embedded cluster; "
                         "they cannot be combined with --address")
    try:
        pipeline = load_pipeline(args.pipeline)
    except PipelineDefinitionError as exc:
        raise UsageError(str(exc)) from None
    from curator_dask.backends.dask import DaskExecutor

    executor = DaskExecutor(
        address=args.address,
        cluster="slurm" if args.cluster == "slurm" else None,
        jobs=args.jobs,
        tls=False if args.no_tls else None,
        n_workers=args.workers,
        threads_per_worker=args.threads_per_worker,
        progress=False if args.no_progress else None,
        fuse=False if args.no_fuse else None,
    )
    import signal

    def stop(signum: int, _frame: object) -> None:
        executor.request_stop(f"received {signal.Signals(signum).name}")

    # SLURM sends USR1 (--signal=B:USR1@grace) before the time limit and TERM on preemption.
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, stop)
    from curator_dask.errors import RunStopped
    from curator_dask.jobs.job import ResumeMismatchError

    try:
        if args.cluster == "slurm-runner":
            result = _run_in_slurm_runner(args, pipeline)
        else:
            result = pipeline.run(executor=executor, checkpoint_path=args.checkpoint_path,
                                  **_job_kwargs(args))
    except RunStopped as exc:
        print(f"{PROG} run: stopped: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except (ResumeMismatchError, FileExistsError) as exc:
        raise UsageError(str(exc)) from None
    _print_summary(result)
    return EXIT_OK


def _job_state(summary: dict) -> str:
    """The recorded state, or ``running (driver gone)`` when its driver no longer exists."""
    import os
    import socket

    state = summary.get("state", "?")
    if state == "running" and summary.get("host") == socket.gethostname():
        try:
            os.kill(int(summary.get("pid", 0)), 0)
        except ProcessLookupError:
            return "running (driver gone)"
        except (OSError, ValueError):
            pass
    return state


def cmd_status(args: argparse.Namespace) -> int:
    import json
    import os
    import time

    from curator_dask import config
    from curator_dask.jobs.summary import read_summary

    work_dir = args.work_dir or config.get("jobs.work-dir")
    if args.job is None:
        rows = []
        names = sorted(os.listdir(work_dir)) if os.path.isdir(work_dir) else []
        for name in names:
            summary = read_summary(os.path.join(work_dir, name, "job_summary.json"))
            if summary is not None:
                rows.append({**summary, "state": _job_state(summary)})
        if args.json:
            print(json.dumps(rows, indent=2))
            return EXIT_OK
        if not rows:
            print(f"no jobs in {work_dir}")
            return EXIT_OK
        print(f"{'job':<28} {'state':<22} {'started':<21} {'sources':>8} {'skipped':>8}")
        for r in rows:
            src = r.get("sources") or {}
            print(f"{r['job_id']:<28} {r['state']:<22} {r.get('started', ''):<21} "
                  f"{src.get('total', ''):>8} {src.get('skipped', ''):>8}")
        return EXIT_OK
    path = os.path.join(work_dir, args.job, "job_summary.json")
    while True:
        summary = read_summary(path)
        if summary is None:
            raise UsageError(f"no job {args.job!r} in {work_dir}")
        summary["state"] = _job_state(summary)
        if args.json:
            print(json.dumps(summary, indent=2))
        else:
            src = summary.get("sources") or {}
            print(f"job {summary['job_id']}: {summary['state']} (pid {summary.get('pid')} on "
                  f"{summary.get('host')}, started {summary.get('started')}, updated "
                  f"{summary.get('updated')})")
            print(f"sources: {src.get('total', '?')} total, {src.get('skipped', 0)} skipped, "
                  f"{src.get('to_process', '?')} to process")
            for row in summary.get("stages") or []:
                print(f"  {row['stage']:<24} {row['tasks_in']:>8} in {row['tasks_out']:>8} out "
                      f"{row['failed']:>5} failed {row['seconds']:>8.2f} s")
            if summary.get("error"):
                print(f"error: {summary['error']}")
            if summary.get("resume_command") and summary["state"] != "completed":
                print(f"resume with: {summary['resume_command']}")
        if not args.watch or summary["state"] != "running":
            return EXIT_OK
        time.sleep(2)


def cmd_stop(args: argparse.Namespace) -> int:
    import os
    import signal

    from curator_dask import config
    from curator_dask.jobs.control import StopError, request_stop, signal_driver, wait_for_state
    from curator_dask.jobs.summary import read_summary

    job_dir = os.path.join(args.work_dir or config.get("jobs.work-dir"), args.job)
    summary = read_summary(os.path.join(job_dir, "job_summary.json"))
    if summary is None:
        raise UsageError(f"no job {args.job!r} in {os.path.dirname(job_dir)}")
    if summary.get("state") != "running":
        print(f"job {args.job} is not running (state: {summary.get('state')})")
        return EXIT_OK
    request_stop(job_dir)
    state = wait_for_state(job_dir, args.timeout)
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


def cmd_slurm_retry(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from curator_dask.slurm.manifests import (
        build_slurm_array_retry_submissions,
        find_slurm_array_retries,
        format_slurm_array_indices,
    )

    if args.max_array_size is not None and args.max_array_size <= 0:
        parser.error("--max-array-size must be greater than 0.")
    if args.max_array_size is not None and args.format != "fields":
        parser.error("--max-array-size requires --format fields so each derived offset is "
                     "included.")
    plan = find_slurm_array_retries(args.checkpoint_path)
    if plan is None:
        parser.error("Slurm array run configuration was not found. Use the same checkpoint "
                     "path as the original array run.")
    for submission in build_slurm_array_retry_submissions(plan, args.max_array_size):
        expr = format_slurm_array_indices(submission.array_indices)
        if args.submit:
            from curator_dask.slurm.sbatch import render_array_script, submit_script

            spec = _job_spec(args, args.submit, array=expr, total_shards=plan.total_shards,
                             shard_index_offset=submission.shard_index_offset,
                             minimum_shard_index=plan.minimum_shard_index)
            job_id = submit_script(render_array_script(spec))
            print(f"submitted {expr} (offset {submission.shard_index_offset}) as job {job_id}")
        elif args.format == "array":
            print(expr)
        else:
            print(expr, submission.shard_index_offset, plan.minimum_shard_index,
                  plan.total_shards)
    return EXIT_OK


def cmd_slurm_submit(args: argparse.Namespace) -> int:
    from curator_dask.slurm.sbatch import render_array_script, submit_script

    try:
        spec = _job_spec(args, args.pipeline, array=args.array, total_shards=args.total_shards,
                         shard_index_offset=args.shard_index_offset,
                         minimum_shard_index=args.minimum_shard_index)
        script = render_array_script(spec)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.dry_run:
        print(script, end="")
        return EXIT_OK
    print(submit_script(script))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    args.argv = raw
    _configure_logging(args.verbose)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "stop":
            return cmd_stop(args)
        if args.command == "checkpoint" and args.checkpoint_command == "inspect":
            return cmd_checkpoint_inspect(args)
        if args.command == "slurm" and args.slurm_command == "retry":
            return cmd_slurm_retry(args, args.subparser)
        if args.command == "slurm" and args.slurm_command == "submit":
            return cmd_slurm_submit(args)
    except UsageError as exc:
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NotImplementedError as exc:
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 (the CLI reports every failure the same way)
        if args.verbose:
            import traceback

            traceback.print_exc()
        print(f"{parser.prog} {args.command}: failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return EXIT_FAILED
    parser.error(f"unknown command {args.command!r}")
    return EXIT_USAGE
