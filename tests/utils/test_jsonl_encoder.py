"""The Arrow JSONL encoder gives, line by line, the JSON values of the table's rows."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator_dask.utils.jsonl import encode_jsonl

_RARE = {chr(c) for c in range(0x20)} - set("\n\r\t\b\f")


def _decode(buffers) -> list[dict]:
    data = b"".join(bytes(b) for b in buffers)
    assert data == b"" or data.endswith(b"\n")
    return [json.loads(line) for line in data.decode("utf-8").split("\n")[:-1]]


rows = st.lists(
    st.fixed_dictionaries({
        "text": st.one_of(st.none(), st.text()),
        "n": st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
        "flag": st.one_of(st.none(), st.booleans()),
    }),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(rows)
def test_encoded_lines_decode_to_the_rows(data):
    table = pa.Table.from_pylist(
        data, schema=pa.schema([("text", pa.string()), ("n", pa.int64()), ("flag", pa.bool_())])
    )
    encoded = encode_jsonl(table)
    has_rare = any(r["text"] is not None and set(r["text"]) & _RARE for r in data)
    if has_rare:
        assert encoded is None  # left to pandas, which writes \u00XX
    else:
        assert _decode(encoded) == data


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                 blacklist_characters=list(_RARE))),
                max_size=20),
       st.integers(min_value=0, max_value=5))
def test_chunked_and_sliced_tables(texts, cut):
    table = pa.table({"t": pa.chunked_array([texts[:cut], texts[cut:]], pa.string())})
    assert _decode(encode_jsonl(table)) == [{"t": t} for t in texts]
    sliced = table.slice(min(cut, len(texts)))
    assert _decode(encode_jsonl(sliced)) == [{"t": t} for t in texts[min(cut, len(texts)):]]


def test_column_names_are_escaped_and_unicode_kept():
    table = pa.table({'we"ird\\name': ["é ü 中"], "n": pa.array([1], pa.int8())})
    data = b"".join(bytes(b) for b in encode_jsonl(table))
    assert data == '{"we\\"ird\\\\name":"é ü 中","n":1}\n'.encode()


@pytest.mark.parametrize(
    "table",
    [pa.table({"f": [1.5]}), pa.table({"l": [[1, 2]]}), pa.table({"s": [{"a": 1}]})],
)
def test_other_types_fall_back(table):
    assert encode_jsonl(table) is None


def test_empty_and_string_view():
    assert encode_jsonl(pa.table({"a": pa.array([], pa.string())})) == []
    view = pa.table({"v": pa.array(["a", None, 'b"'], pa.string_view())})
    assert _decode(encode_jsonl(view)) == [{"v": "a"}, {"v": None}, {"v": 'b"'}]
