"""``normalize_text`` and ``text_md5`` (curator_dask/dedup/text.py): exactly what NeMo Curator's
cudf code gives, checked with libcudf's own test vectors, against the table's two documented
statements, on every code point, and on random text against a plain-Python reference."""

from __future__ import annotations

import hashlib
import re
import unicodedata

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator_dask.dedup.text import EMPTY_MD5, normalize_text, text_md5
from curator_dask.dedup.text_case import cudf_lower_table

# cudf leaves these capitals (Unicode 13 and 14) as they are: its tables are older
NEWER_THAN_CUDF = {0x2C2F, 0xA7C0, 0xA7C7, 0xA7C9, 0xA7D0, 0xA7D6, 0xA7D8, 0xA7F5}
SIGMA = "\u03a3"


def reference(text: str | None, lowercase: bool = True, space: bool = True) -> str | None:
    """The rules written out plainly: cudf's lower case one code point at a time, then runs of
    U+0000..U+0020 as one space, trimmed."""
    if text is None:
        return None
    if lowercase:
        text = text.translate(cudf_lower_table())
    if space:
        text = re.sub("[\x00-\x20]+", " ", text).strip(" ")
    return text


def lower_only(values) -> list:
    return normalize_text(pd.Series(values, dtype=object), normalize_space=False).tolist()


# libcudf's own vectors: cpp/tests/strings/case_tests.cpp (ToLower, MultiCharLower,
# LongStringsSpecial) and cpp/tests/text/normalize_tests.cpp (NormalizeSpaces)
CUDF_LOWER = [
    ("Éxamples aBc", "éxamples abc"), ("123 456", "123 456"), (None, None),
    ("ARE THE", "are the"), ("tést strings", "tést strings"), ("", ""),
    ("\u0130", "\u0069\u0307"),
    ("ȺßCDÉFGHİJKLMNOPQRSTUVWXYZ1234567890!@#$%^&*()_+=-abcdéfghijklmnopqrstuvwxyz ",
     "ⱥßcdéfghi̇jklmnopqrstuvwxyz1234567890!@#$%^&*()_+=-abcdéfghijklmnopqrstuvwxyz "),
]
CUDF_SPACES = [
    ("the\t fox  jumped over the      dog", "the fox jumped over the dog"),
    ("the dog\f chased  the cat\r", "the dog chased the cat"),
    (" the cat  chaséd  the mouse\n", "the cat chaséd the mouse"), (None, None), ("", ""),
    (" \r\t\n", ""), ("no change", "no change"),
    ("the mousé ate the cheese", "the mousé ate the cheese"),
]


def test_libcudf_vectors():
    got = normalize_text(pd.Series([t for t, _ in CUDF_LOWER], dtype=object),
                         normalize_space=False)
    assert got.tolist() == [want for _, want in CUDF_LOWER]
    got = normalize_text(pd.Series([t for t, _ in CUDF_SPACES], dtype=object), lowercase=False)
    assert got.tolist() == [want for _, want in CUDF_SPACES]


def test_the_table_is_python_lower_on_the_bmp_except_letters_newer_than_cudf():
    table = cudf_lower_table()
    assert len(table) == 1165 and max(table) <= 0xFFFF  # nothing above U+FFFF changes
    assert all(c not in table for c in NEWER_THAN_CUDF)
    python = {c: chr(c).lower() for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF
              and chr(c).lower() != chr(c)}
    newer = set(python) - set(table)
    # on this Python (Unicode 14) exactly the eight; a newer Unicode only adds letters cudf lacks
    assert newer == NEWER_THAN_CUDF if unicodedata.unidata_version == "14.0.0" \
        else newer >= NEWER_THAN_CUDF
    assert {c: python[c] for c in table} == table


def test_every_code_point_is_lowered_as_cudf_lowers_it():
    table = cudf_lower_table()
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    # after "A": a code point is lowered without context (a capital sigma stays "σ")
    got = normalize_text(pa.array(["A" + chr(c) for c in points]), normalize_space=False)
    want = ["a" + table.get(c, chr(c)) for c in points]
    bad = [(hex(c), g, w) for c, g, w in zip(points, got.to_pylist(), want, strict=True)
           if g != w]
    assert bad == []


