"""Arrow-native JSON Lines encoding for the common case (string, integer and bool columns).

pandas' ``to_json`` costs about 35 ms per 20,000 short documents; building the lines with
Arrow compute kernels costs a few ms when the text needs no escaping and stays below pandas
when it does. Tables with other column types, or with rare control characters that JSON
writes as ``\\u00XX``, return ``None`` and the caller falls back to pandas. The output is
valid JSON whose values equal pandas' (pandas additionally escapes ``/`` as ``\\/``).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NAMED_CONTROL = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x08: "\\b", 0x0C: "\\f"}


def _s(value: str) -> pa.Scalar:
    return pa.scalar(value, pa.large_string())


def _value_bytes(chunk: pa.Array) -> np.ndarray:
    """The UTF-8 bytes of all values of a large_string chunk (nulls contribute none)."""
    offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int64)
    start, end = int(offsets[chunk.offset]), int(offsets[chunk.offset + len(chunk)])
    data = chunk.buffers()[2]
    if data is None or end == start:
        return np.empty(0, dtype=np.uint8)
    return np.frombuffer(data, dtype=np.uint8, count=end - start, offset=start)


def _escapes_needed(s: pa.ChunkedArray) -> tuple[bool, set[int]]:
    """(any ``"`` or ``\\``, the set of control bytes < 0x20) in the values of ``s``.

    A byte scan is several times faster than a regex kernel over the same text. UTF-8
    continuation bytes are >= 0x80, so they never match.
    """
    quote_or_backslash, controls = False, set[int]()
    for chunk in s.chunks:
        raw = _value_bytes(chunk)
        if not raw.size:
            continue
        quote_or_backslash = quote_or_backslash or bool((raw == 0x22).any() or (raw == 0x5C).any())
        low = raw < 0x20
        if low.any():
            controls.update(int(b) for b in np.unique(raw[low]))
    return quote_or_backslash, controls


def _quoted_strings(col: pa.ChunkedArray) -> pa.ChunkedArray | None:
    s = col.cast(pa.large_string())
    quote_or_backslash, controls = _escapes_needed(s)
    if controls - _NAMED_CONTROL.keys():
        return None  # JSON needs \u00XX for these: leave them to pandas
    if quote_or_backslash:
        s = pc.replace_substring_regex(s, r'(["\\])', r"\\\1")
    for byte in sorted(controls):
        s = pc.replace_substring(s, chr(byte), _NAMED_CONTROL[byte])
    quote = _s('"')
    return pc.binary_join_element_wise(quote, s, quote, _s(""))


def _json_values(col: pa.ChunkedArray) -> pa.ChunkedArray | None:
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        values = _quoted_strings(col)
    elif pa.types.is_integer(t) or pa.types.is_boolean(t):
        values = col.cast(pa.large_string())
    elif pa.types.is_null(t):
        values = pa.chunked_array([pa.nulls(len(col), pa.large_string())])
    else:
        return None
    if values is None:
        return None
    return pc.fill_null(values, _s("null"))


def encode_jsonl(table: pa.Table) -> list[pa.Buffer] | None:
    """The JSONL bytes of ``table`` as buffers to write in order, or ``None`` if unsupported.

    Example:
        >>> bufs = encode_jsonl(pa.table({"text": ['say "hi"'], "n": [1]}))
        >>> b"".join(bytes(b) for b in bufs)
        b'{"text":"say \\\\"hi\\\\"","n":1}\\n'
    """
    if table.num_rows == 0:
        return []
    if table.num_columns == 0:
        return None
    parts: list = []
    for i, (name, col) in enumerate(zip(table.column_names, table.columns, strict=True)):
        values = _json_values(col)
        if values is None:
            return None
        parts.append(_s(("{" if i == 0 else ",") + json.dumps(name, ensure_ascii=False) + ":"))
        parts.append(values)
    lines = pc.binary_join_element_wise(*parts, _s("}\n"), _s(""))
    return [pa.py_buffer(_value_bytes(chunk)) for chunk in lines.chunks if len(chunk)]
