"""``JsonlReader``: JSON Lines to pyarrow Tables, one read per file.

See docs/design/contract.md §6.1.
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.json as pj
from fsspec.utils import infer_compression

from curator_dask.errors import CuratorDaskError
from curator_dask.partitions.jsonl import head_lines
from curator_dask.stages.text.io.reader import bad_lines
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
    """The numbers (from 1, lines split at ``\\n``) of the lines that are not UTF-8.

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
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(number)
    return bad


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

    ``on_bad_lines`` says what a line that is not one JSON object gets, in pandas' words:
    ``"error"`` (the default, ``None``) raises ``MalformedJsonError`` naming the file and the
    line; ``"skip"`` drops it, counted in ``custom_metrics["bad_lines_skipped"]`` and in one
    warning per file; ``"warn"`` also warns for each line. ``bad_lines_path``: a folder that
    receives, per input file (per row range), the skipped lines with their numbers
    (``bad_lines.py``). Files that parse cost nothing more: lines are checked one by one only
    after a failed read.
    """

    name: str = "jsonl_reader"
    invalid_utf8: str = "error"
    on_bad_lines: str | None = None
    bad_lines_path: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.invalid_utf8 not in _INVALID_UTF8:
            msg = f"invalid_utf8 must be one of {_INVALID_UTF8}, got {self.invalid_utf8!r}"
            raise ValueError(msg)
        bad_lines.check_options(self.on_bad_lines, self.bad_lines_path)
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
        source: str | bytes
        if local is None:
            raw = source = self._open_bytes(path)
            if not raw.strip():
                return pa.table({})  # an empty file holds no documents
        elif os.path.getsize(local) == 0:
            return pa.table({})
        else:
            source = local
        try:
            table = self._parse(source)
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

    def _parse_valid(self, source: str | bytes) -> pa.Table:
        table = self._parse(source)
        table.validate(full=True)  # Arrow's JSON parser does not check UTF-8
        return table

    def _read_repaired(self, path: str, raw: bytes, exc: Exception, first_line: int = 1,
                       rows: tuple[int, int] | None = None) -> pa.Table:
        """The slow path after a failed read: name the bad line (``raw`` starts at line
        ``first_line`` of the file; ``rows``: the row range it is), or read the repaired
        bytes."""
        repaired = self._repair_utf8(path, raw, first_line)
        if repaired is not None:
            try:
                return self._parse_valid(repaired)
            except (pa.ArrowInvalid, UnicodeDecodeError) as again:
                exc, raw = again, repaired
        kept = self._skip_bad_lines(path, raw, first_line, rows)
        if kept is not None:
            try:
                return self._parse_valid(kept)
            except (pa.ArrowInvalid, UnicodeDecodeError) as again:
                exc = again  # not a bad line (say, a field changing type): an error
        msg = f"Could not read JSONL file {path}: {exc}"
        raise MalformedJsonError(msg) from exc

    def _skip_bad_lines(self, path: str, raw: bytes, first_line: int,
                        rows: tuple[int, int] | None) -> bytes | None:
        """``raw`` with its bad lines blanked, counted, reported and set aside; ``None`` when
        it has none. With ``on_bad_lines="error"`` the first one raises."""
        mode = self.on_bad_lines or "error"
        error = mode == "error"
        bad = bad_lines.find_bad_lines(raw, first_line, limit=1 if error else None)
        if not bad:
            return None
        if error:
            raise MalformedJsonError(bad_lines.malformed_message(path, bad[0]))
        written = None
        if self.bad_lines_path:
            opts = (self.read_kwargs.get("storage_options")
                    if is_remote_url(self.bad_lines_path) else None)
            written = bad_lines.set_aside(self.bad_lines_path, path, bad, rows, opts)
        self._log_metric("bad_lines_skipped", len(bad))
        bad_lines.report(path, bad, mode, written)
        return bad_lines.blank_lines(raw, [b.number for b in bad], first_line)

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
            repaired = bad_lines.blank_lines(raw, bad, first_line)
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
        except ValueError as exc:  # UnicodeDecodeError included
            return self._pandas_repaired(path, self._open_bytes(path), exc)

    def _pandas_repaired(self, path: str, raw: bytes, exc: Exception, first_line: int = 1,
                         rows: tuple[int, int] | None = None) -> Any:
        """The pandas engine's slow path: as ``_read_repaired``."""
        import pandas as pd

        kwargs = {k: v for k, v in self.read_kwargs.items()
                  if k not in ("engine", "lines", "compression", "storage_options")}
        repaired = self._repair_utf8(path, raw, first_line)
        raw = raw if repaired is None else repaired
        kept = self._skip_bad_lines(path, raw, first_line, rows)
        raw = raw if kept is None else kept
        if not raw.strip():
            return pd.DataFrame()
        if repaired is not None or kept is not None:
            try:
                return pd.read_json(io.BytesIO(raw), lines=True, **kwargs)
            except ValueError as again:
                exc = again
        where = f" from line {first_line}" if first_line > 1 else ""
        msg = f"Could not read JSONL file {path}{where}: {exc}"
        raise MalformedJsonError(msg) from exc

    def read_pieces(self, pieces: list[dict[str, Any]]) -> Any:
        """Each piece's byte range alone (``fs.cat_file``: a range request on object stores),
        parsed as a file would be; a bad line is named by its line in the file. A range
        without documents (blank or skipped lines) is an empty batch with the columns of its
        file's first documents, as the next stage expects them."""
        opts = self.read_kwargs.get("storage_options") or {}
        engine = self.read_kwargs.get("engine", "pyarrow_direct")
        read = []
        for piece in pieces:
            fs, fs_path = fsspec.core.url_to_fs(piece["path"], **opts)
            raw = fs.cat_file(fs_path, start=piece["start_byte"], end=piece["end_byte"])
            if not raw.strip():
                continue  # blank lines only: no document
            reader = self._arrow_bytes if engine == "pyarrow_direct" else self._pandas_bytes
            rows = (piece["start_row"], piece["end_row"])
            read.append((piece["path"], reader(piece["path"], raw, rows[0] + 1, rows)))
        paths = [p["path"] for p in pieces]
        data = self._combined(read, paths, engine) if read else None
        if data is None or not len(data.columns):
            data = self._no_rows(paths)
            return data if engine == "pyarrow_direct" else data.to_pandas()
        return data

    def _no_rows(self, paths: list[str]) -> pa.Table:
        """No rows with the columns the reader gives for ``paths``: those of the first file
        whose first lines hold a document (``fields`` of them), else ``fields`` (null)."""
        opts = self.read_kwargs.get("storage_options") or {}
        for path in dict.fromkeys(paths):
            fs, fs_path = fsspec.core.url_to_fs(path, **opts)
            head = head_lines(fs, fs_path, int(fs.size(fs_path)))
            head = bad_lines.blank_lines(head, [b.number for b in bad_lines.find_bad_lines(head)])
            if not head.strip():
                continue
            try:
                table = self._parse(head)
            except pa.ArrowInvalid:
                continue  # the columns are a courtesy: never an error of their own
            if self.fields is not None:
                table = table.select([c for c in self.fields if c in table.column_names])
            if table.num_columns:
                return table.slice(0, 0)
        return pa.table({c: pa.array([], pa.null()) for c in self.fields or []})

    def _arrow_bytes(self, path: str, raw: bytes, first_line: int,
                     rows: tuple[int, int] | None = None) -> pa.Table:
        try:
            return self._parse_valid(raw)
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            return self._read_repaired(path, raw, exc, first_line, rows)

    def _pandas_bytes(self, path: str, raw: bytes, first_line: int,
                      rows: tuple[int, int] | None = None) -> Any:
        import pandas as pd

        kwargs = {k: v for k, v in self.read_kwargs.items()
                  if k not in ("engine", "lines", "compression", "storage_options")}
        try:
            return pd.read_json(io.BytesIO(raw), lines=True, **kwargs)
        except ValueError as exc:  # UnicodeDecodeError included
            return self._pandas_repaired(path, raw, exc, first_line, rows)

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
        tables, notes = [], []
        for path, table in read:
            if self.fields is not None and table.num_rows == 0 and not table.column_names:
                continue  # an empty file holds no columns at all: not a missing field
            if self.fields is not None:
                existing = [c for c in self.fields if c in table.column_names]
                missing = [c for c in self.fields if c not in table.column_names]
                if missing:
                    notes.append((path, missing, _names(table.column_names), existing))
                if not existing:
                    continue
                table = table.select(existing)
            tables.append(table)
        if tables:  # said only when the batch is read: the error below says it otherwise
            for note in notes:
                logger.warning("%s: columns %s not found (it has %s), reading %s", *note)
        else:
            if self.fields is not None and paths and any(t.column_names for _, t in read):
                held = _names(list(dict.fromkeys(c for _, t in read for c in t.column_names)))
                msg = (f"None of the requested fields {self.fields} exist in files {paths}: "
                       f"they have the fields {held}; name those to read in fields=[...]")
                raise ValueError(msg)
            return pa.table({})
        return pa.concat_tables(tables, promote_options="permissive")


