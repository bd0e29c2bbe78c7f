"""Strict resume from ``partitioning_info.json``, in Data-Juicer's order.

Before the head runs (on the driver, before the cluster starts: so before any checkpoint is
read for completions, and before anything is processed), the source stage's partitions are
settled here (:func:`settle`):

1. no record: partitions are planned (and hashed) and the record written. On a resume whose
   checkpoint already has completions, and whenever this input's files were completed as
   whole-file partitions, the run is refused instead (``PartitionRecordError``);
2. a record: its version must hold boundaries; its parameters must be this run's (else refused,
   naming both, unless the checkpoint has no completion: then it is planned again);
3. the partitions are rebuilt from the saved boundaries (no new sample or scan) and their
   boundaries checked;
4. every partition's content is verified against its saved size and hash (in threads);
   any change stops the run (``PartitionContentChangedError``), naming each partition, its
   file and its boundaries;
5. only then does the run go on, and skips completed partitions as always.

Nothing here deletes or rewrites a record that is refused. See docs/partitions-inside-files.md.
"""

from __future__ import annotations

import logging
from typing import Any

from curator_dask.errors import PartitionContentChangedError, PartitionRecordError
from curator_dask.partitions import jsonl
from curator_dask.partitions.plan import (
    Partition,
    PartitionPlan,
    digest,
    file_format,
    filesystem,
    parallel,
    plan_partitions,
)
from curator_dask.partitions.record import (
    RangesRecord,
    check_version,
    plan_of,
    ranges_payload,
    source_parameters,
)
from curator_dask.partitions.spec import PartitionSpec

logger = logging.getLogger(__name__)

RANGE_PARAMETERS = ("type", "stage", "file_paths", "file_extensions", "partition")
_SHOWN = 3
_FIX = ("Nothing was processed and nothing was deleted. Restore the input (and parameters) the "
        "checkpoint was made with, or use a new checkpoint path and a new output folder")


def completed_ids(checkpoint_url: str, storage_options: dict | None) -> set[str]:
    """The checkpoint's completed source ids, read only (no writer file: none)."""
    from curator_dask.resumability.inspect import inspect_checkpoint
    from curator_dask.resumability.layout import METADATA_DIRNAME
    from curator_dask.resumability.store import writer_file_sizes

    fs, root = filesystem(checkpoint_url, storage_options)
    if not writer_file_sizes(fs, f"{root.rstrip('/')}/{METADATA_DIRNAME}"):
        return set()
    return set(inspect_checkpoint(checkpoint_url, storage_options).completed)


def settle(stage: Any, records: list[tuple[str, int]], checkpoint_url: str,
           storage_options: dict | None, *, strict: bool) -> PartitionPlan | None:
    """The partitions of ``stage`` over the listing ``records`` in a checkpointed run (see the
    module docstring); ``None`` for a stage of whole-file partitions. ``strict``: a resume."""
    file = RangesRecord(checkpoint_url, storage_options)
    saved = file.read()
    params = source_parameters(stage)
    spec = PartitionSpec.coerce(stage.partition)
    if saved is not None:
        check_version(saved, file.url)
        old = saved.get("parameters") or {}
        changed = [n for n in RANGE_PARAMETERS if old.get(n) != params[n]]
        if changed:
            _refuse_if_completed(saved, params, changed, file.url, checkpoint_url,
                                 storage_options)
            saved = None  # nothing is complete: planned again
    if spec is None:
        return None
    if saved is None:
        done = completed_ids(checkpoint_url, storage_options)
        _refuse_without_record(records, done, file.url, strict)
        plan = plan_partitions(records, spec, storage_options, hashing=True)
        file.write(ranges_payload(plan, params))
        return plan
    plan = plan_of(saved, file.url)
    verify(plan, records, storage_options, checkpoint_url)
    known = {f.path for f in plan.files}
    added = [r for r in records if r[0] not in known]
    if added:
        if spec.mode == "manual":
            msg = (f"{len(added)} input file(s) were added since checkpoint {checkpoint_url} was "
                   f"made (e.g. {added[0][0]}), and manual partitions split the rows of the "
                   f"whole input, so every boundary would move. {_FIX}")
            raise PartitionRecordError(msg)
        more = plan_partitions(added, spec, storage_options, hashing=True)
        plan = PartitionPlan(plan.files + more.files, plan.partitions + more.partitions)
        file.write(ranges_payload(plan, params))
    return plan


