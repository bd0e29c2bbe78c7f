"""The ``checkpoint inspect`` command: a read-only look at a checkpoint's writer files."""

from __future__ import annotations

import argparse

from curator_dask.cli.common import EXIT_OK, UsageError, add_hidden_verbose


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``checkpoint`` parser and its ``inspect`` action to the top-level subparsers."""
    checkpoint = sub.add_parser("checkpoint", help="look at a checkpoint")
    checkpoint_sub = checkpoint.add_subparsers(dest="checkpoint_command", metavar="ACTION",
                                               required=True)
    inspect = checkpoint_sub.add_parser(
        "inspect",
        help="list writer files and completed sources",
        description=(
            "List the writer files of a checkpoint (completed counts, unreadable and damaged "
            "files) and, with --input, which input partitions are complete. Read-only; each "
            "file is read in a child process, so a damaged one cannot crash the command."
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
    add_hidden_verbose(inspect)
    inspect.set_defaults(func=cmd_checkpoint_inspect)


def check_checkpoint_path(path: str) -> None:
    """Refuse (``UsageError``, exit 2) a checkpoint path that does not exist, is a file, or is
    the metadata folder inside a checkpoint rather than the checkpoint itself.

    Example:
        >>> try:
        ...     check_checkpoint_path("/no/such/checkpoint")
        ... except UsageError as exc:
        ...     print(str(exc).split(":")[0])
        no checkpoint at /no/such/checkpoint
    """
    import fsspec

    from curator_dask.resumability.layout import METADATA_DIRNAME

    fs, root = fsspec.core.url_to_fs(path)
    if not fs.exists(root):
        raise UsageError(f"no checkpoint at {path}: the path does not exist (give the "
                         "checkpoint_path of the runs)")
    if not fs.isdir(root):
        raise UsageError(f"{path} is a file, not a checkpoint folder (give the checkpoint_path "
                         "of the runs)")
    if root.rstrip(fs.sep).rsplit(fs.sep, 1)[-1] == METADATA_DIRNAME:
        raise UsageError(f"{path} is the metadata folder inside a checkpoint; give the "
                         "checkpoint folder above it")


def cmd_checkpoint_inspect(args: argparse.Namespace) -> int:
    """Print (or, with ``--json``, dump) the checkpoint's writer files and completed sources."""
    import json

    from curator_dask.resumability.inspect import inspect_checkpoint, map_partitions

    if args.files_per_partition is not None and args.blocksize is not None:
        raise UsageError("--files-per-partition and --blocksize are exclusive (as in readers)")
    check_checkpoint_path(args.path)
    report = inspect_checkpoint(args.path)
    if args.input:
        try:
            map_partitions(report, args.input, files_per_partition=args.files_per_partition,
                           blocksize=args.blocksize, file_extensions=args.extensions)
        except FileNotFoundError as exc:  # NoInputFilesError: the path or glob has no inputs
            raise UsageError(f"--input {args.input}: {str(exc).split(';')[0]}") from None
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return EXIT_OK
    print(f"checkpoint: {report.checkpoint}")
    print(f"metadata:   {report.metadata_dir}")
    print(f"writer files: {len(report.writers)}" + ("" if report.writers else
          " (no run has recorded a completion in this checkpoint yet)"))
    for w in report.writers:
        state = f"{w.completed} completed" if w.error is None else (
            f"UNREADABLE ({'damaged: ' if w.damaged else ''}{w.error})")
        print(f"  {w.path}  {w.size} bytes  {state}")
    if report.damaged:
        print(f"damaged writer files: {len(report.damaged)} (skipped by runs: their sources "
              "run again)")
    print(f"completed sources (union): {len(report.completed)}")
    if report.partitions is not None:
        done = sum(p.complete for p in report.partitions)
        print(f"input: {len(report.partitions)} partitions: {done} complete, "
              f"{len(report.partitions) - done} pending")
        for p in report.partitions:
            mark = "complete" if p.complete else "pending "
            print(f"  {mark}  {p.source_id}  {', '.join(p.files)}")
    return EXIT_OK
