"""Planning row-range partitions: which rows of which files each partition holds.

``manual``: the rows of all splittable files, in listing order, cut into ``N`` nearly equal
ranges (a range may span files). ``auto``: each file on its own, cut every ``rows`` rows, where
``rows`` comes from a sample of that file, so another file's arrival changes nothing here. JSONL
files are cut at line boundaries, found by a newline scan; Parquet files at row-group
boundaries (inside a row group only when it is larger than the target; ``manual`` cuts at exact
row counts). A compressed JSONL file cannot be split: it is one whole-file partition, with the
``FileGroupTask`` id NeMo Curator gives it. With ``hashing`` (a checkpointed run) each
partition also gets the digest of its content, in the same pass where possible.
See docs/partitions-inside-files.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import fsspec
from fsspec.utils import infer_compression

from curator_dask.lineage import get_deterministic_hash, row_range_id
from curator_dask.partitions import jsonl, parquet
from curator_dask.partitions.spec import PartitionSpec
from curator_dask.utils.files import file_extension

logger = logging.getLogger(__name__)

BYTES_ALGORITHM = "sha256:bytes"
T = TypeVar("T")
R = TypeVar("R")


def parallel(function: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``function`` over ``items`` in threads (reads, scans and hashes release the GIL)."""
    items = list(items)
    if len(items) < 2:
        return [function(item) for item in items]
    workers = min(len(items), max(4, min(16, os.cpu_count() or 1)))
    with ThreadPoolExecutor(workers, thread_name_prefix="curator-dask-partitions") as pool:
        return list(pool.map(function, items))


@dataclass(frozen=True)
class Piece:
    """Rows ``[start_row, end_row)`` of one file (JSONL: lines, at bytes
    ``[start_byte, end_byte)``)."""

    path: str
    start_row: int
    end_row: int
    start_byte: int | None = None
    end_byte: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"path": self.path, "start_row": self.start_row, "end_row": self.end_row}
        if self.start_byte is not None:
            d.update(start_byte=self.start_byte, end_byte=self.end_byte)
        return d

    def byte_range(self) -> tuple[int, int]:
        """``(start_byte, end_byte)``: every piece of a JSONL file that is split has them."""
        if self.start_byte is None or self.end_byte is None:
            msg = (f"{self.path} rows {self.start_row}-{self.end_row} has no byte range: only "
                   "the pieces of a JSONL file that is split have one")
            raise ValueError(msg)
        return self.start_byte, self.end_byte

    def shown(self) -> str:
        where = (f", bytes {self.start_byte}-{self.end_byte}" if self.start_byte is not None
                 else "")
        return f"{self.path} rows {self.start_row}-{self.end_row}{where}"


@dataclass(frozen=True)
class Partition:
    """One logical partition: its pieces in order, its rows, its content digest."""

    pieces: tuple[Piece, ...]
    rows: int | None
    whole_file: bool = False  # a compressed file: read whole, id = FileGroupTask's
    sha256: str | None = None
    algorithm: str | None = None

    @property
    def id(self) -> str:
        if self.whole_file:
            return get_deterministic_hash([self.pieces[0].path])
        return row_range_id((p.path, p.start_row, p.end_row) for p in self.pieces)

    @property
    def paths(self) -> list[str]:
        return [p.path for p in self.pieces]

    def shown(self) -> str:
        if self.whole_file:
            return f"partition {self.id} ({self.pieces[0].path}, the whole file)"
        return f"partition {self.id} ({'; '.join(p.shown() for p in self.pieces)})"


@dataclass
class InputFile:
    """One input file as planned: its size, format, rows (``None``: compressed) and, in auto
    mode, what its sample measured."""

    path: str
    size: int
    format: str
    rows: int | None = None
    compressed: bool = False
    analysis: dict[str, Any] = field(default_factory=dict)

    def counted_rows(self) -> int:
        """``rows``, once planning has counted them (a compressed file's never are)."""
        if self.rows is None:
            msg = f"{self.path}: its rows are not counted (a compressed file cannot be split)"
            raise ValueError(msg)
        return self.rows


