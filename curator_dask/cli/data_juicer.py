"""``run RECIPE.yaml`` for a Data-Juicer recipe (a ``process:`` list): Data-Juicer's own
options as ``dj-process`` takes them, beside ``run``'s cluster options.

``run RECIPE.yaml`` and ``run --config RECIPE.yaml`` both work. The cluster options
(``--workers``, ``--threads-per-worker``, ``--address``, ``--cluster`` and its own) are
curator_dask's; ``--resume TOKEN``, ``--job-id``/``--job_id`` and ``--work-dir``/``--work_dir``
are Data-Juicer's; every other option goes to Data-Juicer's parser unchanged (its dotted
overrides: ``--partition.mode auto``, ``--checkpoint.strategy every_op``). Without a cluster
option the embedded cluster has the recipe's ``np`` workers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from curator_dask.cli.common import EXIT_OK, EXIT_STOPPED, PROG, UsageError

# the options this command keeps; the rest are Data-Juicer's
_OWN = ("--workers", "--threads-per-worker", "--address", "--cluster", "--scheduler-file",
        "--jobs", "--adapt", "--no-tls")


def recipe_argument(argv: list[str]) -> str | None:
    """The recipe path of a ``run`` command line, when it names a Data-Juicer recipe."""
    from curator_dask.data_juicer.recipe import is_data_juicer_recipe

    candidates = []
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 < len(argv):
            candidates.append(argv[i + 1])
    candidates += [a for a in argv if a.endswith((".yaml", ".yml")) and not a.startswith("-")]
    for path in candidates:
        if is_data_juicer_recipe(path):
            return path
    return None


def _parser() -> argparse.ArgumentParser:
    from curator_dask.cli.run_command import _add_cluster_arguments

    p = argparse.ArgumentParser(prog=f"{PROG} run", add_help=False)
    p.add_argument("--config")
    _add_cluster_arguments(p)
    p.add_argument("--no-fast-ops", action="store_true")
    p.add_argument("--resume")
    p.add_argument("--job-id", "--job_id", dest="job_id")
    p.add_argument("--work-dir", "--work_dir", dest="work_dir")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p


def _executor(args: argparse.Namespace) -> Any:
    if not (args.address or args.cluster or args.workers or args.threads_per_worker
            or args.scheduler_file):
        return None  # the recipe's np sizes the embedded cluster
    from curator_dask.cli.run_command import _executor as run_executor

    args.no_fuse = False
    return run_executor(args)


def _quiet_data_juicer_logs() -> None:
    """This process is the command's: loguru (Data-Juicer's logger, INFO and up on stderr by
    default) says warnings and errors only, as the command's own log does."""
    from loguru import logger as loguru

    loguru.remove()
    loguru.add(sys.stderr, level="WARNING")


def _resume_command(argv: list[str], job_id: str) -> str:
    """The command that resumes this job: this one, with ``--resume JOB`` (and without
    ``--job-id``, which the resume names)."""
    import shlex

    from curator_dask.cli.common import PROG

    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--resume", "--job-id", "--job_id"):
            skip = True
            continue
        if arg.startswith(("--resume=", "--job-id=", "--job_id=")):
            continue
        kept.append(arg)
    return shlex.join([*PROG.split(), "run", *kept, "--resume", job_id])


def cmd_dj_run(argv: list[str]) -> int:
    """Run the Data-Juicer recipe of ``argv`` (``run``'s arguments); returns the exit code."""
    # The recipe is the positional YAML file; the other words are options and their values
    # (Data-Juicer's dotted ones take a value argparse cannot know), so it is found by name.
    positional = [a for a in argv if a.endswith((".yaml", ".yml")) and not a.startswith("-")
                  and (argv.index(a) == 0 or argv[argv.index(a) - 1] != "--config")]
    args, rest = _parser().parse_known_args([a for a in argv if a not in positional[:1]])
    path = args.config or (positional[0] if positional else None)
    if not path:
        raise UsageError("run: give the recipe: run RECIPE.yaml (or --config RECIPE.yaml)")
    if positional and args.config and positional[0] != args.config:
        raise UsageError(f"run: two recipes given ({positional[0]}, {args.config}): keep one")
    overrides = list(rest)
    for flag, value in (("--resume", args.resume), ("--job_id", args.job_id),
                        ("--work_dir", args.work_dir)):
        if value is not None:
            overrides += [flag, value]
    from curator_dask.data_juicer.executor import DataJuicerDaskExecutor, PartitionChangedError
    from curator_dask.data_juicer.recipe import RecipeError, load_recipe
    from curator_dask.errors import RunStopped

    _quiet_data_juicer_logs()
    try:
        recipe = load_recipe(path, overrides)
    except RecipeError as exc:
        raise UsageError(str(exc)) from None
    if recipe.executor_type != "dask":
        print(f"{PROG} run: executor_type {recipe.executor_type}: runs on Dask here "
              "(curator_dask's Data-Juicer executor)", file=sys.stderr)
    executor = _executor(args)
    runner = DataJuicerDaskExecutor(recipe.cfg, executor=executor,
                                    fast_ops=not args.no_fast_ops, resume=args.resume,
                                    announce=True, executor_type=recipe.executor_type,
                                    command=_resume_command(argv, recipe.job_id))
    try:
        result = runner.run()
    except (RecipeError, PartitionChangedError) as exc:
        raise UsageError(str(exc)) from None
    except RunStopped as exc:
        print(f"{PROG} run: stopped: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    finally:
        if executor is not None:
            executor.close()
    width = max([len(c.name) for c in result.ops] + [8])
    for c in result.ops:
        print(f"  {c.name:<{width}}  {c.rows_in:>9,} -> {c.rows_out:>9,} rows  "
              f"{c.seconds:8.2f} s")
    print(f"{result.rows_in:,} rows in, {result.rows_out:,} rows out, {result.partitions} "
          f"partitions -> {result.export_path} (job {result.job_id})")
    return EXIT_OK
