"""``dedup exact|fuzzy INPUT --output DIR``: the deduplication workflows from the command line.

Each phase prints one line when it ends (the workflows log them on ``curator_dask.dedup``), and
the command ends with the number of duplicates and where the ids went. The cluster options are
``run``'s (embedded by default, ``--address``, ``--cluster slurm``). See docs/deduplication.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from curator_dask.cli.common import EXIT_OK, PROG, UsageError

if TYPE_CHECKING:
    from curator_dask.dedup import ExactDeduplicationWorkflow, FuzzyDeduplicationWorkflow


def register(sub: argparse._SubParsersAction) -> None:
    from curator_dask.cli.run_command import _add_cluster_arguments

    dedup = sub.add_parser(
        "dedup", prog=f"{PROG} dedup",
        help="find (and remove) duplicate documents across a whole corpus, on CPU",
        description="Deduplicate a JSONL or Parquet corpus with NeMo Curator's exact or fuzzy "
                    "workflow, on Dask and on CPU. Writes NeMo's layout: the ids to remove and "
                    "the id generator's JSON under --output.")
    kinds = dedup.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind, text in (("exact", "md5 of the (normalised) text; identical documents"),
                       ("fuzzy", "MinHash + LSH on character n-grams; near-duplicates")):
        p = kinds.add_parser(kind, prog=f"{PROG} dedup {kind}", help=text, description=text)
        p.add_argument("input", metavar="INPUT", nargs="+",
                       help="a folder, files or a glob of the corpus (local or fsspec URL)")
        p.add_argument("--output", required=True, metavar="DIR",
                       help="where the duplicate ids and the id generator JSON go")
        p.add_argument("--cache", metavar="DIR",
                       help="intermediate results (fuzzy: required, NeMo's cache_path; exact: "
                            "default under --checkpoint-path, else a temporary folder)")
        p.add_argument("--input-filetype", choices=["jsonl", "parquet"], default=None,
                       help="default: from the files' extension, else parquet (NeMo's default)")
        p.add_argument("--text-field", default="text", metavar="NAME",
                       help="the column compared (default: text)")
        p.add_argument("--id-field", metavar="NAME",
                       help="use the corpus's own ids from this column instead of assigning ids")
        p.add_argument("--blocksize", default="256MiB", metavar="SIZE",
                       help="input bytes per file group, one task each (default 256MiB: a "
                            "CPU worker's share; NeMo's GPU-sized defaults are 2GiB exact, "
                            "1GiB fuzzy)")
        p.add_argument("--partition-mode", choices=["auto", "manual"], default=None,
                       help="read row ranges of the files instead of whole files, so a big "
                            "file is several tasks (--blocksize is then unused): auto, ranges "
                            "of about 256 MB in memory per file; manual, --num-partitions "
                            "ranges over all the input")
        p.add_argument("--num-partitions", type=int, default=None, metavar="N",
                       help="with --partition-mode manual: the number of row ranges")
        p.add_argument("--normalize-text", action="store_true",
                       help="lowercase, collapse whitespace and strip before hashing")
        p.add_argument("--checkpoint-path", metavar="PATH",
                       help="resume a killed run: completed partitions and phases are skipped")
        p.add_argument("--verify-inputs", choices=["off", "fingerprint", "content"],
                       default="fingerprint",
                       help="with --checkpoint-path: read again the input files changed since "
                            "the run that completed them (default: fingerprint, size and "
                            "mtime; content: a sha256 of every byte)")
        p.add_argument("--remove", action="store_true",
                       help="also write the deduplicated corpus to DIR/deduplicated/")
        if kind == "fuzzy":
            p.add_argument("--char-ngrams", type=int, default=24, metavar="N",
                           help="shingle width in characters (default: 24, NeMo's)")
            p.add_argument("--num-bands", type=int, default=20, metavar="B",
                           help="LSH bands (default: 20); see docs/deduplication.md for "
                                "choosing bands and rows for a threshold")
            p.add_argument("--minhashes-per-band", type=int, default=13, metavar="R",
                           help="MinHash values per band (default: 13)")
            p.add_argument("--seed", type=int, default=42,
                           help="fixes every hash constant (default: 42)")
            p.add_argument("--jaccard-check", action="store_true",
                           help="verify candidate pairs by their true Jaccard similarity and "
                                "drop those below --jaccard-threshold (NeMo 0.x's "
                                "false_positive_check)")
            p.add_argument("--jaccard-threshold", type=float, default=0.8, metavar="T",
                           help="the --jaccard-check threshold (default: 0.8)")
        p.add_argument("--job-id", metavar="ID",
                       help="run as a job: its folder <work-dir>/<ID>/ gets the phase events "
                            "that `status ID` shows")
        p.add_argument("--work-dir", metavar="DIR",
                       help="where the job folder goes (default: config jobs.work-dir)")
        p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
        p.add_argument("-v", "--verbose", action="count", default=0,
                       help="-v: debug logs of curator_dask; -vv: also distributed's")
        _add_cluster_arguments(p)
        p.set_defaults(func=cmd_dedup, no_fuse=False)


def _filetype(args: argparse.Namespace) -> str:
    if args.input_filetype:
        return args.input_filetype
    names = " ".join(args.input).lower()
    return "jsonl" if (".jsonl" in names or ".json" in names) else _sniff(args.input)


def _sniff(inputs: list[str]) -> str:
    """The corpus's type from the first file found under the inputs (local folders only)."""
    import os

    for entry in inputs:
        if os.path.isdir(entry):
            for _root, _dirs, files in os.walk(entry):
                for name in sorted(files):
                    if name.endswith((".jsonl", ".json", ".jsonl.gz", ".jsonl.zst")):
                        return "jsonl"
                    if name.endswith(".parquet"):
                        return "parquet"
    return "parquet"


