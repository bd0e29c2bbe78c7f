"""``python -m curator_dask``: the command line.

Exit codes: 0 success, 1 the pipeline failed, 2 usage or configuration error, 3 stopped by
SIGUSR1/SIGTERM after draining (unfinished sources stay pending), 130 interrupted.
Only argparse is imported at module level, so ``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys

from curator_dask.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STOPPED,
    EXIT_USAGE,
    PROG,
    UsageError,
)
from curator_dask.cli.jobs import (
    cmd_checkpoint_inspect,
    cmd_report,
    cmd_status,
    cmd_stop,
    job_kwargs,
)
from curator_dask.cli.slurm import (
    add_job_options,
    cmd_slurm_retry,
    cmd_slurm_submit,
    run_in_slurm_runner,
)


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
    run.add_argument("--verify-inputs", choices=["off", "fingerprint", "content"],
                     help="check that inputs of sources the checkpoint marks complete did not "
                          "change (default: config checkpoint.verify-inputs, off)")
    run.add_argument("--on-input-change", choices=["reprocess", "error"],
                     help="what a completed source whose inputs changed gets (default: "
                          "reprocess)")
    run.add_argument("--stage-checkpoints",
                     choices=["disabled", "every_stage", "every_n_stages", "manual"],
                     help="memoize stage outputs so replayed sources resume from the deepest "
                          "boundary (default: config stage-checkpoints.strategy, disabled)")
    run.add_argument("--checkpoint-every", type=int, metavar="N",
                     help="every_n_stages: checkpoint after every N-th stage")
    run.add_argument("--checkpoint-stages", metavar="NAMES",
                     help="manual: comma-separated stage names to checkpoint after")
    run.add_argument("--checkpoint-format", choices=["arrow", "parquet"],
                     help="stage checkpoint file format (default: arrow)")
    run.add_argument("--checkpoint-retention",
                     choices=["cleanup_on_complete", "keep_all", "keep_failed_only"],
                     help="when stage checkpoints are deleted (default: cleanup_on_complete)")
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
                        help="a live table, refreshed every 2 s until the job is no longer "
                             "running")
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

    report = sub.add_parser(
        "report", help="write a job's HTML report",
        description="Write a self-contained HTML report of a job: per-stage throughput over "
                    "time, task durations, counts and the event log's warnings, next to Dask's "
                    "performance report for the run when one was recorded.")
    report.add_argument("job", metavar="JOB", help="the job id")
    report.add_argument("--work-dir", metavar="DIR", help="default: config jobs.work-dir")
    report.add_argument("-o", "--output", metavar="PATH",
                        help="where to write it (default: <job dir>/report.html)")
    report.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)

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
    add_job_options(retry)
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
    add_job_options(submit)
    submit.add_argument("--dry-run", action="store_true", help="print the script, submit nothing")
    submit.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)
    return parser


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


def checkpoint_kwargs(args: argparse.Namespace) -> dict:
    """Stage checkpoint and input verification options for Pipeline.run."""
    from curator_dask import config

    kwargs: dict = {"verify_inputs": args.verify_inputs, "on_input_change": args.on_input_change}
    strategy = args.stage_checkpoints
    if args.checkpoint_every is not None and strategy in (None, "every_n_stages"):
        strategy = "every_n_stages"
    elif args.checkpoint_every is not None:
        raise UsageError(f"--checkpoint-every goes with every_n_stages, not {strategy}")
    if args.checkpoint_stages is not None and strategy in (None, "manual"):
        strategy = "manual"
    elif args.checkpoint_stages is not None:
        raise UsageError(f"--checkpoint-stages goes with manual, not {strategy}")
    given = (strategy, args.checkpoint_format, args.checkpoint_retention)
    if all(v is None for v in given):
        return kwargs
    defaults = {k.replace("-", "_"): v for k, v in config.get("stage-checkpoints").items()}
    settings = {**defaults, "strategy": strategy or defaults["strategy"]}
    if settings["strategy"] != "every_n_stages":
        settings["n"] = None
    if settings["strategy"] != "manual":
        settings["stages"] = []
    if args.checkpoint_every is not None:
        settings["n"] = args.checkpoint_every
    if args.checkpoint_stages is not None:
        settings["stages"] = [n.strip() for n in args.checkpoint_stages.split(",") if n.strip()]
    for key, value in (("format", args.checkpoint_format),
                       ("retention", args.checkpoint_retention)):
        if value is not None:
            settings[key] = value
    from curator_dask.resumability.stage_checkpoints import StageCheckpoints

    try:
        kwargs["stage_checkpoints"] = StageCheckpoints(**settings)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return kwargs


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
    from curator_dask.resumability.input_check import InputChangedError

    try:
        if args.cluster == "slurm-runner":
            result = run_in_slurm_runner(args, pipeline)
        else:
            result = pipeline.run(executor=executor, checkpoint_path=args.checkpoint_path,
                                  **job_kwargs(args), **checkpoint_kwargs(args))
    except RunStopped as exc:
        print(f"{PROG} run: stopped: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except (ResumeMismatchError, FileExistsError, InputChangedError) as exc:
        raise UsageError(str(exc)) from None
    _print_summary(result)
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
        if args.command == "report":
            return cmd_report(args)
        if args.command == "checkpoint" and args.checkpoint_command == "inspect":
            return cmd_checkpoint_inspect(args)
        if args.command == "slurm" and args.slurm_command == "retry":
            return cmd_slurm_retry(args, args.subparser)
        if args.command == "slurm" and args.slurm_command == "submit":
            return cmd_slurm_submit(args)
    except (UsageError, NotImplementedError) as exc:
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
    parser.error(f"unknown command {args.command!r}")  # exits
