"""The ``run`` command: parse its options, build the executor, run the pipeline, print counts."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from curator_dask.backends.dask import cluster_kinds as kinds
from curator_dask.cli.common import (
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_SCHEDULER_LOST,
    EXIT_STOPPED,
    PROG,
    UsageError,
)
from curator_dask.cli.jobs import job_kwargs

if TYPE_CHECKING:
    from curator_dask.backends.dask import DaskExecutor
    from curator_dask.backends.dask.result import RunResult


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` parser to the top-level subparsers."""
    run = sub.add_parser(
        "run",
        help="run a pipeline",
        description=(
            "Run a pipeline on an embedded LocalCluster (default) or a running scheduler. "
            "PIPELINE is a YAML file (stages by import path, `_target_` plus keyword "
            "arguments; the relative file_paths of its readers and path of its writers are "
            "taken from the file's folder, which also goes first on sys.path; Data-Juicer's "
            "partition:, checkpoint: and intermediate_storage: sections are applied, under "
            "these options: docs/recipes.md) or `file.py:function` / `module:function` "
            "returning a Pipeline. Paths given as options are the current directory's."
        ),
    )
    run.add_argument("pipeline", metavar="PIPELINE", help="pipeline.yaml or file.py:function")
    add_allow_target_module(run)
    _add_cluster_arguments(run)
    run.add_argument("--checkpoint-path", metavar="PATH",
                     help="resume from and record completed sources at PATH")
    run.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                     help="an fsspec storage option for s3://, gs://, ... paths: the default "
                          "of the readers, writers and checkpoint given none (config "
                          "io.storage-options; NeMo Curator's stages take theirs in "
                          "read_kwargs/write_kwargs). Repeatable; VALUE is JSON when it parses, "
                          "else a string; dots nest: client_kwargs.endpoint_url=http://...")
    run.add_argument("--job-id", metavar="ID", help="name the job (default: a new UTC token)")
    run.add_argument("--resume", metavar="TOKEN",
                     help="continue job TOKEN after checking its configuration and inputs")
    run.add_argument("--work-dir", metavar="DIR",
                     help="where job folders go (default: config jobs.work-dir, "
                          "./curator-dask-jobs)")
    run.add_argument("--verify-content", action=argparse.BooleanOptionalAction, default=None,
                     help="fingerprint a job's inputs by content (sha256), not size and mtime "
                          "(default: off for a new job; a resume uses the job's recorded mode)")
    run.add_argument("--verify-inputs", choices=["off", "fingerprint", "content"],
                     help="check that inputs of sources the checkpoint marks complete did not "
                          "change (default: config checkpoint.verify-inputs, off)")
    run.add_argument("--on-input-change", choices=["reprocess", "error"],
                     help="what a completed source whose inputs changed gets (default: "
                          "reprocess)")
    run.add_argument("--stage-checkpoints",
                     choices=["disabled", "every_stage", "every_n_stages", "manual"],
                     metavar="STRATEGY",  # the choices in the help: the usage line stays narrow
                     help="memoize stage outputs so replayed sources resume from the deepest "
                          "boundary: disabled, every_stage, every_n_stages or manual (default: "
                          "config stage-checkpoints.strategy, disabled)")
    run.add_argument("--checkpoint-every", type=int, metavar="N",
                     help="every_n_stages: checkpoint after every N-th stage")
    run.add_argument("--checkpoint-stages", metavar="NAMES",
                     help="manual: comma-separated stage names to checkpoint after")
    run.add_argument("--checkpoint-format", choices=["arrow", "parquet", "jsonl"],
                     help="stage checkpoint file format (default: config "
                          "stage-checkpoints.format, arrow)")
    run.add_argument("--checkpoint-compression",
                     choices=["none", "snappy", "gzip", "lz4", "zstd"],
                     help="stage checkpoint compression, one the format supports: arrow: none "
                          "(default), lz4, zstd; parquet: snappy (default), gzip, zstd, none; "
                          "jsonl: none (default), gzip")
    run.add_argument("--checkpoint-retention",
                     choices=["cleanup_on_complete", "keep_all", "keep_failed_only",
                              "cleanup_all"], metavar="RETENTION",
                     help="when stage checkpoints are deleted: cleanup_on_complete, keep_all, "
                          "keep_failed_only or cleanup_all (default: cleanup_on_complete; "
                          "cleanup_all: also every remaining one of the run's sources when the "
                          "run ends, however it ends)")
    run.add_argument("--max-concurrent-partitions", metavar="N|auto",
                     help="the most source partitions in flight at once (chunks of tiny "
                          "sources are cut to fit); auto: as many as the in-flight window of "
                          "2 x worker threads chains carries (default: config "
                          "execution.max-concurrent-partitions, auto)")
    run.add_argument("--no-job", action="store_true",
                     help="run without a job folder (no event log, summary or resume token)")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    run.add_argument("--no-fuse", action="store_true", help="one Dask task per stage")
    run.add_argument("-v", "--verbose", action="count", default=0,
                     help="more log output (-v: debug for curator_dask, -vv: also Dask)")
    run.set_defaults(func=cmd_run)