def _names(columns: list[str], most: int = 20) -> str:
    """``columns`` as a list, the first ``most`` of them.

    Example:
        >>> _names(["id", "content"]), _names(list("abc"), most=2)
        ("['id', 'content']", "['a', 'b', ... (3 in all)]")
    """
    if len(columns) <= most:
        return repr(columns)
    return repr(columns[:most])[:-1] + f", ... ({len(columns)} in all)]"


@dataclass
class JsonlReader(BaseReader):
    """Reads JSONL files into ``DocumentBatch``es: ``FilePartitioningStage`` + ``JsonlReaderStage``.

    ``invalid_utf8`` (``"error"``, ``"replace"`` or ``"skip"``), ``on_bad_lines``
    (``"error"``, ``"skip"`` or ``"warn"``) and ``bad_lines_path`` go to ``JsonlReaderStage``,
    which says what each does and how replaced or skipped lines are counted.

    Example:
        >>> reader = JsonlReader(file_paths="data/*.jsonl", files_per_partition=2, fields=["text"])
        >>> [s.name for s in reader.decompose()]
        ['file_partitioning', 'jsonl_reader']
    """

    name: str = "jsonl_reader"
    invalid_utf8: str = "error"
    on_bad_lines: str | None = None
    bad_lines_path: str | None = None

    format_name = "JSONL"

    def __post_init__(self) -> None:
        super().__post_init__()
        bad_lines.check_options(self.on_bad_lines, self.bad_lines_path)
        if self.bad_lines_path and "://" not in self.bad_lines_path:
            # made absolute here, on the driver: a worker may run in another directory
            self.bad_lines_path = os.path.abspath(self.bad_lines_path)
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
            on_bad_lines=self.on_bad_lines, bad_lines_path=self.bad_lines_path,
            _generate_ids=self._generate_ids, _assign_ids=self._assign_ids,
        )


__all__ = ["InvalidUtf8Error", "JsonlReader", "JsonlReaderStage", "MalformedJsonError"]
