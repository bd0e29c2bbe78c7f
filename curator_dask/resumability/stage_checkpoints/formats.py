"""How a stage checkpoint stores one table: Arrow IPC, Parquet or JSON Lines, and compression.

``encode_table`` returns the bytes of one data file and what its manifest entry must record;
``decode_table`` turns those bytes back into the same table. Arrow IPC carries the Arrow schema
itself. JSON Lines does not (an ``int8`` and an ``int64`` column, or a timestamp and a string,
look alike in JSON), and Parquet lacks a few types (``time32[s]``), so for both the manifest
keeps the Arrow schema (``arrow_schema``, IPC-serialized, base64) and the file is read with it
and cast back: the restored table equals the saved one, types, nulls, NaN and schema metadata
(pandas' index) included. Types JSON cannot hold without loss (binary, maps, unions, extension
types) are refused by name, with the formats that can.

=========  ====================================  =========
format     compression                           default
=========  ====================================  =========
arrow      none, lz4, zstd (IPC buffer codecs)   none
parquet    snappy, gzip, zstd, none              snappy
jsonl      none, gzip (the whole file)           none
=========  ====================================  =========
"""

from __future__ import annotations

import base64
import gzip
import io
import json
from typing import Any

FORMATS = ("arrow", "parquet", "jsonl")
# The first of each is the format's default.
COMPRESSIONS: dict[str, tuple[str, ...]] = {
    "arrow": ("none", "lz4", "zstd"),
    "parquet": ("snappy", "gzip", "zstd", "none"),
    "jsonl": ("none", "gzip"),
}
_BLOCK_LIMIT = 2**31 - 1  # Arrow's JSON reader takes an int32 block size


def check_compression(fmt: str, compression: str | None) -> str:
    """``compression`` for ``fmt``, or the format's default for ``None``.

    Example:
        >>> check_compression("parquet", None), check_compression("jsonl", "gzip")
        ('snappy', 'gzip')
        >>> check_compression("arrow", "snappy")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: ... compression 'snappy' does not go with format 'arrow': its ... lz4, zstd ...
    """
    valid = COMPRESSIONS[fmt]
    if compression is None:
        return valid[0]
    if compression not in valid:
        others = "; ".join(f"{f}: {', '.join(c)}" for f, c in COMPRESSIONS.items() if f != fmt)
        msg = (f"stage checkpoint compression {compression!r} does not go with format "
               f"{fmt!r}: its compressions are {', '.join(valid)} ({others})")
        raise ValueError(msg)
    return compression


def file_suffix(fmt: str, compression: str) -> str:
    """The data file's extension: ``arrow``, ``parquet``, ``jsonl`` or ``jsonl.gz``."""
    return "jsonl.gz" if fmt == "jsonl" and compression == "gzip" else fmt


def encode_table(table: Any, fmt: str, compression: str) -> tuple[bytes, dict[str, Any]]:
    """The bytes of one data file, and the fields its manifest entry adds (``format``,
    ``compression``; for JSON Lines the Arrow schema it is read back with)."""
    import pyarrow as pa

    meta: dict[str, Any] = {"format": fmt, "compression": compression}
    buf = io.BytesIO()
    if fmt == "arrow":
        options = pa.ipc.IpcWriteOptions(
            compression=None if compression == "none" else compression)
        with pa.ipc.new_file(buf, table.schema, options=options) as writer:
            writer.write_table(table)
        return buf.getvalue(), meta
    # Parquet cannot hold every Arrow type as it is either (time32[s] comes back as [ms]):
    # both are cast back to the schema recorded here
    meta["arrow_schema"] = base64.b64encode(table.schema.serialize().to_pybytes()).decode()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        # not the "compliant" nested names: a list's item field keeps its own name
        pq.write_table(table, buf, compression=compression, use_compliant_nested_type=False)
        return buf.getvalue(), meta
    data = _jsonl_bytes(table)
    # mtime=0: the same table gives the same bytes (and digest) on every save
    return (gzip.compress(data, compresslevel=6, mtime=0) if compression == "gzip"
            else data), meta