def add_allow_target_module(p: argparse.ArgumentParser) -> None:
    """``--allow-target-module`` (also on ``slurm submit``, for the array tasks' ``run``)."""
    p.add_argument("--allow-target-module", action="append", default=[], metavar="MODULE",
                   help="a YAML pipeline's nested _target_s (a filter inside ScoreFilter) may "
                        "also be classes of MODULE and the modules under it, e.g. mypackage "
                        "(repeatable; adds to config pipeline-files.allowed-modules). Without "
                        "it only classes of curator_dask, nemo_curator and modules in the "
                        "pipeline file's folder are made; allow only modules you trust")


def _add_cluster_arguments(run: argparse.ArgumentParser) -> None:
    """Where the run's Dask cluster comes from: embedded, a scheduler address, or SLURM."""
    run.add_argument("--workers", type=int, metavar="N",
                     help="worker processes of the embedded cluster (default: CPU count)")
    run.add_argument("--threads-per-worker", type=int, metavar="N",
                     help="threads per embedded worker (default: 1)")
    run.add_argument("--address", metavar="ADDR",
                     help="scheduler address of a running cluster, e.g. tcp://10.0.0.5:8786")
    chosen = kinds.user_kinds()
    run.add_argument("--cluster", choices=[kind.name for kind in chosen], default=None,
                     help="; ".join(f"{kind.name}: {kind.description}" for kind in chosen))
    run.add_argument("--scheduler-file", metavar="PATH",
                     help=f"{_kinds_taking('scheduler_file')}: shared scheduler file "
                          "(default ./.curator-dask-scheduler-{job_id}.json)")
    run.add_argument("--jobs", type=int, metavar="N",
                     help=f"SLURM worker jobs ({_kinds_taking('jobs')})")
    run.add_argument("--adapt", metavar="MIN:MAX",
                     help=f"{_kinds_taking('adapt')}: scale between MIN and MAX worker jobs "
                          "(instead of --jobs): jobs are asked for while sources wait and "
                          "released when idle (config slurm.adapt-idle-timeout, 60 s); MIN 0 "
                          "starts none")
    run.add_argument("--no-tls", action="store_true",
                     help=f"{_kinds_taking('tls')} without TLS (only on a private allocation)")


def _kinds_taking(option: str) -> str:
    """``--cluster slurm`` (or several, joined by "or"): the kinds ``option`` goes with."""
    return " or ".join(f"--cluster {kind.name}" for kind in kinds.kinds_with(option))


def _chosen_kind(args: argparse.Namespace) -> kinds.ClusterKind:
    """The kind ``--cluster`` names (the default when none is named)."""
    return kinds.cluster_kind(args.cluster or kinds.DEFAULT_KIND)


def check_cluster_options(args: argparse.Namespace) -> None:
    """The cluster options go with the kind ``--cluster`` names, and it is installed."""
    kind = _chosen_kind(args)
    if args.scheduler_file and "scheduler_file" not in kind.options:
        raise UsageError(f"--scheduler-file needs {_kinds_taking('scheduler_file')}")
    if args.jobs is not None and "jobs" not in kind.options:
        raise UsageError(f"--jobs needs {_kinds_taking('jobs')}")
    _check_adapt_option(args)
    if kind.name != kinds.DEFAULT_KIND and args.address:
        raise UsageError(f"--cluster {kind.name} starts its own scheduler; drop --address")
    check_cluster_installed(args)


def check_cluster_installed(args: argparse.Namespace) -> None:
    """What the kind ``--cluster`` names imports is installed (before anything is made)."""
    missing = _chosen_kind(args).missing_requirement()
    if missing:
        raise UsageError(f"--cluster {args.cluster} {missing}")


