"""``partition=``: what a reader's or ``FilePartitioningStage``'s row-range partitioning asks for.

Two modes, as Data-Juicer's partitioned executor names them (docs/partitions-inside-files.md):

- ``{"mode": "manual", "num_of_partitions": N}``: the input's rows, all files in listing order,
  in ``N`` contiguous ranges of nearly equal size;
- ``{"mode": "auto", "target_size_mb": 256, "size": 10000, "max_size_mb": 256,
  "max_rows": 50000}``: each file split on its own, into ranges of about ``target_size_mb`` in
  memory (measured on a sample), at most ``max_rows`` rows; ``size`` rows (at most
  ``max_size_mb`` on disk) when the sample cannot be analysed.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODES = ("manual", "auto")
TARGET_SIZES_MB = (128, 256, 512, 1024)
DEFAULT_ROWS = 10_000  # the seed's text default ("自动配置": 文本 10000)
MAX_ROWS = 50_000  # the seed's text maximum (文本 50000)
KEYS = {
    "manual": ("mode", "num_of_partitions"),
    "auto": ("mode", "target_size_mb", "size", "max_size_mb", "max_rows"),
}
MiB = 1 << 20


def _positive_int(name: str, value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"{where}: {name} must be a positive integer, got {value!r}"
        raise ValueError(msg)
    return value


@dataclass(frozen=True)
class PartitionSpec:
    """A validated ``partition=`` value.

    Example:
        >>> PartitionSpec.coerce({"mode": "auto", "size": 500}).to_dict()
        {'mode': 'auto', 'target_size_mb': 256, 'size': 500, 'max_size_mb': 256, 'max_rows': 50000}
        >>> PartitionSpec.coerce({"mode": "manual", "num_of_partitions": 4}).to_dict()
        {'mode': 'manual', 'num_of_partitions': 4}
        >>> PartitionSpec.coerce(None) is None
        True
    """

    mode: str
    num_of_partitions: int | None = None
    target_size_mb: int = 256
    size: int = DEFAULT_ROWS
    max_size_mb: int = 256
    max_rows: int = MAX_ROWS

    @classmethod
    def coerce(cls, value: Any) -> PartitionSpec | None:
        """``None`` (whole files), a ``PartitionSpec``, or a dict checked key by key."""
        if value is None or isinstance(value, PartitionSpec):
            return value
        if not isinstance(value, dict):
            msg = (f"partition must be None or a dict such as {{'mode': 'auto'}} or "
                   f"{{'mode': 'manual', 'num_of_partitions': 8}}, got {value!r}")
            raise TypeError(msg)
        mode = value.get("mode")
        if mode not in MODES:
            msg = (f"partition={value!r}: 'mode' must be one of {list(MODES)}, got {mode!r}")
            raise ValueError(msg)
        unknown = sorted(set(value) - set(KEYS[mode]), key=str)
        if unknown:
            msg = (f"partition={value!r}: unknown key(s) {unknown} for mode {mode!r}; the "
                   f"valid keys are {list(KEYS[mode])}")
            raise ValueError(msg)
        where = f"partition={value!r}"
        if mode == "manual":
            if "num_of_partitions" not in value:
                msg = f"{where}: mode 'manual' needs num_of_partitions (a positive integer)"
                raise ValueError(msg)
            return cls("manual", num_of_partitions=_positive_int(
                "num_of_partitions", value["num_of_partitions"], where))
        target = value.get("target_size_mb", 256)
        if target not in TARGET_SIZES_MB or isinstance(target, bool):
            msg = f"{where}: target_size_mb must be one of {list(TARGET_SIZES_MB)}, got {target!r}"
            raise ValueError(msg)
        return cls("auto", target_size_mb=target,
                   size=_positive_int("size", value.get("size", DEFAULT_ROWS), where),
                   max_size_mb=_positive_int("max_size_mb", value.get("max_size_mb", 256),
                                             where),
                   max_rows=_positive_int("max_rows", value.get("max_rows", MAX_ROWS), where))

    def to_dict(self) -> dict[str, Any]:
        """The canonical dict (every key of the mode, defaults filled in)."""
        return {key: getattr(self, key) for key in KEYS[self.mode]}

    def rows_for(self, memory_bytes_per_row: float | None,
                 disk_bytes_per_row: float | None = None) -> tuple[int, bool]:
        """Auto mode: ``(rows per partition, fell back)`` for a file's measured bytes per row.

        ``target_size_mb`` over the in-memory size of a row, between 1 and ``max_rows``; without
        that measure, ``size`` rows, fewer when they would exceed ``max_size_mb`` on disk.

        Example:
            >>> spec = PartitionSpec.coerce({"mode": "auto", "target_size_mb": 128})
            >>> spec.rows_for(4096.0), spec.rows_for(None), spec.rows_for(None, 65536.0)
            ((32768, False), (10000, True), (4096, True))
        """
        if memory_bytes_per_row and memory_bytes_per_row > 0:
            rows = int(self.target_size_mb * MiB // memory_bytes_per_row)
            return max(1, min(rows, self.max_rows)), False
        rows = self.size
        if disk_bytes_per_row and disk_bytes_per_row > 0:
            rows = min(rows, int(self.max_size_mb * MiB // disk_bytes_per_row))
        return max(1, min(rows, self.max_rows)), True


def refuse_with_file_grouping(spec: Any, files_per_partition: Any, blocksize: Any) -> None:
    """``partition=`` splits files by rows; ``files_per_partition``/``blocksize`` group whole
    files: one or the other."""
    if spec is None:
        return
    given = [f"{n}={v!r}" for n, v in (("files_per_partition", files_per_partition),
                                       ("blocksize", blocksize)) if v is not None]
    if given:
        msg = (f"partition= splits files into row ranges and {' and '.join(given)} groups whole "
               "files: give one or the other (partition=None keeps whole-file partitions)")
        raise ValueError(msg)
