"""``export_shard_size``: the result cut into shards as Data-Juicer's exporter cuts it.

``int(nbytes / export_shard_size) + 1`` shards (at most one a row), contiguous row ranges as
``datasets.Dataset.shard(contiguous=True)`` draws them, named
``{stem}-{i:0Nd}-of-{n:0Nd}.{suffix}`` beside the export path with ``N = len(str(n)) + 1``.
``nbytes`` is the Arrow size of the exported columns, summed over the partitions. Each shard is
written under a temporary name and renamed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence


def shard_bounds(rows: int, shards: int) -> list[tuple[int, int]]:
    """``Dataset.shard(num_shards, index, contiguous=True)``'s row ranges.

    Example:
        >>> shard_bounds(10, 3)
        [(0, 4), (4, 7), (7, 10)]
    """
    div, mod = divmod(rows, shards)
    out = []
    for i in range(shards):
        start = div * i + min(i, mod)
        out.append((start, start + div + (1 if i < mod else 0)))
    return out


def shard_paths(export_path: str, suffix: str, shards: int) -> list[str]:
    dirname = os.path.dirname(os.path.abspath(export_path))
    stem = os.path.basename(export_path).split(".")[0]
    fmt = f"%0{len(str(shards)) + 1}d"
    return [os.path.join(dirname, f"{stem}-{fmt % i}-of-{fmt % shards}.{suffix}")
            for i in range(shards)]


def _jsonl_rows(parts: Sequence[str]) -> Iterator[bytes]:
    for part in parts:
        with open(part, "rb") as f:
            yield from f


def export_shards(parts: Sequence[str], rows: Sequence[int], export_path: str, suffix: str,
                  shard_size: int, nbytes: int) -> list[str]:
    """Write the shards from the partitions' part files (in order); returns their paths."""
    total = sum(rows)
    count = max(1, min(int(nbytes / shard_size) + 1, total))
    bounds = shard_bounds(total, count)
    paths = shard_paths(export_path, suffix, count)
    os.makedirs(os.path.dirname(os.path.abspath(export_path)), exist_ok=True)
    if suffix == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.concat_tables([pq.read_table(p) for p in parts], promote_options="default")
        for (start, end), path in zip(bounds, paths, strict=True):
            pq.write_table(table.slice(start, end - start), f"{path}.tmp")
            os.replace(f"{path}.tmp", path)
        return paths
    lines = _jsonl_rows(parts)
    for (start, end), path in zip(bounds, paths, strict=True):
        with open(f"{path}.tmp", "wb") as out:
            for _ in range(end - start):
                out.write(next(lines))
        os.replace(f"{path}.tmp", path)
    return paths
