"""CLI commands for SLURM arrays: slurm submit and slurm retry (with resubmission)."""

from __future__ import annotations

import argparse

from curator_dask.cli.common import EXIT_OK, UsageError, add_hidden_verbose


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``slurm`` parser and its ``retry`` and ``submit`` actions."""
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
    add_hidden_verbose(retry)
    # subparser: its own usage line for argparse-style errors
    retry.set_defaults(func=cmd_slurm_retry, subparser=retry)

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
    add_hidden_verbose(submit)
    submit.set_defaults(func=cmd_slurm_submit)


def add_job_options(p: argparse.ArgumentParser) -> None:
    """The sbatch options shared by ``slurm submit`` and ``slurm retry --submit``."""
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


def cmd_slurm_retry(args: argparse.Namespace) -> int:
    """Print (or resubmit) the shards without a completion manifest; usage errors exit 2."""
    from curator_dask.slurm.retry import (
        build_slurm_array_retry_submissions,
        find_slurm_array_retries,
        format_slurm_array_indices,
    )

    parser: argparse.ArgumentParser = args.subparser
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
    """Render the array script and submit it (``--dry-run``: print it)."""
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