def _partition(args: argparse.Namespace) -> dict[str, Any] | None:
    """``partition=`` from ``--partition-mode`` / ``--num-partitions`` (usage errors here)."""
    if args.partition_mode is None:
        if args.num_partitions is not None:
            raise UsageError("--num-partitions needs --partition-mode manual")
        return None
    if args.partition_mode == "auto":
        if args.num_partitions is not None:
            raise UsageError("--num-partitions is for --partition-mode manual; auto sizes "
                             "the ranges itself: drop --num-partitions")
        return {"mode": "auto"}
    if args.num_partitions is None or args.num_partitions < 1:
        raise UsageError("--partition-mode manual needs --num-partitions N (N >= 1), got "
                         f"{args.num_partitions}")
    return {"mode": "manual", "num_of_partitions": args.num_partitions}


def _workflow(
        args: argparse.Namespace,
) -> ExactDeduplicationWorkflow | FuzzyDeduplicationWorkflow:
    common = dict(output_path=args.output, input_path=args.input if len(args.input) > 1
                  else args.input[0], input_filetype=_filetype(args), text_field=args.text_field,
                  normalize_text=args.normalize_text, perform_removal=args.remove,
                  checkpoint_path=args.checkpoint_path, verify_inputs=args.verify_inputs)
    if args.blocksize:
        common["input_blocksize"] = args.blocksize
    common["partition"] = _partition(args)
    if args.kind == "exact":
        from curator_dask.dedup import ExactDeduplicationWorkflow

        if args.id_field:
            common.update(assign_id=False, id_field=args.id_field)
        return ExactDeduplicationWorkflow(cache_path=args.cache, **common)
    from curator_dask.dedup import FuzzyDeduplicationWorkflow

    if not args.cache:
        raise UsageError("dedup fuzzy needs --cache DIR (NeMo's cache_path: the minhashes, "
                         "buckets and edges are kept there)")
    if args.id_field:
        raise UsageError("dedup fuzzy assigns its own ids (NeMo's fuzzy workflow has no "
                         "id_field); drop --id-field")
    if not 0 < args.jaccard_threshold <= 1:
        raise UsageError(f"--jaccard-threshold must be in (0, 1], got {args.jaccard_threshold}")
    return FuzzyDeduplicationWorkflow(
        cache_path=args.cache, char_ngrams=args.char_ngrams, num_bands=args.num_bands,
        minhashes_per_band=args.minhashes_per_band, seed=args.seed,
        false_positive_check=args.jaccard_check, jaccard_threshold=args.jaccard_threshold,
        **common)


def cmd_dedup(args: argparse.Namespace) -> int:
    """Build the workflow from the options (usage errors before a cluster starts), run it on
    the executor the cluster options describe, print the summary."""
    from curator_dask.cli.run_command import (
        _check_adapt_option,
        _executor,
        check_cluster_installed,
    )

    check_cluster_installed(args)
    _check_adapt_option(args)
    from curator_dask.utils.files import NoInputFilesError, check_paths_exist

    try:  # a typo in an input path: one line before anything is made
        check_paths_exist(list(args.input))
    except NoInputFilesError as exc:
        raise UsageError(str(exc)) from None
    try:
        workflow = _workflow(args)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    executor = _executor(args)
    try:
        result = workflow.run(executor=executor, work_dir=args.work_dir, job_id=args.job_id)
    except FileNotFoundError as exc:  # the input names no file: before any work
        raise UsageError(str(exc)) from None
    finally:
        executor.close()
    meta = result.metadata
    print(f"{result.workflow_name}: {meta.get('num_duplicates', 0)} duplicates found"
          f" in {meta.get('total_time', 0.0):.1f} s")
    for key in ("id_generator_path", "duplicate_ids_path", "deduplicated_path"):
        if meta.get(key):
            print(f"  {key}: {meta[key]}")
    if meta.get("num_duplicates"):
        print(f"  which documents: {_groups_hint(args)}")
    sys.stdout.flush()
    return EXIT_OK


def _groups_hint(args: argparse.Namespace) -> str:
    """How to map the ids written to the documents (docs/deduplication.md, "Which documents")."""
    if args.kind == "exact" and not args.id_field:
        return ("the ids are _curator_dedup_id numbers; rerun with --id-field COLUMN to write "
                "the corpus's own ids instead (see docs/deduplication.md, 'Which documents')")
    if args.kind == "exact":
        return f"the ids are the corpus's {args.id_field!r} values"
    return (f"{args.cache}/ConnectedComponentsStage lists each linked document's "
            "_curator_dedup_id and its group; docs/deduplication.md ('Which documents') reads "
            "the texts of each group")


__all__ = ["cmd_dedup", "register"]
