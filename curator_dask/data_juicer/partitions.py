"""Row boundaries of a recipe's partitions, drawn over the whole dataset as Data-Juicer's
partitioned executor draws them.

``manual``: ``num_of_partitions`` (default 4) partitions of nearly equal row counts, the first
``total % n`` one row longer (``_balanced_split_indices``), or ``size`` rows each, the count
rounded as ``_partition_count_from_size`` rounds it; more partitions than rows is refused as
Data-Juicer refuses it. ``auto``: ``size`` when given, else the rows of ``target_size_mb``
of in-memory data at the dataset's mean row size (Data-Juicer's optimizer samples the data for
the same figure), at most ``max(32, 2 x np)`` partitions.
"""

from __future__ import annotations

from typing import Any

from curator_dask.data_juicer.recipe import RecipeError


def balanced_bounds(total_rows: int, num_partitions: int) -> list[tuple[int, int]]:
    """``[(start, end), ...]``: ``total_rows`` over ``num_partitions``, the first
    ``total_rows % num_partitions`` one row longer.

    Example:
        >>> balanced_bounds(10, 4)
        [(0, 3), (3, 6), (6, 8), (8, 10)]
    """
    base, remainder = divmod(total_rows, num_partitions)
    bounds = []
    start = 0
    for i in range(num_partitions):
        end = start + base + (1 if i < remainder else 0)
        bounds.append((start, end))
        start = end
    return bounds


def count_from_size(total_rows: int, size: int) -> int:
    """The partition count nearest to ``size`` rows each.

    Example:
        >>> count_from_size(10, 4), count_from_size(10, 3)
        (3, 3)
    """
    quotient, remainder = divmod(total_rows, size)
    return max(1, quotient + int(2 * remainder >= size))


def partition_count(partition: Any, total_rows: int, total_bytes: int, np_: int) -> int:
    """How many partitions the recipe's ``partition:`` section asks for."""
    get = (lambda k, d=None: getattr(partition, k, d)) if partition is not None else (
        lambda k, d=None: d)
    mode = get("mode", "manual") or "manual"
    size = get("size")
    if mode == "manual":
        count = get("num_of_partitions")
        if size is not None and count is None:
            count = count_from_size(total_rows, int(size))
        count = int(count or 4)
    elif mode == "auto":
        if size is None:
            target = int(get("target_size_mb", 256) or 256) << 20
            mean = max(1, total_bytes // max(1, total_rows))
            size = max(1, target // mean)
        count = min(count_from_size(total_rows, int(size)), max(32, 2 * np_))
    else:
        msg = f"partition.mode {mode!r} is not manual or auto"
        raise RecipeError(msg)
    if total_rows == 0:
        return 1
    if count > total_rows:
        msg = (f"partition.num_of_partitions={count} exceeds the {total_rows} row(s) of the "
               f"dataset: set it to at most {total_rows}, or use partition.mode: auto")
        raise RecipeError(msg)
    return max(1, count)
