"""JSONL files as lines: newline scans over fixed-size chunks (numpy), byte ranges, digests.

Nothing here parses JSON except :func:`sample`. A *row* of a JSONL file is a line: the bytes up
to and including a ``\\n`` (``\\r\\n`` ends a line too: the ``\\r`` stays in it), or the last
bytes of a file without a final newline. Blank lines are lines (the reader reads no document
from them, as from a whole file), so the union of the ranges is the file, byte for byte.
Chunks are read with ``fs.cat_file(path, start, end)`` (a range request on an object store),
the next one while the current one is scanned: hashlib and numpy release the GIL.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CHUNK = 8 << 20  # bytes per read
SAMPLE = 4 << 20  # bytes read from the start of a file to measure its rows (auto mode)
MAX_SAMPLE = 64 << 20  # the most read to find the end of a file's first line
NEWLINE = 10


def newlines_in(data: bytes) -> int:
    """The newline bytes of ``data``: numpy compares and counts without the GIL, at about 2.5 x
    the speed of ``bytes.count`` (which holds it), so scans in threads overlap.

    Example:
        >>> newlines_in(b"a\\nb\\r\\n\\n")
        3
    """
    return int(np.count_nonzero(np.frombuffer(data, np.uint8) == NEWLINE))


def read_chunks(fs: Any, path: str, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, bytes)`` of ``[start, end)`` of ``path``, in chunks of :data:`CHUNK` bytes;
    the next chunk is read while the caller works on the current one. A file shorter than
    ``end`` raises ``EOFError``."""
    chunk = CHUNK
    if start >= end:
        return
    if end - start <= chunk:
        data = fs.cat_file(path, start=start, end=end)
        if len(data) != end - start:
            raise EOFError(f"{path}: {len(data)} bytes at {start}, {end - start} expected")
        yield start, data
        return
    with ThreadPoolExecutor(1, thread_name_prefix="curator-dask-read") as pool:
        pos = start
        ahead: Future[bytes] | None = pool.submit(fs.cat_file, path, start=pos,
                                                  end=min(pos + chunk, end))
        while ahead is not None:
            data = ahead.result()
            if len(data) != min(chunk, end - pos):  # chunks stay aligned: line_offsets needs it
                raise EOFError(f"{path}: {len(data)} bytes at {pos}, "
                               f"{min(chunk, end - pos)} expected")
            following = pos + len(data)
            ahead = (pool.submit(fs.cat_file, path, start=following,
                                 end=min(following + chunk, end)) if following < end else None)
            yield pos, data
            pos = following


@dataclass
class LineCount:
    """A file's lines (rows) and its newlines per chunk of :data:`CHUNK` bytes."""

    rows: int
    per_chunk: list[int] = field(default_factory=list)


def count_lines(fs: Any, path: str, size: int) -> LineCount:
    """The rows of ``path`` (``size`` bytes) and its newlines per chunk, in one pass."""
    per_chunk, last = [], b"\n"
    for _, data in read_chunks(fs, path, 0, size):
        per_chunk.append(newlines_in(data))
        last = data[-1:]
    return LineCount(sum(per_chunk) + (1 if size and last != b"\n" else 0), per_chunk)


def line_offsets(fs: Any, path: str, count: LineCount, lines: Sequence[int]) -> list[int]:
    """The byte offset where each of ``lines`` (sorted, 0 < line < rows) starts, reading only
    the chunks that hold them (found from ``count.per_chunk``)."""
    ends = np.cumsum(count.per_chunk)  # newlines up to the end of each chunk
    offsets: list[int] = []
    cached: tuple[int, np.ndarray] | None = None
    for line in lines:
        # line L starts after the L-th newline, in the first chunk whose running count reaches L
        c = int(np.searchsorted(ends, line, side="left"))
        if cached is None or cached[0] != c:
            start = c * CHUNK
            data = fs.cat_file(path, start=start, end=start + CHUNK)
            cached = (c, np.flatnonzero(np.frombuffer(data, np.uint8) == NEWLINE))
        before = int(ends[c - 1]) if c else 0
        offsets.append(c * CHUNK + int(cached[1][line - before - 1]) + 1)
    return offsets


@dataclass(frozen=True)
class Segment:
    """Rows ``[start_row, end_row)`` at bytes ``[start_byte, end_byte)``; ``sha256`` of them."""

    start_row: int
    end_row: int
    start_byte: int
    end_byte: int
    sha256: str | None = None


class _SegmentDigests:
    """The sha256 of consecutive segments of a stream of chunks, computed in a thread of its
    own so that the hash of one chunk overlaps the scan of the next (both release the GIL)."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="curator-dask-hash")
        self.digest = hashlib.sha256()
        self.digests: list[str] = []
        self.queued: list[Any] = []

    def feed(self, data: bytes, cuts: list[int]) -> None:
        """Hash ``data``, closing a segment at each offset of ``cuts`` (sorted, in ``data``)."""
        self.queued.append(self.pool.submit(self._feed, data, cuts))
        while len(self.queued) > 2:  # at most two chunks wait: memory stays bounded
            self.queued.pop(0).result()

    def _feed(self, data: bytes, cuts: list[int]) -> None:
        view, done = memoryview(data), 0
        for cut in cuts:
            self.digest.update(view[done:cut])
            self.digests.append(self.digest.hexdigest())
            self.digest, done = hashlib.sha256(), cut
        self.digest.update(view[done:])

    def close(self, *, open_segment: bool) -> list[str]:
        """The digests; with ``open_segment``, the last segment's too (it ends the file)."""
        for future in self.queued:
            future.result()
        self.pool.shutdown()
        return self.digests + ([self.digest.hexdigest()] if open_segment else [])


