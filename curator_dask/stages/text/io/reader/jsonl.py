"""``JsonlReader``: JSON Lines to pyarrow Tables, one read per file.

See docs/design/contract.md §6.1.
"""

from __future__ import annotations

import io
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.json as pj
from fsspec.utils import infer_compression

from curator_dask.stages.text.io.reader.base import BaseReader, BaseReaderStage
from curator_dask.utils.files import is_remote_url

logger = logging.getLogger(__name__)

_ALLOWED_KWARGS = {
    "pyarrow_block_size",
    "pyarrow_max_block_size",
    "storage_options",
    "compression",
    "engine",
    "lines",
}


class MalformedJsonError(ValueError):
    """A JSONL file has a line that is not valid JSON; names the file and the line."""


def _first_bad_line(raw: bytes) -> tuple[int, str] | None:
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except ValueError as exc:
            return number, str(exc)
    return None


@dataclass
class JsonlReaderStage(BaseReaderStage):
    """Reads JSONL files with ``pyarrow.json`` (``read_kwargs={"engine": "pandas"}``: pandas)."""

    name: str = "jsonl_reader"

    def __post_init__(self) -> None:
        if self.read_kwargs.get("lines") is False:
            msg = "JsonlReader only supports lines=True"
            raise RuntimeError(msg)
        engine = self.read_kwargs.get("engine", "pyarrow_direct")
        if engine == "pyarrow_direct":
            unknown = sorted(set(self.read_kwargs) - _ALLOWED_KWARGS)
            if unknown:
                msg = (
                    f"Unsupported read_kwargs for engine='pyarrow_direct': {unknown}. Allowed: "
                    f"{sorted(_ALLOWED_KWARGS)}; use read_kwargs={{'engine': 'pandas', ...}} "
                    "for pandas.read_json options"
                )
                raise TypeError(msg)

    def _open_bytes(self, path: str) -> bytes:
        opts = self.read_kwargs.get("storage_options") or {}
        compression = self.read_kwargs.get("compression", "infer")
        with fsspec.open(path, "rb", compression=compression, **opts) as f:
            return f.read()

    def _direct_local_path(self, path: str) -> str | None:
        """``path`` when Arrow can read it itself: a local, uncompressed file, no options."""
        if self.read_kwargs.get("storage_options") or is_remote_url(path):
            return None
        compression = self.read_kwargs.get("compression", "infer")
        if compression not in (None, "infer") or (
            compression == "infer" and infer_compression(path) is not None
        ):
            return None
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem._strip_protocol(path)  # file:// and local:// alike

    def _read_arrow(self, path: str) -> pa.Table:
        local = self._direct_local_path(path)
        block = int(self.read_kwargs.get("pyarrow_block_size", 8 << 20))
        max_block = int(self.read_kwargs.get("pyarrow_max_block_size", 256 << 20))
        raw: bytes | None = None
        if local is None:
            raw = self._open_bytes(path)
            if not raw.strip():
                return pa.table({})  # an empty file holds no documents
        elif os.path.getsize(local) == 0:
            return pa.table({})
        while True:
            opts = pj.ReadOptions(block_size=block, use_threads=False)
            try:
                source = local if raw is None else io.BytesIO(raw)
                return pj.read_json(source, read_options=opts)
            except pa.ArrowInvalid as exc:
                if "straddling" in str(exc) and block < max_block:
                    block = min(block * 2, max_block)
                    continue
                if raw is None:
                    raw = self._open_bytes(path)
                    if not raw.strip():
                        return pa.table({})
                bad = _first_bad_line(raw)
                if bad is not None:
                    msg = f"Malformed JSON in {path} at line {bad[0]}: {bad[1]}"
                    raise MalformedJsonError(msg) from exc
                msg = f"Could not read JSONL file {path}: {exc}"
                raise MalformedJsonError(msg) from exc

    def _read_pandas(self, path: str) -> Any:
        import pandas as pd

        kwargs = {k: v for k, v in self.read_kwargs.items() if k not in ("engine", "lines")}
        try:
            return pd.read_json(path, lines=True, **kwargs)
        except ValueError as exc:
            msg = f"Could not read JSONL file {path}: {exc}"
            raise MalformedJsonError(msg) from exc

    def read_files(self, paths: list[str]) -> Any:
        engine = self.read_kwargs.get("engine", "pyarrow_direct")
        if engine != "pyarrow_direct":
            import pandas as pd

            frames = [self._read_pandas(p) for p in paths]
            if self.fields is not None:
                frames = [f[[c for c in self.fields if c in f.columns]] for f in frames]
            return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        tables = []
        for path in paths:
            table = self._read_arrow(path)
            if self.fields is not None:
                existing = [c for c in self.fields if c in table.column_names]
                missing = [c for c in self.fields if c not in table.column_names]
                if missing:
                    logger.warning("%s: columns %s not found, reading %s", path, missing, existing)
                if not existing:
                    continue
                table = table.select(existing)
            tables.append(table)
        if not tables:
            if self.fields is not None and paths:
                msg = f"None of the requested fields {self.fields} exist in files {paths}"
                raise ValueError(msg)
            return pa.table({})
        return pa.concat_tables(tables, promote_options="permissive")


@dataclass
class JsonlReader(BaseReader):
    """Reads JSONL files into ``DocumentBatch``es: ``FilePartitioningStage`` + ``JsonlReaderStage``.

    Example:
        >>> reader = JsonlReader(file_paths="data/*.jsonl", files_per_partition=2, fields=["text"])
        >>> [s.name for s in reader.decompose()]
        ['file_partitioning', 'jsonl_reader']
    """

    name: str = "jsonl_reader"

    format_name = "JSONL"

    def default_extensions(self) -> list[str]:
        return [".jsonl", ".json"]

    def reader_stage(self) -> JsonlReaderStage:
        return JsonlReaderStage(
            fields=self.fields, read_kwargs=dict(self.read_kwargs or {}),
            allow_empty=self.allow_empty,
        )


__all__ = ["JsonlReader", "JsonlReaderStage", "MalformedJsonError"]
