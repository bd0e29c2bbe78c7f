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

from curator_dask.errors import CuratorDaskError
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


_INVALID_UTF8 = ("error", "replace", "skip")


class MalformedJsonError(ValueError, CuratorDaskError):
    """A JSONL file has a line that is not valid JSON; names the file and the line."""


class InvalidUtf8Error(MalformedJsonError):
    """A JSONL file has a line that is not valid UTF-8; names the file and the line."""


def _invalid_utf8_lines(raw: bytes) -> list[int]:
    """The numbers (from 1, as ``bytes.splitlines`` counts) of the lines that are not UTF-8.

    Example:
        >>> _invalid_utf8_lines(b'{"a": "ok"}\\n{"a": "\\xff"}\\n')
        [2]
    """
    try:
        raw.decode("utf-8")
        return []
    except UnicodeDecodeError:
        pass
    # No UTF-8 sequence contains a newline byte, so a line-by-line check finds the same bytes.
    bad = []
    for number, line in enumerate(raw.splitlines(), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(number)
    return bad


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
    """Reads JSONL files with ``pyarrow.json`` (``read_kwargs={"engine": "pandas"}``: pandas).

    ``invalid_utf8`` says what a line that is not valid UTF-8 gets (Arrow's JSON parser would
    let its bytes through to the output): ``"error"`` (default) raises ``InvalidUtf8Error``
    naming the file and the line; ``"replace"`` reads it with each bad byte sequence replaced
    by U+FFFD; ``"skip"`` drops it. Replaced and skipped lines are counted in the batch's
    stage record (``_stage_perf[-1].custom_metrics["invalid_utf8_lines_replaced"]`` or
    ``["invalid_utf8_lines_skipped"]``) and in a warning naming the file; skipped lines are
    not in the stage's ``items_out``. Valid files cost one UTF-8 validation of their string
    columns (docs/design/contract.md §6.1).
    """

    name: str = "jsonl_reader"
    invalid_utf8: str = "error"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.invalid_utf8 not in _INVALID_UTF8:
            msg = f"invalid_utf8 must be one of {_INVALID_UTF8}, got {self.invalid_utf8!r}"
            raise ValueError(msg)
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
        raw: bytes | None = None
        if local is None:
            raw = self._open_bytes(path)
            if not raw.strip():
                return pa.table({})  # an empty file holds no documents
        elif os.path.getsize(local) == 0:
            return pa.table({})
        try:
            table = self._parse(local if raw is None else raw)
            table.validate(full=True)  # Arrow's JSON parser does not check UTF-8
            return table
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            if raw is None:
                raw = self._open_bytes(path)
                if not raw.strip():
                    return pa.table({})
            return self._read_repaired(path, raw, exc)

    def _parse(self, source: str | bytes) -> pa.Table:
        """``pyarrow.json.read_json``, growing the block on a "straddling object" error."""
        block = int(self.read_kwargs.get("pyarrow_block_size", 8 << 20))
        max_block = int(self.read_kwargs.get("pyarrow_max_block_size", 256 << 20))
        while True:
            opts = pj.ReadOptions(block_size=block, use_threads=False)
            try:
                return pj.read_json(
                    io.BytesIO(source) if isinstance(source, bytes) else source,
                    read_options=opts)
            except pa.ArrowInvalid as exc:
                if "straddling" in str(exc) and block < max_block:
                    block = min(block * 2, max_block)
                    continue
                raise

    def _read_repaired(self, path: str, raw: bytes, exc: Exception,
                       first_line: int = 1) -> pa.Table:
        """The slow path after a failed read: name the bad line (``raw`` starts at line
        ``first_line`` of the file), or read the repaired bytes."""
        repaired = self._repair_utf8(path, raw, first_line)
        if repaired is not None:
            try:
                table = self._parse(repaired)
                table.validate(full=True)
                return table
            except (pa.ArrowInvalid, UnicodeDecodeError) as again:
                exc, raw = again, repaired
        bad = _first_bad_line(raw)
        if bad is not None:
            msg = f"Malformed JSON in {path} at line {bad[0] + first_line - 1}: {bad[1]}"
            raise MalformedJsonError(msg) from exc
        msg = f"Could not read JSONL file {path}: {exc}"
        raise MalformedJsonError(msg) from exc

    def _repair_utf8(self, path: str, raw: bytes, first_line: int = 1) -> bytes | None:
        """``None`` when ``raw`` is UTF-8; else raise, or the bytes with the bad lines replaced
        or blanked (so line numbers stay), as ``invalid_utf8`` says, counting them."""
        bad = [n + first_line - 1 for n in _invalid_utf8_lines(raw)]
        if not bad:
            return None
        if self.invalid_utf8 == "error":
            more = f" (and {len(bad) - 1} more lines)" if len(bad) > 1 else ""
            msg = (f"Invalid UTF-8 in {path} at line {bad[0]}{more}; pass "
                   "invalid_utf8='replace' (U+FFFD) or 'skip' to the JSONL reader to read it")
            raise InvalidUtf8Error(msg)
        if self.invalid_utf8 == "replace":
            repaired = raw.decode("utf-8", errors="replace").encode("utf-8")
        else:
            drop = set(bad)
            lines = raw.splitlines()
            repaired = b"\n".join(b"" if i in drop else line
                                  for i, line in enumerate(lines, start=first_line))
        done = "replaced" if self.invalid_utf8 == "replace" else "skipped"
        self._log_metric(f"invalid_utf8_lines_{done}", len(bad))
        logger.warning("%s: %d line(s) with invalid UTF-8 %s (first: line %d)",
                       path, len(bad), done, bad[0])
        return repaired

    def _read_pandas(self, path: str) -> Any:
        import pandas as pd

        kwargs = {k: v for k, v in self.read_kwargs.items() if k not in ("engine", "lines")}
        try:
            return pd.read_json(path, lines=True, **kwargs)
        except UnicodeDecodeError as exc:
            repaired = self._repair_utf8(path, self._open_bytes(path))
            if repaired is None:
                msg = f"Could not read JSONL file {path}: {exc}"
                raise MalformedJsonError(msg) from exc
            kwargs = {k: v for k, v in kwargs.items()
                      if k not in ("compression", "storage_options")}
            return pd.read_json(io.BytesIO(repaired), lines=True, **kwargs)
        except ValueError as exc:
            msg = f"Could not read JSONL file {path}: {exc}"
            raise MalformedJsonError(msg) from exc

    def read_pieces(self, pieces: list[dict[str, Any]]) -> Any:
        """Each piece's byte range alone (``fs.cat_file``: a range request on object stores),
        parsed as a file would be; a bad line is named by its line in the file."""
        opts = self.read_kwargs.get("storage_options") or {}
        engine = self.read_kwargs.get("engine", "pyarrow_direct")
        read = []
        for piece in pieces:
            fs, fs_path = fsspec.core.url_to_fs(piece["path"], **opts)
            raw = fs.cat_file(fs_path, start=piece["start_byte"], end=piece["end_byte"])
            if not raw.strip():
                continue  # blank lines only: no document
            reader = self._arrow_bytes if engine == "pyarrow_direct" else self._pandas_bytes
            read.append((piece["path"], reader(piece["path"], raw, piece["start_row"] + 1)))
        if not read:
            return pa.table({})
        return self._combined(read, [p["path"] for p in pieces], engine)

    def _arrow_bytes(self, path: str, raw: bytes, first_line: int) -> pa.Table:
        try:
            table = self._parse(raw)
            table.validate(full=True)
            return table
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            return self._read_repaired(path, raw, exc, first_line)

    def _pandas_bytes(self, path: str, raw: bytes, first_line: int) -> Any:
        import pandas as pd

        kwargs = {k: v for k, v in self.read_kwargs.items()
                  if k not in ("engine", "lines", "compression", "storage_options")}
        repaired = self._repair_utf8(path, raw, first_line)
        try:
            return pd.read_json(io.BytesIO(raw if repaired is None else repaired), lines=True,
                                **kwargs)
        except ValueError as exc:
            msg = f"Could not read JSONL file {path} from line {first_line}: {exc}"
            raise MalformedJsonError(msg) from exc

    def read_files(self, paths: list[str]) -> Any:
        engine = self.read_kwargs.get("engine", "pyarrow_direct")
        if engine != "pyarrow_direct":
            return self._combined([(p, self._read_pandas(p)) for p in paths], paths, engine)
        return self._combined([(p, self._read_arrow(p)) for p in paths], paths, engine)

    def _combined(self, read: list[tuple[str, Any]], paths: list[str], engine: str) -> Any:
        """The tables (frames) read, ``fields`` selected, concatenated."""
        if engine != "pyarrow_direct":
            import pandas as pd

            frames = [f for _, f in read]
            if self.fields is not None:
                frames = [f[[c for c in self.fields if c in f.columns]] for f in frames]
            return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        tables = []
        for path, table in read:
            if self.fields is not None and table.num_rows == 0 and not table.column_names:
                continue  # an empty file holds no columns at all: not a missing field
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
            if self.fields is not None and paths and any(t.column_names for _, t in read):
                msg = f"None of the requested fields {self.fields} exist in files {paths}"
                raise ValueError(msg)
            return pa.table({})
        return pa.concat_tables(tables, promote_options="permissive")


@dataclass
class JsonlReader(BaseReader):
    """Reads JSONL files into ``DocumentBatch``es: ``FilePartitioningStage`` + ``JsonlReaderStage``.

    ``invalid_utf8`` (``"error"``, ``"replace"`` or ``"skip"``) goes to ``JsonlReaderStage``,
    which says what each does and how replaced or skipped lines are counted.

    Example:
        >>> reader = JsonlReader(file_paths="data/*.jsonl", files_per_partition=2, fields=["text"])
        >>> [s.name for s in reader.decompose()]
        ['file_partitioning', 'jsonl_reader']
    """

    name: str = "jsonl_reader"
    invalid_utf8: str = "error"

    format_name = "JSONL"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.partition is None:
            return  # read_kwargs may be any mapping-like object a user passes (not only a dict)
        compression = (self.read_kwargs or {}).get("compression", "infer")
        if compression not in (None, "infer"):
            msg = (f"partition= cuts files at line boundaries, which compression="
                   f"{compression!r} does not allow (a compressed file is read whole); leave "
                   "compression to be inferred from the file names, or set partition=None")
            raise ValueError(msg)

    def default_extensions(self) -> list[str]:
        return [".jsonl", ".json"]

    def reader_stage(self) -> JsonlReaderStage:
        return JsonlReaderStage(
            fields=self.fields, read_kwargs=dict(self.read_kwargs or {}),
            allow_empty=self.allow_empty, invalid_utf8=self.invalid_utf8,
            _generate_ids=self._generate_ids, _assign_ids=self._assign_ids,
        )


__all__ = ["InvalidUtf8Error", "JsonlReader", "JsonlReaderStage", "MalformedJsonError"]