def split_every(fs: Any, path: str, size: int, rows: int, *, hashing: bool) -> list[Segment]:
    """``path`` cut every ``rows`` lines, in one pass that finds the cuts and, with
    ``hashing``, the sha256 of each segment (in a second thread, chunk by chunk)."""
    cuts = [0]
    digests = _SegmentDigests() if hashing else None
    lines, wanted, last = 0, rows, NEWLINE
    try:
        for pos, data in read_chunks(fs, path, 0, size):
            n, here = newlines_in(data), []
            if wanted <= lines + n:  # positions only where a cut falls
                newlines = np.flatnonzero(np.frombuffer(data, np.uint8) == NEWLINE)
                while wanted <= lines + n:
                    here.append(int(newlines[wanted - lines - 1]) + 1)
                    wanted += rows
            cuts.extend(pos + cut for cut in here)
            if digests is not None:
                digests.feed(data, here)
            lines += n
            last = data[-1]
    finally:
        found = digests.close(open_segment=cuts[-1] != size) if digests is not None else None
    total = lines + (1 if size and last != NEWLINE else 0)
    if cuts[-1] != size:
        cuts.append(size)
    starts = [min(i * rows, total) for i in range(len(cuts))]
    starts[-1] = total
    return [Segment(starts[i], starts[i + 1], cuts[i], cuts[i + 1],
                    found[i] if found is not None else None) for i in range(len(cuts) - 1)]


@dataclass(frozen=True)
class RangeDigest:
    """What one pass over byte ranges found: their sha256 (of all, in order), and per range
    its newlines and whether it ends with one."""

    sha256: str
    newlines: tuple[int, ...]
    ends_with_newline: tuple[bool, ...]


def digest_ranges(fs: Any, ranges: Sequence[tuple[str, int, int]]) -> RangeDigest:
    """sha256 of the bytes of ``(path, start, end)`` ranges, in order, counting newlines."""
    digest = hashlib.sha256()
    newlines, ends = [], []
    for path, start, end in ranges:
        n, last = 0, b""
        for _, data in read_chunks(fs, path, start, end):
            digest.update(data)
            n += newlines_in(data)
            last = data[-1:]
        newlines.append(n)
        ends.append(last == b"\n")
    return RangeDigest(digest.hexdigest(), tuple(newlines), tuple(ends))


@dataclass(frozen=True)
class Sample:
    """Bytes per row of a file's first lines, on disk and as an Arrow table (``None``: the
    sample could not be parsed; ``reason`` says why)."""

    disk_bytes_per_row: float | None
    memory_bytes_per_row: float | None
    reason: str | None = None


def head_lines(fs: Any, path: str, size: int, limit: int = SAMPLE,
               most: int = MAX_SAMPLE) -> bytes:
    """The first whole lines of ``path`` (``size`` bytes) in its first ``limit`` bytes; when
    no line ends there, the read grows (doubling, up to ``most`` bytes) until one does. ``b""``
    when no line ends in the first ``most`` bytes.

    Example:
        >>> import fsspec
        >>> fs = fsspec.filesystem("memory")
        >>> fs.pipe_file("/head.jsonl", b"1234\\n56\\n78")
        >>> head_lines(fs, "/head.jsonl", 10, limit=6), head_lines(fs, "/head.jsonl", 10, limit=2)
        (b'1234\\n', b'1234\\n56\\n')
    """
    data, end = b"", min(size, limit)
    while True:
        data += fs.cat_file(path, start=len(data), end=end)
        if len(data) >= size:
            return data
        cut = data.rfind(b"\n")
        if cut >= 0:
            return data[:cut + 1]
        if end >= min(size, most):
            return b""
        end = min(size, most, 2 * end)


def sample(fs: Any, path: str, size: int, limit: int = SAMPLE) -> Sample:
    """Measure the first whole lines of ``path`` (up to ``limit`` bytes, or its first line
    when that is longer). A line longer than :data:`MAX_SAMPLE` is not measured: its length
    so far is the bytes per row on disk, a lower bound."""
    import pyarrow as pa
    import pyarrow.json as pj

    data = head_lines(fs, path, size, limit)
    if not data:
        read = min(size, MAX_SAMPLE)
        return Sample(float(read), None, f"no line ends in its first {read} bytes")
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    disk = len(data) / lines if lines else None
    try:
        # one block for the whole sample: a long line (a real 2 MB document) straddles none
        options = pj.ReadOptions(block_size=max(len(data) + 1, 1 << 20), use_threads=False)
        table = pj.read_json(io.BytesIO(data), read_options=options)
    except (pa.ArrowInvalid, ValueError) as exc:  # a sample that does not parse: the fallback
        return Sample(disk, None, f"its first lines are not valid JSON Lines ({exc})")
    if not table.num_rows:
        return Sample(disk, None, "its first lines hold no documents")
    return Sample(disk, table.nbytes / table.num_rows)