def _print_summary(result: RunResult, retry: str | None = None) -> None:
    """Print the per-stage counts table, the totals and the job id of a finished run, and
    last, when sources saw a ``FailedTask``, how many and how to retry them (``retry``)."""
    import textwrap

    from curator_dask.backends.dask.result import COUNTS_LEGEND

    table = result.counts_table()
    if not table:
        return
    print(table)
    print(textwrap.fill(f"({COUNTS_LEGEND})", width=100))
    print(f"{result.num_sources} sources, {result.num_outputs} output tasks, "
          f"{result.wall_time:.2f} s")
    if result.job_id:
        print(f"job {result.job_id}")
    line = result.failures_line(retry)
    if line is not None:
        print(line)


def checkpoint_kwargs(args: argparse.Namespace, recipe: dict | None = None) -> dict:
    """Stage checkpoint and input verification options for Pipeline.run; ``recipe``: the
    ``StageCheckpoints`` fields a pipeline file's recipe sets, over the configuration's and
    under the options'."""
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
    given = (strategy, args.checkpoint_format, args.checkpoint_retention,
             args.checkpoint_compression)
    if all(v is None for v in given) and not recipe:
        return kwargs
    recipe = dict(recipe or {})
    if args.checkpoint_format is not None and args.checkpoint_compression is None:
        recipe.pop("compression", None)  # the recipe's compression went with its format
    defaults = {**config.section("stage-checkpoints"), **recipe}
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
                       ("compression", args.checkpoint_compression),
                       ("retention", args.checkpoint_retention)):
        if value is not None:
            settings[key] = value
    from curator_dask.resumability.stage_checkpoints import StageCheckpoints

    try:
        kwargs["stage_checkpoints"] = StageCheckpoints(**settings)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return kwargs


def partition_kwargs(args: argparse.Namespace) -> dict:
    """``--max-concurrent-partitions`` for Pipeline.run (nothing when not given)."""
    text = args.max_concurrent_partitions
    if text is None:
        return {}
    from curator_dask.backends.base import check_max_concurrent_partitions

    try:
        value = text if text == "auto" else int(text)
        return {"max_concurrent_partitions": check_max_concurrent_partitions(
            value, given="--max-concurrent-partitions")}
    except ValueError:
        raise UsageError(f"--max-concurrent-partitions {text}: expected auto or a whole number "
                         "of at least 1 (the most source partitions in flight at once), e.g. "
                         "--max-concurrent-partitions 4") from None


def _executor(args: argparse.Namespace) -> DaskExecutor:
    """The ``DaskExecutor`` the options describe (every cluster kind runs the same way)."""
    from curator_dask.backends.dask import DaskExecutor

    return DaskExecutor(
        address=args.address,
        # the default kind named is the same as none (``--address`` may go with it)
        cluster=None if args.cluster == kinds.DEFAULT_KIND else args.cluster,
        jobs=args.jobs,
        adapt=parse_adapt(args.adapt),
        tls=False if args.no_tls else None,
        scheduler_file=args.scheduler_file,
        n_workers=args.workers,
        threads_per_worker=args.threads_per_worker,
        progress=False if args.no_progress else None,
        fuse=False if args.no_fuse else None,
        keep_outputs=False,  # the command prints counts: the driver holds no output task
    )


def parse_adapt(text: str | None) -> tuple[int, int] | None:
    """``--adapt MIN:MAX`` as ``(MIN, MAX)``; a bad value is a :class:`UsageError`.

    Example:
        >>> parse_adapt("0:4")
        (0, 4)
        >>> parse_adapt(None) is None
        True
    """
    if text is None:
        return None
    low, sep, high = text.partition(":")
    try:
        pair = (int(low), int(high)) if sep else None
    except ValueError:
        pair = None
    if pair is None:
        raise UsageError(f"--adapt {text}: expected MIN:MAX, two whole numbers of SLURM worker "
                         "jobs, e.g. --adapt 0:4")
    from curator_dask.slurm.cluster import check_adapt

    try:
        return check_adapt(pair, given=f"--adapt {text}")
    except ValueError as exc:
        fix = str(exc).replace("(minimum, maximum)", "MIN:MAX")
        raise UsageError(fix.replace(f"({pair[1]}, {pair[0]})",
                                     f"--adapt {pair[1]}:{pair[0]}")) from None


def _check_adapt_option(args: argparse.Namespace) -> None:
    """``--adapt`` goes with ``--cluster slurm``, not with ``--jobs``, and its value parses."""
    if args.adapt is None:
        return
    if "adapt" not in _chosen_kind(args).options:
        raise UsageError(f"--adapt {args.adapt} needs {_kinds_taking('adapt')}")
    if args.jobs is not None:
        raise UsageError(f"--adapt {args.adapt} and --jobs {args.jobs} exclude each other: "
                         "--jobs keeps a fixed number of worker jobs, --adapt lets it follow "
                         "the work; pass only one of them")
    parse_adapt(args.adapt)


