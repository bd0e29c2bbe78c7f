"""Data-Juicer's partition record: the content hashes of a partition's rows
(``sha256-sequence-v1``, first and last row hashes) and ``checkpoints/partitioning_info.json``
in Data-Juicer's schema (its loader builds ``PartitionMetadata(**p)``), read back and checked
as a strict resume needs it. Data-Juicer is not imported: the tests compare these with its own
functions. The job folder that holds the record is ``job_folder.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from curator_dask.errors import PartitionRecordError

if TYPE_CHECKING:
    import pyarrow as pa

HASH_ALGORITHM = "sha256-sequence-v1"
_MODULUS = 1 << 256
# Data-Juicer's base of the rolling hash: odd, so multiplying by it is invertible mod 2**256.
_BASE = int.from_bytes(hashlib.sha256(b"data-juicer-partition-sequence-v1").digest(), "big") | 1
_HASH_BATCH_ROWS = 1024

# Data-Juicer's PartitionMetadata fields, in its order (its loader calls PartitionMetadata(**p)).
PARTITION_FIELDS = (
    "partition_id", "row_count", "first_row_hash", "last_row_hash", "content_hash",
    "start_row", "end_row",
)


# ----------------------------------------------------------------------------------- hashes


def _sequence_bytes(row: dict[str, Any]) -> bytes:
    try:
        text = json.dumps(row, sort_keys=True, default=str, separators=(",", ":"),
                          ensure_ascii=False)
    except Exception:  # Data-Juicer falls back to str(row) for rows json cannot sort or encode
        text = str(row)
    return text.encode("utf-8")


def row_hash(row: dict[str, Any]) -> str:
    """Data-Juicer's ``first_row_hash``/``last_row_hash`` of one row (16 hex digits of an MD5
    of its sorted JSON; ``str(row)`` where JSON fails), as its ``_compute_row_hash``."""
    try:
        text = json.dumps(row, sort_keys=True, default=str)
    except Exception:
        text = str(row)
    return hashlib.md5(text.encode()).hexdigest()[:16]  # Data-Juicer's format, not a security use


def _fold(sequence: int, row: dict[str, Any]) -> int:
    digest = int.from_bytes(hashlib.sha256(_sequence_bytes(row)).digest(), "big")
    return (sequence * _BASE + digest) % _MODULUS


def _finish(sequence: int, count: int) -> str:
    payload = f"{HASH_ALGORITHM}:{count}:{sequence:064x}"
    return hashlib.sha256(payload.encode("ascii")).hexdigest()


def content_hash(rows: Iterable[dict[str, Any]]) -> str:
    """Data-Juicer's ``sha256-sequence-v1`` content hash of rows in order (python dicts, as
    ``pyarrow.Table.to_pylist()`` gives them): independent of batch boundaries, sensitive to
    order, equal to what its ``ray_partitioned`` executor records for the same rows."""
    sequence = count = 0
    for row in rows:
        sequence = _fold(sequence, row)
        count += 1
    return _finish(sequence, count)


def batches_hashes(batches: Iterable[pa.RecordBatch | pa.Table]) -> dict[str, Any]:
    """``content_hash``, ``first_row_hash``, ``last_row_hash`` and ``num_rows`` of the rows of
    ``batches`` in order, one batch in memory at a time (hashes are ``""`` when empty)."""
    sequence = count = 0
    first: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    for batch in batches:
        rows = batch.to_pylist()
        if not rows:
            continue
        if first is None:
            first = rows[0]
        for row in rows:
            sequence = _fold(sequence, row)
        count += len(rows)
        last = rows[-1]
    return {
        "content_hash": _finish(sequence, count),
        "first_row_hash": row_hash(first) if first is not None else "",
        "last_row_hash": row_hash(last) if last is not None else "",
        "num_rows": count,
    }


def table_hashes(table: pa.Table) -> dict[str, Any]:
    """:func:`batches_hashes` of a table, streamed over batches of at most 1,024 rows."""
    return batches_hashes(table.to_batches(max_chunksize=_HASH_BATCH_ROWS))


# --------------------------------------------------------------------- partitioning_info.json


def partition_metadata(index: int, start_row: int, end_row: int, hashes: dict[str, Any],
                       ) -> dict[str, Any]:
    """One partition as Data-Juicer's ``PartitionMetadata`` (its fields, its order, no other).

    ``hashes`` is what :func:`table_hashes` returns for the rows ``[start_row, end_row)``.
    """
    rows = end_row - start_row
    if index < 0 or start_row < 0 or rows < 0:
        msg = (f"partition {index}: rows [{start_row}, {end_row}) are not a range of the "
               f"input; give 0 <= start_row <= end_row and an index >= 0")
        raise ValueError(msg)
    if hashes.get("num_rows", rows) != rows:
        msg = (f"partition {index}: its hashes cover {hashes['num_rows']} rows but its "
               f"boundaries [{start_row}, {end_row}) hold {rows}; hash exactly those rows")
        raise ValueError(msg)
    return {
        "partition_id": index,
        "row_count": rows,
        "first_row_hash": hashes.get("first_row_hash", ""),
        "last_row_hash": hashes.get("last_row_hash", ""),
        "content_hash": hashes["content_hash"],
        "start_row": start_row,
        "end_row": end_row,
    }


def _check_partitions(partitions: list[dict[str, Any]], total_rows: int, where: str) -> None:
    expected = 0
    for index, part in enumerate(partitions):
        if not isinstance(part, dict) or set(part) != set(PARTITION_FIELDS):
            keys = sorted(part) if isinstance(part, dict) else type(part).__name__
            msg = (f"{where}: partition {index} has the fields {keys}, Data-Juicer's "
                   f"PartitionMetadata has {list(PARTITION_FIELDS)}; build it with "
                   f"partition_metadata()")
            raise PartitionRecordError(msg)
        start, end, rows = part["start_row"], part["end_row"], part["row_count"]
        if part["partition_id"] != index or start != expected or end - start != rows:
            msg = (f"{where}: partition {index} (id {part['partition_id']}) has rows "
                   f"[{start}, {end}) with row_count {rows}, expected to start at row "
                   f"{expected}; partitions must tile the input in order")
            raise PartitionRecordError(msg)
        expected = end
    if expected != total_rows:
        msg = (f"{where}: the partitions cover {expected} rows but total_rows is {total_rows}; "
               f"give the input's row count")
        raise PartitionRecordError(msg)


def write_json_atomic(path: str, data: Any, indent: int = 2) -> None:
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=indent, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_partitioning_info(path: str, partitions: list[dict[str, Any]], total_rows: int,
                            ) -> None:
    """Write Data-Juicer's ``partitioning_info.json`` at ``path`` (atomically: a temporary file,
    then ``os.replace``); ``partitions`` from :func:`partition_metadata`, tiling the input."""
    _check_partitions(partitions, total_rows, path)
    write_json_atomic(path, {
        "num_partitions": len(partitions),
        "total_rows": total_rows,
        "deterministic": True,
        "hash_algorithm": HASH_ALGORITHM,
        "partitions": [{k: p[k] for k in PARTITION_FIELDS} for p in partitions],
    })


def read_partitioning_info(path: str) -> dict[str, Any]:
    """The ``partitioning_info.json`` at ``path`` as a dict, checked as a strict resume needs it.

    Raises:
        PartitionRecordError: missing, unreadable, another hash algorithm, partitions without
            content hashes or boundaries, or boundaries that do not tile ``total_rows``.
    """
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        msg = (f"{path} is missing: a resume needs the partition record of the first run; "
               f"run the recipe without --resume to start over")
        raise PartitionRecordError(msg) from None
    except (OSError, ValueError) as error:
        msg = f"{path} cannot be read ({error}); run without --resume to start over"
        raise PartitionRecordError(msg) from None
    if not isinstance(data, dict) or not {"num_partitions", "total_rows", "partitions"} <= set(
            data):
        msg = (f"{path} is not Data-Juicer's partitioning_info.json (it needs num_partitions, "
               f"total_rows and partitions); run without --resume to start over")
        raise PartitionRecordError(msg)
    algorithm = data.get("hash_algorithm", HASH_ALGORITHM)
    if algorithm != HASH_ALGORITHM:
        msg = (f"{path} hashes partitions with {algorithm!r}, this version checks only "
               f"{HASH_ALGORITHM!r}; run without --resume to start over")
        raise PartitionRecordError(msg)
    partitions = data["partitions"]
    if not isinstance(partitions, list) or len(partitions) != data["num_partitions"]:
        msg = (f"{path} lists {len(partitions) if isinstance(partitions, list) else 0} "
               f"partitions but num_partitions is {data['num_partitions']}; run without "
               f"--resume to start over")
        raise PartitionRecordError(msg)
    _check_partitions(partitions, data["total_rows"], path)
    for part in partitions:
        if not part["content_hash"]:
            msg = (f"{path}: partition {part['partition_id']} has no content hash (an older "
                   f"Data-Juicer wrote it); run without --resume to start over")
            raise PartitionRecordError(msg)
    return dict(data)


def partition_mismatch(saved: dict[str, Any], hashes: dict[str, Any]) -> str | None:
    """Why a partition's current rows differ from its ``saved`` metadata, or ``None``: the row
    count, then the content hash, as Data-Juicer's strict resume compares them."""
    where = (f"partition {saved['partition_id']} (rows {saved['start_row']} to "
             f"{saved['end_row']})")
    if hashes["num_rows"] != saved["row_count"]:
        return f"{where} now holds {hashes['num_rows']} rows, {saved['row_count']} recorded"
    if hashes["content_hash"] != saved["content_hash"]:
        return (f"{where}: content hash {hashes['content_hash'][:16]}..., recorded "
                f"{saved['content_hash'][:16]}...: the input changed")
    return None
