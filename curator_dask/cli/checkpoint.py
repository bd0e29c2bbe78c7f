"""The ``checkpoint inspect`` command: a read-only look at a checkpoint's writer files."""

from __future__ import annotations

import argparse
from typing import Any

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
            "files) and, with --input, which input partitions are complete. A checkpoint of "
            "row-range partitions (partition=) lists them from its partition record "
            "(partitioning_info.json), with or without --input. Read-only; each file is read "
            "in a child process, so a damaged one cannot crash the command."
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


def record_partitions(report: Any, checkpoint: str, listed: list[str] | None) -> dict[str, Any]:
    """Fill ``report.partitions`` from the checkpoint's partition record
    (``partitioning_info.json``, row-range partitions), when it has one.

    A run with ``partition=`` cuts files into row ranges; their ids hash the ranges, so they
    cannot be found again by grouping whole files: the record holds them. ``listed``: the
    files of ``--input`` (``None``: every partition of the record). A listed file the record
    does not hold is a pending partition of its own (a run plans it). Returns what the output
    says about the record: ``path`` and ``parameters``, ``error`` when it cannot be read
    (no partition is then shown), ``unplanned`` files. Empty: no record.
    """
    from curator_dask.errors import PartitionRecordError
    from curator_dask.partitions.record import RangesRecord, plan_of
    from curator_dask.resumability.inspect import PartitionStatus

    record_file = RangesRecord(checkpoint)
    try:
        record = record_file.read()
        if record is None:
            return {}
        plan = plan_of(record, record_file.url)
    except PartitionRecordError as exc:
        report.partitions = None  # whole files would be the wrong partitions: none are shown
        return {"path": record_file.url, "error": str(exc)}
    done = set(report.completed)
    wanted = None if listed is None else set(listed)
    statuses, pieces = [], {}
    for part in plan.partitions:
        if wanted is not None and not wanted.intersection(part.paths):
            continue
        statuses.append(PartitionStatus(source_id=part.id, files=list(dict.fromkeys(
            part.paths)), complete=part.id in done))
        pieces[part.id] = [{"path": p.path, "whole_file": True} if part.whole_file else
                           {"path": p.path, "start_row": p.start_row, "end_row": p.end_row}
                           for p in part.pieces]
    recorded = {f.path for f in plan.files}
    unplanned = [path for path in listed or [] if path not in recorded]
    statuses += [PartitionStatus(source_id="", files=[path], complete=False)
                 for path in unplanned]
    report.partitions = statuses
    return {"path": record_file.url, "parameters": record.get("parameters"),
            "pieces": pieces, "unplanned": unplanned}


def _shown_pieces(pieces: list[dict[str, Any]]) -> str:
    return "; ".join(f"{p['path']} (the whole file)" if p.get("whole_file") else
                     f"{p['path']} rows {p['start_row']}-{p['end_row']}" for p in pieces)


def cmd_checkpoint_inspect(args: argparse.Namespace) -> int:
    """Print (or, with ``--json``, dump) the checkpoint's writer files and completed sources."""
    import json

    from curator_dask.resumability.inspect import inspect_checkpoint, map_partitions

    if args.files_per_partition is not None and args.blocksize is not None:
        raise UsageError("--files-per-partition and --blocksize are exclusive (as in readers)")
    check_checkpoint_path(args.path)
    report = inspect_checkpoint(args.path)
    listed = None
    if args.input:
        try:
            map_partitions(report, args.input, files_per_partition=args.files_per_partition,
                           blocksize=args.blocksize, file_extensions=args.extensions)
        except FileNotFoundError as exc:  # NoInputFilesError: the path or glob has no inputs
            raise UsageError(f"--input {args.input}: {str(exc).split(';')[0]}") from None
        listed = list(dict.fromkeys(f for p in report.partitions or [] for f in p.files))
    record = record_partitions(report, args.path, listed)
    if record and "error" not in record and (args.files_per_partition is not None
                                             or args.blocksize is not None):
        raise UsageError("the checkpoint's partitions are row ranges (its partition record "
                         f"{record['path']}); --files-per-partition and --blocksize group "
                         "whole files: leave them out")
    if args.json:
        data = report.to_dict()
        pieces = record.pop("pieces", {})
        for part in data["partitions"] or []:
            if record and "error" not in record:
                part["pieces"] = pieces.get(part["source_id"]) or [
                    {"path": f, "whole_file": True} for f in part["files"]]
        data["partition_record"] = record or None
        print(json.dumps(data, indent=2))
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
    if record.get("error"):
        print(f"{record['error']} (so no partition is shown)")
    elif record:
        print(f"partition record: {record['path']} (row ranges: "
              f"{json.dumps((record['parameters'] or {}).get('partition'))})")
    if report.partitions is not None:
        done = sum(p.complete for p in report.partitions)
        print(f"{'input' if listed is not None else 'partitions'}: {len(report.partitions)} "
              f"partitions: {done} complete, {len(report.partitions) - done} pending")
        pieces = record.get("pieces") or {}
        for p in report.partitions:
            mark = "complete" if p.complete else "pending "
            if not p.source_id:
                print(f"  {mark}  {'-':12}  {p.files[0]} (not in the partition record: the "
                      "next run plans it)")
                continue
            where = _shown_pieces(pieces[p.source_id]) if p.source_id in pieces else (
                ", ".join(p.files))
            print(f"  {mark}  {p.source_id}  {where}")
    return EXIT_OK