def test_where_python_arrow_and_cudf_differ():
    # Python: final sigma "ς" and Deseret lowered; Arrow: "İ" to "i" and newer letters lowered
    assert lower_only(["ΟΔΟΣ", "ΟΔΟΣ ΚΑΙ", "\U00010400", "İstanbul", "\u2c2f", "\ua7c0x"]) == [
        "οδοσ", "οδοσ και", "\U00010400", "i̇stanbul", "\u2c2f", "\ua7c0x"]
    assert "ΟΔΟΣ".lower() == "οδος" and "\U00010400".lower() != "\U00010400"


def test_white_space_is_u0000_to_u0020_only():
    assert normalize_text(pd.Series(["\x00a\x01\x08b\x0e\x1fc\x20", "a\x7fb", "a\u00a0 b",
                                     "a\u3000b\u2028c\x85d", "\t\n\x0b\x0c\r", " x "],
                                    dtype=object)).tolist() == [
        "a b c", "a\x7fb", "a\u00a0 b", "a\u3000b\u2028c\x85d", "", "x"]


def test_nulls_empty_index_name_and_dtypes_are_kept():
    s = pd.Series([" A ", None, ""], index=[7, 3, 5], name="text", dtype=object)
    out = normalize_text(s)
    assert out.tolist() == ["a", None, ""] and list(out.index) == [7, 3, 5]
    assert out.name == "text" and out.dtype == object
    assert normalize_text(pd.Series(["A"], dtype="string")).dtype == "string"
    assert normalize_text(pd.Series([], dtype=object)).tolist() == []
    assert normalize_text(pd.Series([None, None], dtype=object)).tolist() == [None, None]
    chunked = normalize_text(pa.chunked_array([["A  B"], [None, " C"]]))
    assert isinstance(chunked, pa.ChunkedArray) and chunked.to_pylist() == ["a b", None, "c"]
    sliced = normalize_text(pa.array(["x", "  Y Z ", None, "W"]).slice(1, 2))
    assert sliced.type == pa.string() and sliced.to_pylist() == ["y z", None]


def test_other_values_are_refused():
    with pytest.raises(TypeError, match="column of strings.*'n'"):
        normalize_text(pd.Series([1, 2], name="n"))
    with pytest.raises(TypeError, match="pandas Series or a pyarrow Array"):
        normalize_text(["a"])
    with pytest.raises(TypeError, match="Arrow type int64"):
        text_md5(pa.array([1]))


ALPHABET = st.sampled_from(
    list("aAzZ09 \t\n\r\x00\x1f\x20\x7f") + ["\u00a0", "\u3000", "\x85", SIGMA, "ς", "İ", "ß",
                                           "É", "\u2c2f", "\ua7c0", "\U00010400", "\U0001f600"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(ALPHABET, max_size=12)), max_size=8),
       st.booleans(), st.booleans())
def test_random_text_matches_the_reference(values, lowercase, space):
    got = normalize_text(pd.Series(values, dtype=object), lowercase=lowercase,
                         normalize_space=space)
    assert got.tolist() == [reference(v, lowercase, space) for v in values]


def test_md5_is_of_the_utf8_bytes_and_null_is_the_empty_text():
    values = ["abc", None, "", "İ ΟΔΟΣ \U0001f600", "x" * 10_000]
    got = text_md5(pd.Series(values, index=[4, 3, 2, 1, 0], dtype=object))
    assert got.tolist() == [hashlib.md5((v or "").encode()).hexdigest() for v in values]
    assert got[3] == got[2] == EMPTY_MD5 == "d41d8cd98f00b204e9800998ecf8427e"
    assert list(got.index) == [4, 3, 2, 1, 0]
    assert text_md5(pa.array(["q", "abc", None]).slice(1)).tolist() == [
        "900150983cd24fb0d6963f7d28e17f72", EMPTY_MD5]
    assert text_md5(pd.Series([], dtype=object)).tolist() == []
    assert all(len(h) == 32 and re.fullmatch("[0-9a-f]+", h) for h in got)
    assert np.array_equal(text_md5(pa.chunked_array([["a"], ["b"]])).to_numpy(),
                          text_md5(pd.Series(["a", "b"])).to_numpy())