def _refuse_if_completed(saved: dict[str, Any], params: dict[str, Any], changed: list[str],
                         url: str, checkpoint_url: str, storage_options: dict | None) -> None:
    old = saved.get("parameters") or {}
    what = "; ".join(f"{n} was {old.get(n)!r}, now {params.get(n)!r}" for n in changed)
    done = completed_ids(checkpoint_url, storage_options)
    if not done:
        logger.info("partition record %s: %s; no partition is complete, so the partitions are "
                    "planned again", url, what)
        return
    msg = (f"the source stage's partitioning differs from the one checkpoint {checkpoint_url} "
           f"was made with ({url}): {what}. {len(done)} partitions are complete, and under new "
           "partitions their rows would be processed again and written twice. Run with the "
           f"recorded values again, or use a new checkpoint path and a new output folder")
    raise PartitionRecordError(msg)


def _refuse_without_record(records: list[tuple[str, int]], done: set[str], url: str,
                           strict: bool) -> None:
    """No record: refused on a resume of a checkpoint with completions, and for files the
    checkpoint completed as whole-file partitions (their rows would be written twice)."""
    from curator_dask.lineage import get_deterministic_hash

    if not done:
        return
    if strict:
        msg = (f"cannot resume: the checkpoint records {len(done)} completed partitions but has "
               f"no partition record ({url} is missing), so the partitions they were cut from "
               "cannot be rebuilt. Nothing was processed and nothing was deleted; resume with "
               "the checkpoint as it was, or start a new job")
        raise PartitionRecordError(msg)
    whole = [p for p, _ in records if get_deterministic_hash([p]) in done]
    if whole:
        msg = (f"{len(whole)} input file(s) were completed as whole-file partitions in this "
               f"checkpoint (e.g. {whole[0]}); partition= would cut them into row ranges and "
               f"process their rows again. {_FIX}")
        raise PartitionRecordError(msg)
    logger.warning("the checkpoint has %d completed partitions but no partition record (%s): "
                   "the partitions are planned again and recorded", len(done), url)


def _changed_content(part: Partition, storage_options: dict | None) -> str | None:
    """Why ``part``'s content is not what was recorded, or ``None``; a boundary that is not
    (or no longer) on a line raises ``PartitionRecordError``."""
    try:
        if part.whole_file or file_format(part.pieces[0].path) == "parquet":
            found, lines = digest(part, storage_options)[0], None
        else:
            fs, _ = filesystem(part.pieces[0].path, storage_options)
            lines = jsonl.digest_ranges(fs, [(fs._strip_protocol(p.path), *p.byte_range())
                                             for p in part.pieces])
            found = lines.sha256
    except (EOFError, IndexError, FileNotFoundError) as exc:
        return f"its rows cannot be read ({exc})"
    if found != part.sha256:
        return f"sha256 {found} where {part.sha256} was recorded"
    if lines is not None:
        for piece, n, ends in zip(part.pieces, lines.newlines, lines.ends_with_newline,
                                  strict=True):
            if n + (0 if ends else 1) != piece.end_row - piece.start_row:
                msg = (f"the recorded boundaries of {part.shown()} are not on line "
                       f"boundaries: {piece.shown()} holds {n} newlines. {_FIX}")
                raise PartitionRecordError(msg)
    return None


def verify(plan: PartitionPlan, records: list[tuple[str, int]], storage_options: dict | None,
           checkpoint_url: str) -> None:
    """Refuse when a recorded file is gone or resized, or any partition's content hash
    differs; every partition is hashed (in threads) before the first is judged."""
    sizes = dict(records)
    problems: list[tuple[Partition, str]] = []
    for f in plan.files:
        size = sizes.get(f.path)
        if size is not None and size < 0:
            fs, fs_path = filesystem(f.path, storage_options)
            size = int(fs.size(fs_path))
        why = ("the file is no longer in the input" if size is None else
               f"the file is {size} bytes, {f.size} were recorded" if size != f.size else None)
        if why:
            problems.extend((p, why) for p in plan.partitions if f.path in p.paths)
    if not problems:
        found = parallel(lambda p: _changed_content(p, storage_options), plan.partitions)
        problems = [(p, why) for p, why in zip(plan.partitions, found, strict=True) if why]
    if problems:
        shown = "; ".join(f"{p.shown()}: {why}" for p, why in problems[:_SHOWN])
        more = f" (and {len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
        msg = (f"the input of {len(problems)} of the {len(plan.partitions)} partitions recorded "
               f"in checkpoint {checkpoint_url} changed since it was made: {shown}{more}. {_FIX}")
        raise PartitionContentChangedError(msg)