def _drain_on_signals() -> None:
    """SLURM sends USR1 (``--signal=B:USR1@grace``) before the time limit and TERM on
    preemption (and ``stop --force`` TERM last): both stop starting sources and let running
    ones finish, through the registry of the runs in progress in this process
    (``backends/dask/stop.py``; docs/design/architecture.md "The stop path")."""
    import signal

    from curator_dask.backends.dask.stop import request_stop  # imported now, not in a handler

    def stop(signum: int, _frame: object) -> None:
        request_stop(f"received {signal.Signals(signum).name}")

    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, stop)


def cmd_run(args: argparse.Namespace) -> int:
    """Check the options, load the pipeline and run it; SIGUSR1/SIGTERM drain the run.

    Returns:
        ``EXIT_OK``; ``EXIT_PARTIAL`` when the run ended but sources saw a ``FailedTask``;
        ``EXIT_STOPPED`` when a signal or ``stop`` ended the run early.
    """
    from curator_dask.cli.loader import PipelineDefinitionError, load_recipe

    for name in ("workers", "threads_per_worker"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    check_cluster_options(args)
    partitions = partition_kwargs(args)
    if args.address and (args.workers or args.threads_per_worker):
        raise UsageError("--workers/--threads-per-worker configure the embedded cluster; "
                         "they cannot be combined with --address")
    if args.storage_option:  # before the pipeline is loaded: its stages read the default
        from curator_dask.utils.storage_options import set_default_storage_options

        try:
            set_default_storage_options(args.storage_option)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    executor = _executor(args)
    # An embedded cluster's workers' server starts now: it imports their modules while this
    # process loads the pipeline file (nothing for another kind of cluster).
    executor.prepare_workers()
    try:
        pipeline, recipe = load_recipe(args.pipeline, args.allow_target_module)
    except PipelineDefinitionError as exc:
        raise UsageError(str(exc)) from None
    # Usage errors before a cluster starts; the command's options win over the recipe's.
    run_kwargs = {**job_kwargs(args), **recipe.partition_kwargs(),
                  **checkpoint_kwargs(args, recipe.stage_checkpoints), **partitions}
    _drain_on_signals()
    from curator_dask.errors import (
        OutputFolderError,
        OverwriteWithCheckpointError,
        PartitioningChangedError,
        PartitionRecordError,
        RunStopped,
        SchedulerLostError,
    )
    from curator_dask.jobs.job import ResumeMismatchError
    from curator_dask.resumability.input_check import InputChangedError
    from curator_dask.utils.files import NoInputFilesError

    if _chosen_kind(args).starts_in_every_rank:
        # Every rank of the srun step gets here; only the driver rank returns from start()
        # (the scheduler and worker ranks serve until the driver is done, then exit), so
        # only the driver goes on to make the job folder and run.
        executor.start()
    import warnings

    from curator_dask.errors import PartialRunWarning

    warnings.filterwarnings("ignore", category=PartialRunWarning)  # the last line says it
    try:
        result = pipeline.run(executor=executor, checkpoint_path=args.checkpoint_path,
                              **run_kwargs)
    except RunStopped as exc:
        print(f"{PROG} run: stopped: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except SchedulerLostError as exc:
        print(f"{PROG} run: failed: {exc}; completions already recorded are kept, run again "
              "to process the rest", file=sys.stderr)
        return EXIT_SCHEDULER_LOST
    except (ResumeMismatchError, FileExistsError, InputChangedError, NoInputFilesError,
            PartitioningChangedError, PartitionRecordError, OverwriteWithCheckpointError,
            OutputFolderError) as exc:
        # NoInputFilesError: the head's file discovery runs before the cluster starts, so a
        # wrong input path is refused before any source is processed
        raise UsageError(str(exc)) from None
    finally:
        executor.close()
    from curator_dask.backends.dask.result import RunResult

    if not isinstance(result, RunResult):  # a DaskExecutor's run always is; Pipeline.run is
        return EXIT_OK  # typed for any executor's plain list, which has nothing to summarize
    retry = (f"resume with `{run_kwargs['command']} --resume {result.job_id}`"
             if result.job_id and run_kwargs.get("command") else "run the same command again")
    _print_summary(result, retry)
    return EXIT_PARTIAL if result.completed_with_failures else EXIT_OK
