"""``partitioning_info.json``: the row-range partitions a checkpoint was made with.

Written atomically on the first checkpointed run, before any source is processed, under
``<checkpoint>/.curator_dask/partitioning_info.json``::

    {"version": 1, "parameters": {"stage": ..., "type": ..., "file_paths": ...,
                                  "file_extensions": [...], "partition": {...}},
     "num_partitions": 3, "written": 1767312000.0,
     "files": [{"path": "/in/a.jsonl", "size": 912, "format": "jsonl", "rows": 30,
                "compressed": false, "analysis": {...}}, ...],
     "partitions": [{"id": "2318ff57c281", "rows": 10, "sha256": "...",
                     "hash_algorithm": "sha256:bytes",
                     "pieces": [{"path": "/in/a.jsonl", "start_row": 0, "end_row": 10,
                                 "start_byte": 0, "end_byte": 304}]}, ...]}

``start_row`` is included and ``end_row`` excluded; a compressed file's one piece is
``{"path": ..., "whole_file": true}`` with ``rows`` null. :func:`plan_of` reads a record back
into a :class:`~curator_dask.partitions.plan.PartitionPlan`, refusing one whose boundaries are
illegal (negative, empty, overlapping, with gaps, past the end of a file, not the ids they
name) with a ``PartitionRecordError``. See docs/partitions-inside-files.md.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from curator_dask.errors import PartitionRecordError
from curator_dask.partitions.plan import InputFile, Partition, PartitionPlan, Piece
from curator_dask.resumability.json_record import CheckpointJsonRecord
from curator_dask.resumability.layout import PARTITION_INFO_PATH

VERSION = 1


class PartitionInfoFile(CheckpointJsonRecord):
    """The record of one checkpoint, read and written through fsspec.

    Example:
        >>> record = PartitionInfoFile("memory://doc-partition-info")
        >>> record.load() is None
        True
        >>> record.save({"version": VERSION, "partitions": []})
        >>> record.load()["version"]
        1
    """

    def __init__(self, checkpoint_url: str, storage_options: dict | None = None) -> None:
        super().__init__(checkpoint_url, PARTITION_INFO_PATH, storage_options)

    def load(self) -> dict[str, Any] | None:
        """The record, or ``None`` when there is none; an unreadable one is refused."""
        try:
            data = self.read()
        except (OSError, ValueError) as exc:
            msg = (f"the partition record {self.url} cannot be read ({exc}); it is kept. Restore "
                   "it, or use a new checkpoint path and a new output folder")
            raise PartitionRecordError(msg) from exc
        if data is not None and not isinstance(data, dict):
            msg = f"the partition record {self.url} is not a JSON object; it is kept"
            raise PartitionRecordError(msg)
        return data

    save = CheckpointJsonRecord.write


def _piece_dict(piece: Piece, whole: bool) -> dict[str, Any]:
    return {"path": piece.path, "whole_file": True} if whole else piece.to_dict()


def to_record(plan: PartitionPlan, parameters: dict[str, Any]) -> dict[str, Any]:
    """The JSON form of ``plan`` (its partitions hashed) made with ``parameters``."""
    return {
        "version": VERSION, "parameters": parameters, "written": time.time(),
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


def _int(value: Any) -> bool:
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
    if record.get("version") != VERSION or not isinstance(record.get("partitions"), list) or (
            not all(isinstance(p, dict) and p.get("pieces") for p in record["partitions"])):
        msg = (f"the partition record {url} is of version {record.get('version')!r} and holds no "
               f"row boundaries that this version ({VERSION}) can rebuild the partitions from. "
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
        row = byte = 0
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
