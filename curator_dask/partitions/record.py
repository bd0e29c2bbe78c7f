"""The partition records of a checkpoint: how its source stage cut the input into partitions.

Both are committed records (``utils/records.py``: written atomically, read with a kind and
version check) under ``<checkpoint>/.curator_dask/``, written before any source is processed:

- ``partitioning.json`` (:class:`GroupsRecord`, whole-file groups; checked by
  ``partitions/groups.py``), version 2. An unreadable one is written again (policy ``redo``:
  it only guards against regrouping, and a run without it is accepted)::

    {"kind": "partitioning", "version": 2, "parameters": {"stage": ..., "type": ...,
     "files_per_partition": ..., "blocksize": ..., "file_paths": ..., ...},
     "files": 16, "partitions": 8, "groups": {"<source id>": ["/abs/a.jsonl", ...], ...}}

- ``partitioning_info.json`` (:class:`RangesRecord`, row-range partitions; settled by
  ``partitions/resume.py``), version 1. An unreadable one is refused (policy ``refuse``:
  the completed row ranges cannot be rebuilt without it)::

    {"kind": "partitioning_info", "version": 1,
     "parameters": {"stage": ..., "type": ..., "file_paths": ...,
                    "file_extensions": [...], "partition": {...}},
     "num_partitions": 3, "written": 1767312000.0,
     "files": [{"path": "/in/a.jsonl", "size": 912, "format": "jsonl", "rows": 30,
                "compressed": false, "analysis": {...}}, ...],
     "partitions": [{"id": "2318ff57c281", "rows": 10, "sha256": "...",
                     "hash_algorithm": "sha256:bytes",
                     "pieces": [{"path": "/in/a.jsonl", "start_row": 0, "end_row": 10,
                                 "start_byte": 0, "end_byte": 304}]}, ...]}

  ``start_row`` is included and ``end_row`` excluded; a compressed file's one piece is
  ``{"path": ..., "whole_file": true}`` with ``rows`` null. :func:`plan_of` reads a record
  back into a :class:`~curator_dask.partitions.plan.PartitionPlan`, refusing one whose
  boundaries are illegal (negative, empty, overlapping, with gaps, past the end of a file, not
  the ids they name) with a ``PartitionRecordError``. See docs/partitions-inside-files.md.

Records written before records named their kind (no ``kind``) are read as this kind; the
version each always held. A record of a newer version is refused (``PartitionRecordError``).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any, ClassVar, TypeGuard

from curator_dask.errors import PartitionRecordError
from curator_dask.partitions.plan import InputFile, Partition, PartitionPlan, Piece
from curator_dask.resumability.layout import PARTITION_INFO_PATH, PARTITIONING_RECORD_PATH
from curator_dask.utils.records import CommittedRecord, Policy

# the source stage's options either record keeps (each compares the ones it depends on)
OPTIONS = ("files_per_partition", "blocksize", "file_paths", "file_extensions", "partition")


class _PartitionRecord(CommittedRecord):
    """A partition record under ``checkpoint_url``."""

    relative: ClassVar[str] = ""
    error = PartitionRecordError
    fix = "use a new checkpoint path and a new output folder (or move the checkpoint aside)"

    def __init__(self, checkpoint_url: str, storage_options: dict | None = None) -> None:
        super().__init__(f"{checkpoint_url.rstrip('/')}/{self.relative}", storage_options)


class GroupsRecord(_PartitionRecord):
    """``<checkpoint>/.curator_dask/partitioning.json``: the whole-file groups.

    Example:
        >>> record = GroupsRecord("memory://doc-ckpt")
        >>> record.read() is None
        True
        >>> record.write({"groups": {"A": ["a"]}})
        >>> record.read()["groups"], record.read()["version"]
        ({'A': ['a']}, 2)
    """

    kind = "partitioning"
    version = 2  # 1: every group listed; 2: single-file groups named by their file's hash left out
    on_unreadable: ClassVar[Policy] = "redo"
    what = "partitioning record"
    relative = PARTITIONING_RECORD_PATH

    def problem(self, data: dict[str, Any]) -> str | None:
        return None if isinstance(data.get("groups"), dict) else "it has no groups"


class RangesRecord(_PartitionRecord):
    """``<checkpoint>/.curator_dask/partitioning_info.json``: the row-range partitions.

    Example:
        >>> record = RangesRecord("memory://doc-partition-info")
        >>> record.read() is None
        True
        >>> record.write({"partitions": []}); record.read()["version"]
        1
    """

    kind = "partitioning_info"
    version = 1
    on_unreadable: ClassVar[Policy] = "refuse"
    what = "partition record"
    relative = PARTITION_INFO_PATH


def source_parameters(stage: Any) -> dict[str, Any]:
    """The source stage's name, class and partitioning options, as JSON reads them back (what
    both records keep of it).

    Example:
        >>> from curator_dask.stages.file_partitioning import FilePartitioningStage
        >>> p = source_parameters(FilePartitioningStage("in/", files_per_partition=2))
        >>> p["stage"], p["type"], p["files_per_partition"], p["blocksize"], p["partition"]
        ('file_partitioning', 'FilePartitioningStage', 2, None, None)
    """
    params = {"stage": getattr(stage, "name", None), "type": type(stage).__name__}
    params.update({name: getattr(stage, name, None) for name in OPTIONS})
    return json.loads(json.dumps(params, default=str))


def _piece_dict(piece: Piece, whole: bool) -> dict[str, Any]:
    return {"path": piece.path, "whole_file": True} if whole else piece.to_dict()


def ranges_payload(plan: PartitionPlan, parameters: dict[str, Any]) -> dict[str, Any]:
    """What :class:`RangesRecord` holds of ``plan`` (its partitions hashed) made with
    ``parameters``."""
    return {
        "parameters": parameters, "written": time.time(),
        "num_partitions": len(plan.partitions),
        "files": [{"path": f.path, "size": f.size, "format": f.format, "rows": f.rows,
                   "compressed": f.compressed, "analysis": f.analysis} for f in plan.files],
        "partitions": [{"id": p.id, "rows": p.rows, "sha256": p.sha256,
                        "hash_algorithm": p.algorithm,
                        "pieces": [_piece_dict(x, p.whole_file) for x in p.pieces]}
                       for p in plan.partitions],
    }


def _illegal(url: str, what: str) -> PartitionRecordError:
    return PartitionRecordError(
        f"the partition record {url} has illegal boundaries: {what}. It is kept, and nothing "
        "was processed; restore the record the checkpoint was made with, or use a new "
        "checkpoint path and a new output folder")


def _int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _piece(raw: Any, url: str, index: int) -> tuple[Piece, bool]:
    if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
        raise _illegal(url, f"partition {index} has a piece without a path: {raw!r}")
    if raw.get("whole_file") is True:
        return Piece(raw["path"], 0, 0), True
    start, end = raw.get("start_row"), raw.get("end_row")
    if not (_int(start) and _int(end)) or start < 0 or end <= start:
        raise _illegal(url, f"partition {index}: rows {start}-{end} of {raw['path']} are not "
                       "a range of rows (start_row >= 0, end_row > start_row)")
    sb, eb = raw.get("start_byte"), raw.get("end_byte")
    if (sb is None) != (eb is None) or (sb is not None and not (
            _int(sb) and _int(eb) and 0 <= sb < eb)):
        raise _illegal(url, f"partition {index}: bytes {sb}-{eb} of {raw['path']} are not a "
                       "range of bytes")
    return Piece(raw["path"], start, end, sb, eb), False


def check_version(record: dict[str, Any], url: str) -> None:
    """Refuse a record this version cannot rebuild partitions from (an older one holds no row
    boundaries)."""
    if record.get("version") != RangesRecord.version or not isinstance(
            record.get("partitions"), list) or (
            not all(isinstance(p, dict) and p.get("pieces") for p in record["partitions"])):
        msg = (f"the partition record {url} is of version {record.get('version')!r} and holds no "
               f"row boundaries that this version ({RangesRecord.version}) can rebuild the "
               "partitions from. "
               "It is kept, and nothing was processed; use a new checkpoint path and a new "
               "output folder (or move the checkpoint aside) to start again")
        raise PartitionRecordError(msg)


def plan_of(record: dict[str, Any], url: str) -> PartitionPlan:
    """The plan a record holds, its boundaries checked (see the module docstring)."""
    check_version(record, url)
    files = []
    for raw in record.get("files") or []:
        if not isinstance(raw, dict) or not _int(raw.get("size")):
            raise _illegal(url, f"a file entry without its size: {raw!r}")
        files.append(InputFile(raw["path"], raw["size"], raw.get("format", "jsonl"),
                               raw.get("rows"), bool(raw.get("compressed")),
                               dict(raw.get("analysis") or {})))
    known = {f.path: f for f in files}
    parts = []
    for i, raw in enumerate(record["partitions"]):
        read = [_piece(x, url, i) for x in raw["pieces"]]
        whole = any(w for _, w in read)
        if whole and len(read) > 1:
            raise _illegal(url, f"partition {i} mixes a whole file with other pieces")
        part = Partition(tuple(p for p, _ in read), raw.get("rows"), whole,
                         raw.get("sha256"), raw.get("hash_algorithm"))
        if part.id != raw.get("id"):
            raise _illegal(url, f"partition {i} is named {raw.get('id')!r}, but its pieces "
                           f"({part.shown()}) make the id {part.id}")
        unknown = [p for p in part.paths if p not in known]
        if unknown:
            raise _illegal(url, f"{part.shown()} reads {unknown[0]}, which the record's files "
                           "do not list")
        parts.append(part)
    _check_tiling(parts, known, url)
    return PartitionPlan(files, parts)


def _check_tiling(parts: list[Partition], files: dict[str, InputFile], url: str) -> None:
    """Each file's pieces, over all partitions, cover its rows (and bytes) once, in order."""
    by_file: dict[str, list[tuple[Piece, Partition]]] = defaultdict(list)
    for part in parts:
        if not part.whole_file:
            for piece in part.pieces:
                by_file[piece.path].append((piece, part))
    for path, pieces in by_file.items():
        file = files[path]
        pieces.sort(key=lambda x: (x[0].start_row, x[0].end_row))
        row = 0
        byte: int | None = 0
        for piece, part in pieces:
            if file.format == "jsonl" and piece.start_byte is None:
                raise _illegal(url, f"{part.shown()} has no byte range, which a JSONL piece needs")
            if piece.start_row != row:
                how = "overlaps the piece before it" if piece.start_row < row else (
                    f"leaves rows {row}-{piece.start_row} in no partition")
                raise _illegal(url, f"{part.shown()} {how}")
            if piece.start_byte is not None and piece.start_byte != byte:
                raise _illegal(url, f"{part.shown()} does not start where the piece before it "
                               f"ends (byte {byte})")
            row, byte = piece.end_row, piece.end_byte
        if file.rows is not None and row != file.rows:
            raise _illegal(url, f"the pieces of {path} end at row {row}, but the file has "
                           f"{file.rows} rows")
        if byte is not None and file.format == "jsonl" and byte != file.size:
            raise _illegal(url, f"the pieces of {path} end at byte {byte}, past or short of "
                           f"the end of the file ({file.size} bytes)")
