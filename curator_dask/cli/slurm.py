"""CLI commands for SLURM arrays: slurm submit and slurm retry (with resubmission)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TypedDict, Unpack

from curator_dask.cli.common import EXIT_OK, PROG, UsageError, add_hidden_verbose
from curator_dask.cli.run_command import add_allow_target_module

if TYPE_CHECKING:
    from curator_dask.slurm.sbatch import ArrayJobSpec


class _Shards(TypedDict, total=False):
    """The array and shard layout of an ``ArrayJobSpec`` (its other fields are options)."""

    array: str
    total_shards: int | None
    shard_index_offset: int
    minimum_shard_index: int


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
            "lines (--format fields). When every shard completed, stdout stays empty and "
            "stderr says so."
        ),
    )
    retry.add_argument("--checkpoint-path", required=True, help="the array run's checkpoint")
    retry.add_argument("--format", choices=["array", "fields"], default="array",
                       help="array: one sbatch --array expression per line, e.g. 2,5-7 "
                            "(default); fields: 'ARRAY OFFSET MINIMUM TOTAL' per line, the "
                            "--array expression, SHARD_INDEX_OFFSET, MINIMUM_SHARD_INDEX and "
                            "TOTAL_SHARDS to resubmit with")
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
            "shard), submit it and print the job id alone on stdout (where the logs are, how to "
            "follow the job and how to retry its shards go to stderr). --dry-run prints the "
            "script instead."
        ),
    )
    submit.add_argument("pipeline", metavar="PIPELINE", help="pipeline.yaml or file.py:function")
    submit.add_argument("--array", required=True, help="SLURM array indices, e.g. 0-19")
    submit.add_argument("--checkpoint-path", required=True, help="shared checkpoint path")
    submit.add_argument("--total-shards", type=int, metavar="N",
                        help="logical shard count (default: the array's task count)")
    submit.add_argument("--shard-index-offset", type=int, default=0, metavar="K",
                        help="added to SLURM_ARRAY_TASK_ID (windows over MaxArraySize)")
    submit.add_argument("--minimum-shard-index", type=int, default=0, metavar="M",
                        help="the lowest shard index of the logical run, recorded in its "
                             "run.json (MINIMUM_SHARD_INDEX); shard indices count from M "
                             "(default 0)")
    add_job_options(submit)
    submit.add_argument("--dry-run", action="store_true",
                        help="print the script; submit nothing and ask SLURM nothing")
    add_hidden_verbose(submit)
    submit.set_defaults(func=cmd_slurm_submit)


def add_job_options(p: argparse.ArgumentParser) -> None:
    """The sbatch options shared by ``slurm submit`` and ``slurm retry --submit``."""
    p.add_argument("--partition", help="SLURM partition")
    p.add_argument("--time", default="01:00:00", help="time limit (default 01:00:00)")
    p.add_argument("--cpus-per-task", type=int, metavar="N",
                   help="CPUs per array task (default: 16, or the CPUs of the partition's "
                        "largest node when it has fewer, said on stderr; 16 with --no-check "
                        "or --dry-run)")
    p.add_argument("--mem", help="memory per node, e.g. 32G")
    p.add_argument("--nodes", type=int, default=1, help="nodes per array task")
    p.add_argument("--requeue", action="store_true", help="let SLURM requeue preempted tasks")
    p.add_argument("--job-name", default="curator-array",
                   help="SLURM job name, shown by squeue (default curator-array)")
    p.add_argument("--output", default="array_%A_%a.log", help="log file pattern")
    p.add_argument("--signal-grace", type=int, default=120, metavar="S",
                   help="seconds before the time limit at which SLURM sends USR1 (drain)")
    p.add_argument("--dask-runner-tasks", type=int, metavar="N",
                   help="run each array task as one srun step of N tasks (N >= 3; for several "
                        "nodes): scheduler, driver and N-2 Dask workers (SLURMRunner)")
    p.add_argument("--no-check", action="store_true",
                   help="submit without checking the request against the partition (sinfo, "
                        "sbatch --test-only), for sites where those are unavailable")
    add_allow_target_module(p)  # passed on to each array task's `run`


def _job_spec(args: argparse.Namespace, pipeline: str, cpus_per_task: int,
              **shards: Unpack[_Shards]) -> ArrayJobSpec:
    """The validated ``ArrayJobSpec`` of the job options (``ValueError`` names a bad one)."""
    import os

    from curator_dask.slurm.sbatch import ArrayJobSpec

    return ArrayJobSpec(
        pipeline=absolute_pipeline(pipeline), checkpoint_path=os.path.abspath(args.checkpoint_path),
        partition=args.partition, time=args.time, cpus_per_task=cpus_per_task,
        mem=args.mem, nodes=args.nodes, requeue=args.requeue, job_name=args.job_name,
        output=args.output, signal_grace=args.signal_grace,
        dask_runner_tasks=args.dask_runner_tasks, **shards,
        extra_run_args=tuple(arg for module in args.allow_target_module
                             for arg in ("--allow-target-module", module)),
    ).validate()


def absolute_pipeline(pipeline: str) -> str:
    """``pipeline.yaml`` or ``file.py:function`` with the file's path made absolute, so the
    script names the file itself whatever directory it runs in; ``module:function`` as given.

    Example:
        >>> import os
        >>> absolute_pipeline("p.yaml") == os.path.join(os.getcwd(), "p.yaml")
        True
        >>> absolute_pipeline("mypackage.pipelines:build")
        'mypackage.pipelines:build'
    """
    import os

    if pipeline.endswith((".yaml", ".yml")):
        return os.path.abspath(pipeline)
    path, sep, function = pipeline.rpartition(":")
    return f"{os.path.abspath(path)}{sep}{function}" if path.endswith(".py") else pipeline


def _check_pipeline_file(pipeline: str) -> None:
    """Refuse a pipeline file that does not exist here: every array task ``cd``s to this
    directory and would fail to load it."""
    import os

    path = pipeline if pipeline.endswith((".yaml", ".yml")) else pipeline.rpartition(":")[0]
    if path.endswith((".yaml", ".yml", ".py")) and not os.path.isfile(path):
        raise UsageError(f"{path}: no such file (the array tasks run in {os.getcwd()} and "
                         "load the pipeline from there)")


def _fitted_cpus(args: argparse.Namespace, command: str) -> int:
    """``--cpus-per-task``, or a default that fits the partition (said on stderr); refuses a
    request no node of the partition can hold. Asks ``sinfo`` unless ``--no-check``."""
    import os

    from curator_dask.slurm.partition import (
        DEFAULT_CPUS_PER_TASK,
        RequestRefused,
        SlurmQueryError,
        check_fits,
        default_cpus_per_task,
        partition_nodes,
    )

    cpus = args.cpus_per_task
    if args.no_check:
        return DEFAULT_CPUS_PER_TASK if cpus is None else cpus
    try:
        part = partition_nodes(args.partition)
        if cpus is None:
            cpus = default_cpus_per_task(part, args.nodes, args.dask_runner_tasks)
        if not os.environ.get("SBATCH_OVERCOMMIT"):  # --overcommit: tasks may share CPUs
            check_fits(part, cpus, args.nodes, args.dask_runner_tasks)
    except RequestRefused as exc:
        raise UsageError(f"the request cannot run: {exc}") from None
    except SlurmQueryError as exc:
        msg = f"cannot check the request against the partition: {exc} (--no-check skips it)"
        raise SlurmQueryError(msg) from None
    if args.cpus_per_task is None:
        print(f"{PROG} slurm {command}: --cpus-per-task not given: asking for {cpus} CPUs per "
              f"task (the largest node of partition {part.name} has {part.max_cpus}; at most "
              f"{DEFAULT_CPUS_PER_TASK} by default)", file=sys.stderr)
    return cpus


def _check_with_sbatch(args: argparse.Namespace, spec: ArrayJobSpec) -> None:
    """``sbatch --test-only`` on the rendered script (nothing is queued); its refusal is a
    usage error naming the request."""
    from curator_dask.slurm.partition import sbatch_test_only
    from curator_dask.slurm.sbatch import render_array_script

    if args.no_check:
        return
    reason = sbatch_test_only(render_array_script(spec))
    if reason is None:
        return
    request = ", ".join(f"{opt} {value}" for opt, value in (
        ("--partition", spec.partition or "(the default)"), ("--nodes", spec.nodes),
        ("--cpus-per-task", spec.cpus_per_task), ("--dask-runner-tasks", spec.dask_runner_tasks),
        ("--mem", spec.mem), ("--time", spec.time)) if value is not None)
    raise UsageError(f"sbatch --test-only refused the request ({request}): {reason}; change "
                     "those options (--no-check submits without asking)")


def cmd_slurm_retry(args: argparse.Namespace) -> int:
    """Print (or resubmit) the shards without a completion manifest; usage errors exit 2."""
    from curator_dask.slurm.retry import (
        build_slurm_array_retry_submissions,
        find_slurm_array_retries,
        format_slurm_array_indices,
    )
    from curator_dask.slurm.sbatch import render_array_script, submit_script

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
    submissions = build_slurm_array_retry_submissions(plan, args.max_array_size)
    if not submissions:  # stdout stays empty: scripts read it as "no shard to run again"
        print(f"{PROG} slurm retry: every shard of the array run in {args.checkpoint_path} "
              f"wrote its completion manifest: nothing to {'resubmit' if args.submit else 'retry'}",
              file=sys.stderr)
        return EXIT_OK
    cpus = None
    for submission in submissions:
        expr = format_slurm_array_indices(submission.array_indices)
        if args.submit:
            if cpus is None:  # checked once: every window asks for the same resources
                _check_pipeline_file(args.submit)
                cpus = _fitted_cpus(args, "retry")
            try:
                spec = _job_spec(args, args.submit, cpus, array=expr,
                                 total_shards=plan.total_shards,
                                 shard_index_offset=submission.shard_index_offset,
                                 minimum_shard_index=plan.minimum_shard_index)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if submission is submissions[0]:
                _check_with_sbatch(args, spec)
            job_id = submit_script(render_array_script(spec))
            print(f"submitted {expr} (offset {submission.shard_index_offset}) as job {job_id}")
            print(follow_hint("retry", job_id, spec, args), file=sys.stderr)
        elif args.format == "array":
            print(expr)
        else:
            print(expr, submission.shard_index_offset, plan.minimum_shard_index,
                  plan.total_shards)
    return EXIT_OK


def cmd_slurm_submit(args: argparse.Namespace) -> int:
    """Check the request against the partition, render the array script and submit it.

    ``--dry-run`` prints the script and asks SLURM nothing (16 CPUs per task unless
    ``--cpus-per-task`` says otherwise); ``--no-check`` submits without asking.
    """
    from curator_dask.data_juicer.recipe import is_data_juicer_recipe
    from curator_dask.slurm.partition import DEFAULT_CPUS_PER_TASK
    from curator_dask.slurm.sbatch import render_array_script, submit_script

    if args.pipeline.endswith((".yaml", ".yml")) and is_data_juicer_recipe(args.pipeline):
        # A recipe's deduplicators need every partition at once; array tasks share nothing
        # but the checkpoint, so the recipe runs on SLURM worker jobs instead.
        raise UsageError(f"{args.pipeline} is a Data-Juicer recipe: it is not split into array "
                         "tasks (its deduplicators need every partition at once); run it on "
                         "SLURM worker jobs: run RECIPE.yaml --cluster slurm --jobs N")
    shards: _Shards = {"array": args.array, "total_shards": args.total_shards,
                       "shard_index_offset": args.shard_index_offset,
                       "minimum_shard_index": args.minimum_shard_index}
    cpus = DEFAULT_CPUS_PER_TASK if args.cpus_per_task is None else args.cpus_per_task
    try:
        spec = _job_spec(args, args.pipeline, cpus, **shards)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.dry_run:
        if args.cpus_per_task is None:
            print(f"{PROG} slurm submit: --dry-run asks SLURM nothing: {spec.cpus_per_task} CPUs "
                  "per task (a submission fits the default to the partition's nodes)",
                  file=sys.stderr)
        print(render_array_script(spec), end="")
        return EXIT_OK
    _check_pipeline_file(args.pipeline)
    spec = _job_spec(args, args.pipeline, _fitted_cpus(args, "submit"), **shards)
    _check_with_sbatch(args, spec)
    job_id = submit_script(render_array_script(spec))
    print(job_id)  # alone on stdout: JOB=$(python -m curator_dask slurm submit ...)
    print(follow_hint("submit", job_id, spec, args), file=sys.stderr)
    return EXIT_OK


def retry_command(spec: ArrayJobSpec, args: argparse.Namespace) -> str:
    """The command that resubmits the shards of ``spec``'s array run that did not complete,
    with the job options (:func:`add_job_options`) given to this command that are not at
    their defaults.

    Example:
        >>> from curator_dask.slurm.sbatch import ArrayJobSpec
        >>> spec = ArrayJobSpec(pipeline="/p/pipe.yaml", array="0-3", checkpoint_path="/ck",
        ...                     workdir="/p")
        >>> args = argparse.Namespace(time="00:10:00", cpus_per_task=2, nodes=1, no_check=True,
        ...                           requeue=False, allow_target_module=["mine"])
        >>> print(retry_command(spec, args))  # doctest: +NORMALIZE_WHITESPACE
        python -m curator_dask slurm retry --checkpoint-path /ck --submit /p/pipe.yaml --time
        00:10:00 --cpus-per-task 2 --no-check --allow-target-module mine
    """
    import shlex

    from curator_dask.utils.private_api import parser_actions

    words = [*PROG.split(), "slurm", "retry", "--checkpoint-path", spec.checkpoint_path,
             "--submit", spec.pipeline]
    options = argparse.ArgumentParser(add_help=False)
    add_job_options(options)
    for action in parser_actions(options):
        value = getattr(args, action.dest, None)
        if value is None or value is False or value == action.default:
            continue
        flag = action.option_strings[0]
        if value is True:
            words.append(flag)
        else:
            for one in value if isinstance(value, list) else [value]:
                words += [flag, str(one)]
    return shlex.join(words)


def follow_hint(command: str, job_id: str, spec: ArrayJobSpec, args: argparse.Namespace) -> str:
    """What ``slurm submit`` (and ``retry --submit``) says on stderr after the job id: where
    each array task logs, how to follow the job, and how to retry the shards that fail.

    Example:
        >>> from curator_dask.slurm.sbatch import ArrayJobSpec
        >>> spec = ArrayJobSpec(pipeline="/p/pipe.yaml", array="3-5", checkpoint_path="/ck",
        ...                     workdir="/p")
        >>> args = argparse.Namespace(requeue=False, no_check=False, allow_target_module=[])
        >>> print(follow_hint("submit", "42", spec, args))  # doctest: +NORMALIZE_WHITESPACE
        python -m curator_dask slurm submit: submitted array job 42 (array tasks 3-5); each
        task logs to /p/array_42_<task>.log (--output array_%A_%a.log)
          follow it: squeue -j 42; tail -f /p/array_42_3.log
          when it has ended, resubmit the shards that did not complete: python -m curator_dask
        slurm retry --checkpoint-path /ck --submit /p/pipe.yaml
    """
    import os
    import re

    log = os.path.join(spec.workdir, spec.output)  # sbatch reads it from the submit directory
    log = log.replace("%A", job_id).replace("%j", job_id)
    first = re.match(r"\d+", spec.array)
    return (f"{PROG} slurm {command}: submitted array job {job_id} (array tasks "
            f"{spec.array}); each task logs to {log.replace('%a', '<task>')} (--output "
            f"{spec.output})\n"
            f"  follow it: squeue -j {job_id}; tail -f "
            f"{log.replace('%a', first.group(0) if first else '0')}\n"
            "  when it has ended, resubmit the shards that did not complete: "
            f"{retry_command(spec, args)}")
