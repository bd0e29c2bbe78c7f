"""CLI commands for SLURM: slurm submit, slurm retry, and runs inside a SLURMRunner step."""

from __future__ import annotations

import argparse

from curator_dask.cli.common import EXIT_OK, UsageError


def add_job_options(p: argparse.ArgumentParser) -> None:
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


def run_in_slurm_runner(args: argparse.Namespace, pipeline):
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