@dataclass
class PartitionPlan:
    """The files and the partitions of one source stage's input, in order."""

    files: list[InputFile]
    partitions: list[Partition]


def file_format(path: str) -> str:
    """``"parquet"`` for a ``.parquet`` file, else ``"jsonl"`` (lines)."""
    return "parquet" if file_extension(path) == "parquet" else "jsonl"


def filesystem(path: str, storage_options: dict | None) -> tuple[Any, str]:
    return fsspec.core.url_to_fs(path, **(storage_options or {}))


def input_files(records: Sequence[tuple[str, int]], storage_options: dict | None,
                ) -> list[InputFile]:
    """The listing as :class:`InputFile`\\ s (unknown sizes asked for); one format only."""
    formats = sorted({file_format(p) for p, _ in records})
    if len(formats) > 1:
        msg = (f"partition= needs files of one format, but the input holds {' and '.join(formats)}"
               " files: set file_extensions (or use one reader per format)")
        raise ValueError(msg)
    files = []
    for path, size in records:
        if size < 0:
            fs, fs_path = filesystem(path, storage_options)
            size = int(fs.size(fs_path))
        fmt = file_format(path)
        files.append(InputFile(path, size, fmt,
                               compressed=fmt == "jsonl" and infer_compression(path) is not None))
    return files


def digest(partition: Partition, storage_options: dict | None) -> tuple[str, str]:
    """``(sha256, algorithm)`` of a partition's content: the raw bytes of its JSONL pieces (of
    the whole file when compressed), or the IPC streams of its Parquet pieces."""
    first = partition.pieces[0]
    fs, _ = filesystem(first.path, storage_options)
    strip = fs._strip_protocol
    if partition.whole_file:
        size = int(fs.size(strip(first.path)))
        return jsonl.digest_ranges(fs, [(strip(first.path), 0, size)]).sha256, BYTES_ALGORITHM
    if file_format(first.path) == "parquet":
        ranges = [(strip(p.path), p.start_row, p.end_row) for p in partition.pieces]
        return parquet.digest_ranges(fs, ranges), parquet.ALGORITHM
    ranges = [(strip(p.path), *p.byte_range()) for p in partition.pieces]
    return jsonl.digest_ranges(fs, ranges).sha256, BYTES_ALGORITHM


def plan_partitions(records: Sequence[tuple[str, int]], spec: PartitionSpec,
                    storage_options: dict | None = None, *, hashing: bool = False,
                    ) -> PartitionPlan:
    """Partitions of the files of ``records`` (``(path, size)`` in listing order)."""
    files = input_files(records, storage_options)
    compressed = [f for f in files if f.compressed]
    if compressed:
        logger.warning("%d compressed JSONL file(s) cannot be split into row ranges (e.g. %s): "
                       "each is one whole-file partition", len(compressed), compressed[0].path)
    if spec.mode == "manual":
        if spec.num_of_partitions is None:  # PartitionSpec.coerce sets it for manual
            msg = (f"partition={spec.to_dict()}: mode 'manual' needs num_of_partitions (a "
                   "positive integer)")
            raise ValueError(msg)
        parts = _manual(files, spec.num_of_partitions, storage_options)
    else:
        parts = _auto(files, spec, storage_options, hashing)
    if hashing:
        todo = [i for i, p in enumerate(parts) if p.sha256 is None]
        for i, (sha, algorithm) in zip(todo, parallel(
                lambda i: digest(parts[i], storage_options), todo), strict=True):
            parts[i] = replace(parts[i], sha256=sha, algorithm=algorithm)
    return PartitionPlan(files, parts)


def _whole(file: InputFile) -> Partition:
    return Partition((Piece(file.path, 0, 0),), None, whole_file=True)


