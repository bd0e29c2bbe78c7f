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

_NEEDS_ESCAPE = r'["\\\x00-\x1f]'
_CONTROL = r"[\x00-\x1f]"
_RARE_CONTROL = r"[\x00-\x07\x0b\x0e-\x1f]"
_NAMED_CONTROL = (("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"), ("\b", "\\b"), ("\f", "\\f"))


def _s(value: str) -> pa.Scalar:
    return pa.scalar(value, pa.large_string())


def _any(mask: pa.ChunkedArray | pa.Array) -> bool:
    return bool(pc.any(mask).as_py())


def _quoted_strings(col: pa.ChunkedArray) -> pa.ChunkedArray | None:
    s = col.cast(pa.large_string())
    if _any(pc.match_substring_regex(s, _NEEDS_ESCAPE)):
        s = pc.replace_substring_regex(s, r'(["\\])', r"\\\1")
        if _any(pc.match_substring_regex(s, _CONTROL)):
            if _any(pc.match_substring_regex(s, _RARE_CONTROL)):
                return None
            for char, escaped in _NAMED_CONTROL:
                s = pc.replace_substring(s, char, escaped)
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
    buffers = []
    for chunk in lines.chunks:
        if len(chunk) == 0:
            continue
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int64)
        start, end = int(offsets[chunk.offset]), int(offsets[chunk.offset + len(chunk)])
        buffers.append(chunk.buffers()[2][start:end])
    return buffers