def decode_table(raw: bytes, file: str, meta: dict[str, Any]) -> Any:
    """The table in ``raw`` (the bytes of data file ``file``, already checked against the
    manifest's size and digest). Entries written before ``format`` was recorded are read by
    their extension (``.arrow`` or ``.parquet``)."""
    import pyarrow as pa

    fmt = meta.get("format") or ("arrow" if file.endswith(".arrow") else "parquet")
    if fmt == "arrow":
        return pa.ipc.open_file(pa.BufferReader(raw)).read_all()
    saved = meta.get("arrow_schema")
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(saved))) if saved else None
    if fmt == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(pa.BufferReader(raw))
        return table if schema is None or table.schema == schema else table.cast(schema)
    if schema is None:
        msg = "a jsonl stage checkpoint file without its Arrow schema in the manifest"
        raise ValueError(msg)
    if meta.get("compression") == "gzip":
        raw = gzip.decompress(raw)
    return _read_jsonl(raw, schema)


# -- JSON Lines ---------------------------------------------------------------------------
def json_type(t: Any, where: str) -> Any:
    """The type a column of type ``t`` has in JSON form, which casts back to ``t`` losslessly:
    timestamps, dates and decimals as strings (ISO text), times and durations as their
    integer count, narrower floats as float64, dictionaries as their values."""
    import pyarrow as pa
    import pyarrow.types as pt

    if (pt.is_null(t) or pt.is_boolean(t) or pt.is_integer(t) or pt.is_float64(t)
            or pt.is_string(t) or pt.is_large_string(t)):
        return t
    if pt.is_floating(t):
        return pa.float64()
    if pt.is_string_view(t):
        return pa.large_string()
    if pt.is_timestamp(t) or pt.is_date(t) or pt.is_decimal(t):
        return pa.string()
    if pt.is_time32(t):
        return pa.int32()
    if pt.is_time64(t) or pt.is_duration(t):
        return pa.int64()
    if pt.is_dictionary(t):
        return json_type(t.value_type, where)
    if pt.is_list(t) or pt.is_large_list(t) or pt.is_fixed_size_list(t):
        item = t.value_field  # a plain list: what Arrow's JSON reader reads
        return pa.list_(item.with_type(json_type(item.type, f"{where}[]")))
    if pt.is_struct(t):
        return pa.struct([pa.field(f.name, json_type(f.type, f"{where}.{f.name}"), f.nullable)
                          for f in t])
    msg = (f"the jsonl stage checkpoint format cannot hold {where!r} of type {t} without "
           "loss; use format arrow or parquet, which store every Arrow type")
    raise ValueError(msg)


def _json_schema(schema: Any) -> Any:
    import pyarrow as pa

    names = schema.names
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        msg = (f"the jsonl stage checkpoint format cannot hold a table with duplicate column "
               f"names {duplicates}; use format arrow or parquet")
        raise ValueError(msg)
    return pa.schema([pa.field(f.name, json_type(f.type, f.name), f.nullable)
                      for f in schema])


def _jsonl_bytes(table: Any) -> bytes:
    """One JSON object per row. The Arrow-native encoder when it covers the columns (text,
    integers, booleans), else ``json.dumps`` of each row (NaN and infinities as JSON5's
    ``NaN`` / ``Infinity``, which Arrow's JSON reader reads back)."""
    from curator_dask.utils.jsonl import encode_jsonl

    plain = table.cast(_json_schema(table.schema))
    buffers = encode_jsonl(plain)
    if buffers is not None:
        return b"".join(bytes(b) for b in buffers)
    return "".join(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n"
                   for row in plain.to_pylist()).encode()


def _read_jsonl(data: bytes, schema: Any) -> Any:
    """The lines of ``data`` read with the JSON form of ``schema``, cast back to ``schema``."""
    import pyarrow as pa
    import pyarrow.json as pj

    if not data:
        return schema.empty_table()
    plain = pj.read_json(
        pa.BufferReader(data),
        read_options=pj.ReadOptions(block_size=min(max(len(data), 1 << 20), _BLOCK_LIMIT)),
        parse_options=pj.ParseOptions(explicit_schema=_json_schema(schema),
                                      unexpected_field_behavior="error"))
    return plain.select(schema.names).cast(schema)