def _auto(files: list[InputFile], spec: PartitionSpec, storage_options: dict | None,
          hashing: bool) -> list[Partition]:
    def one(file: InputFile) -> list[Partition]:
        if file.compressed:
            return [_whole(file)]
        if not file.size:
            file.rows = 0
            return []
        fs, path = filesystem(file.path, storage_options)
        if file.format == "parquet":
            footer = parquet.read_footer(fs, path)
            measured = jsonl.Sample(footer.disk_bytes_per_row, footer.memory_bytes_per_row,
                                    None if footer.memory_bytes_per_row else "no sizes in footer")
        else:
            measured = jsonl.sample(fs, path, file.size)
        rows, fell_back = spec.rows_for(measured.memory_bytes_per_row, measured.disk_bytes_per_row)
        file.analysis = {"rows_per_partition": rows,
                         "disk_bytes_per_row": measured.disk_bytes_per_row,
                         "memory_bytes_per_row": measured.memory_bytes_per_row,
                         **({"fallback": measured.reason} if fell_back else {})}
        if file.format == "parquet":
            file.rows = footer.rows
            return [Partition((Piece(file.path, a, b),), b - a)
                    for a, b in parquet.split_row_groups(footer.row_groups, rows)]
        segments = jsonl.split_every(fs, path, file.size, rows, hashing=hashing)
        file.rows = segments[-1].end_row if segments else 0
        return [Partition((Piece(file.path, s.start_row, s.end_row, s.start_byte, s.end_byte),),
                          s.end_row - s.start_row, sha256=s.sha256,
                          algorithm=BYTES_ALGORITHM if hashing else None) for s in segments]

    parts = [p for found in parallel(one, files) for p in found]
    fallback = [f for f in files if "fallback" in f.analysis]
    if fallback:
        logger.warning("auto partitions: %d file(s) could not be measured (e.g. %s: %s); their "
                       "partitions have size=%d rows (at most max_size_mb=%d on disk)",
                       len(fallback), fallback[0].path, fallback[0].analysis["fallback"],
                       spec.size, spec.max_size_mb)
    return parts


def _manual(files: list[InputFile], n: int, storage_options: dict | None) -> list[Partition]:
    splittable = [f for f in files if not f.compressed]

    def count(file: InputFile) -> jsonl.LineCount | None:
        fs, path = filesystem(file.path, storage_options)
        if file.format == "parquet":
            file.rows = parquet.read_footer(fs, path).rows
            return None
        found = jsonl.count_lines(fs, path, file.size)
        file.rows = found.rows
        return found

    counts = parallel(count, splittable)
    total = sum(f.counted_rows() for f in splittable)
    if 0 < total < n:
        logger.warning("partition: num_of_partitions=%d but the input has %d rows: %d "
                       "partitions of one row", n, total, total)
    n = min(n, total)
    bounds = [(i * total) // n for i in range(n + 1)] if n else [0]
    # the cuts inside each file, as rows of that file
    starts, cuts = 0, []
    for file in splittable:
        rows = file.counted_rows()
        cuts.append(sorted({b - starts for b in bounds if starts < b < starts + rows}))
        starts += rows
    offsets = parallel(lambda i: _offsets(splittable[i], counts[i], cuts[i], storage_options),
                       range(len(splittable)))
    parts = _ranges_to_partitions(splittable, bounds, offsets)
    return parts + [_whole(f) for f in files if f.compressed]


def _offsets(file: InputFile, count: jsonl.LineCount | None, cuts: list[int],
             storage_options: dict | None) -> dict[int, int]:
    """``{row: byte offset}`` of a JSONL file's cuts, with its two ends; ``{}`` for Parquet."""
    if count is None:
        return {}
    fs, path = filesystem(file.path, storage_options)
    found = dict(zip(cuts, jsonl.line_offsets(fs, path, count, cuts), strict=True))
    return {0: 0, file.counted_rows(): file.size, **found}


def _ranges_to_partitions(files: list[InputFile], bounds: list[int],
                          offsets: list[dict[int, int]]) -> list[Partition]:
    firsts, at = [], 0
    for file in files:
        firsts.append(at)
        at += file.counted_rows()
    parts = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        pieces = []
        for file, first, where in zip(files, firsts, offsets, strict=True):
            lo, hi = max(a, first) - first, min(b, first + file.counted_rows()) - first
            if lo < hi:
                pieces.append(Piece(file.path, lo, hi, where.get(lo), where.get(hi)))
        parts.append(Partition(tuple(pieces), b - a))
    return parts
