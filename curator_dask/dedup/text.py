"""Text normalisation and hashing for exact deduplication, on pandas and Arrow.

:func:`normalize_text` gives exactly what NeMo Curator's ``normalize_text`` (cudf code, GPU
only) gives: ``str.lower()`` as libcudf does it (:mod:`.text_case`), then libcudf's
``normalize_spaces``: every run of code points U+0000 to U+0020 (ASCII controls and the space;
not U+00A0 or other Unicode spaces) becomes one space, and those at both ends are removed.
A null stays null.

:func:`text_md5` is cudf's ``hash_values(method="md5")`` of a text column: the lowercase hex
MD5 of each text's UTF-8 bytes; a null hashes as the empty text (cudf's MD5 skips null
elements), so null and ``""`` fall in one group, as in NeMo.

Both are vectorised through Arrow compute kernels, with one exception kept exact: Arrow lowers
case with utf8proc, which follows a newer Unicode than cudf, so the few code points on which
the installed pyarrow and cudf disagree are found once per process (every code point is
lowered once and compared with cudf's table) and only the rows that hold one of them are
lowered piece by piece.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from curator_dask.dedup.text_case import cudf_lower_table

EMPTY_MD5 = hashlib.md5(b"").hexdigest()
# libcudf's normalize_spaces: a code point is white space when it is <= U+0020; in UTF-8 that is
# one byte <= 0x20, and no byte of a longer character is below 0x80, so bytes can be tested
_SPACE = 0x20
_MAX_CODE_POINT = 0x10FFFF


def normalize_text(text: Any, *, lowercase: bool = True, normalize_space: bool = True) -> Any:
    """NeMo Curator's ``normalize_text`` on pandas or Arrow: lower case, then white-space runs
    collapsed to one space and trimmed (both as cudf does them; see the module docstring).

    Args:
        text: A pandas Series of strings (nulls allowed), or a pyarrow string Array or
            ChunkedArray.
        lowercase: Lower the case.
        normalize_space: Collapse runs of U+0000..U+0020 into one space and trim both ends.

    Returns:
        The same kind of object as ``text``: a Series keeps its index, name and (object or
        string) dtype.

    Raises:
        TypeError: ``text`` is not a Series or Arrow array of strings.

    Example:
        >>> import pandas as pd
        >>> normalize_text(pd.Series(["  Hello\\t\\tWORLD ", "İ", None], dtype=object)).tolist()
        ['hello world', 'i̇', None]
    """
    arr = _as_arrow(text, "normalize_text")
    if lowercase:
        arr = _lower(arr)
    if normalize_space:
        arr = _collapse_spaces(arr)
    return _like(text, arr)


def text_md5(text: Any) -> pd.Series:
    """The lowercase hex MD5 of each text's UTF-8 bytes (cudf's ``hash_values(method="md5")``);
    a null hashes as the empty text.

    Args:
        text: A pandas Series of strings, or a pyarrow string Array or ChunkedArray.

    Returns:
        A pandas Series of 32-character strings (the index of ``text`` when it is a Series).

    Example:
        >>> import pandas as pd
        >>> text_md5(pd.Series(["abc", None])).tolist()
        ['900150983cd24fb0d6963f7d28e17f72', 'd41d8cd98f00b204e9800998ecf8427e']
    """
    arr = pc.fill_null(_as_arrow(text, "text_md5"), "")
    index = text.index if isinstance(text, pd.Series) else None
    if len(arr) == 0:
        return pd.Series([], index=index, dtype=object)
    # hash slices of the UTF-8 buffer: no Python str per row is built and encoded again
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[
        arr.offset:arr.offset + len(arr) + 1].tolist()
    data = arr.buffers()[2]
    view = memoryview(data) if data is not None else memoryview(b"")
    md5 = hashlib.md5
    digests = [md5(view[offsets[i]:offsets[i + 1]]).hexdigest() for i in range(len(arr))]
    return pd.Series(digests, index=index, dtype=object)


def text_md5_words(text: Any) -> np.ndarray:
    """The MD5 of each text's UTF-8 bytes (as :func:`text_md5`) as two big-endian 64-bit words
    per row, shape ``(n, 2)``, ``uint64``: the same digest in a form that sorts, groups and
    shuffles as numbers (no 32-character string per row).

    Example:
        >>> import pandas as pd
        >>> words = text_md5_words(pd.Series(["abc"]))
        >>> f"{int(words[0, 0]):016x}{int(words[0, 1]):016x}" == text_md5(pd.Series(["abc"]))[0]
        True
    """
    arr = pc.fill_null(_as_arrow(text, "text_md5_words"), "")
    if len(arr) == 0:
        return np.empty((0, 2), dtype=np.uint64)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[
        arr.offset:arr.offset + len(arr) + 1].tolist()
    data = arr.buffers()[2]
    view = memoryview(data) if data is not None else memoryview(b"")
    md5 = hashlib.md5
    joined = b"".join([md5(view[offsets[i]:offsets[i + 1]]).digest() for i in range(len(arr))])
    return np.frombuffer(joined, dtype=">u8").astype(np.uint64).reshape(-1, 2)


def _as_arrow(text: Any, caller: str) -> pa.Array:
    if isinstance(text, pd.Series):
        what = f"the Series {text.name!r} (dtype {text.dtype})"
        try:
            arr = pa.array(text, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            msg = f"{caller} needs a column of strings; {what} holds other values ({exc})"
            raise TypeError(msg) from None
    elif isinstance(text, (pa.Array, pa.ChunkedArray)):
        what, arr = "the array", text
    else:
        msg = (f"{caller} takes a pandas Series or a pyarrow Array of strings, got "
               f"{type(text).__name__}")
        raise TypeError(msg)
    if pa.types.is_null(arr.type):  # every value missing
        arr = arr.cast(pa.large_string())
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        msg = f"{caller} needs a column of strings; {what} has Arrow type {arr.type}"
        raise TypeError(msg)
    arr = arr.cast(pa.large_string())
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _like(text: Any, arr: pa.Array) -> Any:
    if not isinstance(text, pd.Series):
        arr = arr.cast(text.type) if text.type != arr.type else arr
        return pa.chunked_array([arr]) if isinstance(text, pa.ChunkedArray) else arr
    out = arr.to_pandas()
    out.index, out.name = text.index, text.name
    if text.dtype == object:
        return out.astype(object).where(out.notna(), None)
    return out.astype(text.dtype)


def _collapse_spaces(arr: pa.Array) -> pa.Array:
    """libcudf's ``normalize_spaces`` on the UTF-8 buffer: each run of white-space bytes
    becomes one space, runs at the start or end of a row are dropped; nulls stay null."""
    n = len(arr)
    if n == 0:
        return arr
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    if offsets[-1] == offsets[0]:  # every row empty or null
        return arr
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    offsets = offsets - offsets[0]
    space = data <= _SPACE
    if not space.any():
        return arr
    size = len(data)
    # a run never crosses a row boundary: a row's first byte starts one, its last byte ends one
    row_first, row_last = np.zeros(size, bool), np.zeros(size, bool)
    filled = offsets[1:] > offsets[:-1]
    row_first[offsets[:-1][filled]] = True
    row_last[offsets[1:][filled] - 1] = True
    before, after = np.zeros(size, bool), np.zeros(size, bool)
    before[1:], after[:-1] = space[:-1], space[1:]
    firsts = np.flatnonzero(space & (row_first | ~before))
    lasts = np.flatnonzero(space & (row_last | ~after))  # the k-th run is firsts[k]..lasts[k]
    inner = firsts[~(row_first[firsts] | row_last[lasts])]
    keep = ~space
    keep[inner] = True
    out = data.copy()
    out[inner] = _SPACE
    dropped = np.flatnonzero(~keep)
    new_offsets = offsets - np.searchsorted(dropped, offsets)
    validity = arr.buffers()[0] if arr.null_count else None
    if validity is not None and arr.offset:
        validity = pa.array(arr.is_valid()).buffers()[1]  # realigned to offset 0
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(new_offsets), pa.py_buffer(out[keep]),
                                            validity, arr.null_count)


def _lower(arr: pa.Array) -> pa.Array:
    """cudf's lower case: Arrow's kernel, and the rows it would get wrong redone exactly."""
    pattern = _disagreement_pattern()
    lowered = pc.utf8_lower(arr)
    if pattern is None:
        return lowered
    mask = pc.fill_null(pc.match_substring_regex(arr, pattern=pattern), False)
    if not pc.any(mask).as_py():
        return lowered
    originals = pc.filter(arr, mask).to_pylist()
    return pc.replace_with_mask(lowered, mask, pa.array(_lower_exactly(originals),
                                                        pa.large_string()))


def _lower_exactly(texts: list[str]) -> list[str]:
    """Rows that hold a code point Arrow lowers unlike cudf: Python's ``str.lower`` where it
    agrees with cudf on every code point of the row (Turkish capital I with dot, say), else
    cudf's table character by character (slower: the rows with a capital sigma, or a cased
    letter beyond U+FFFF or newer than cudf's tables)."""
    table = cudf_lower_table()
    unlike = _python_disagreement_re()
    return [t.translate(table) if unlike.search(t) else t.lower() for t in texts]


@lru_cache(maxsize=1)
def _python_disagreement_re() -> re.Pattern[str]:
    """The code points on which Python's ``str.lower`` differs from cudf's, as a character
    class: those whose lower case differs, and the capital sigma (Python lowers it to a final
    sigma at the end of a word)."""
    table = cudf_lower_table()
    unlike = [c for c in range(_MAX_CODE_POINT + 1) if not 0xD800 <= c <= 0xDFFF
              and chr(c).lower() != table.get(c, chr(c))] + [0x03A3]
    ranges = "".join(re.escape(chr(a)) + ("" if a == b else "-" + re.escape(chr(b)))
                     for a, b in _ranges(sorted(set(unlike))))
    return re.compile(f"[{ranges}]")


@lru_cache(maxsize=1)
def _arrow_disagreements() -> frozenset[int] | None:
    """The code points whose lower case by the installed pyarrow differs from cudf's; ``None``
    when Arrow's kernel is not one code point for one (then every non-ASCII row is redone)."""
    points = np.concatenate([np.arange(0, 0xD800), np.arange(0xE000, _MAX_CODE_POINT + 1)])
    points = points.astype(np.uint32)
    text = points.tobytes().decode("utf-32-le")
    got = pc.utf8_lower(pa.array([text], pa.large_string()))[0].as_py()
    got_points = np.frombuffer(got.encode("utf-32-le"), dtype=np.uint32)
    if len(got_points) != len(points):
        return None
    table = cudf_lower_table()
    single = {c: ord(lower) for c, lower in table.items() if len(lower) == 1}
    keys = np.fromiter(single, dtype=np.int64, count=len(single))
    want = points.copy()
    # position of code point c in ``points`` (the surrogates are left out)
    want[np.where(keys < 0xD800, keys, keys - 0x800)] = np.fromiter(
        single.values(), dtype=np.uint32, count=len(single))
    multi = frozenset(c for c, lower in table.items() if len(lower) != 1)
    return frozenset(points[got_points != want].tolist()) | multi


def _disagreement_pattern() -> str | None:
    disagree = _arrow_disagreements()
    if disagree is None:
        return r"[^\x00-\x7f]"
    if not disagree:
        return None
    return "[" + "".join(_re2_range(a, b) for a, b in _ranges(sorted(disagree))) + "]"


def _ranges(points: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for p in points:
        if out and p == out[-1][1] + 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return out


def _re2_range(a: int, b: int) -> str:
    return f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}"


__all__ = ["EMPTY_MD5", "normalize_text", "text_md5", "text_md5_words"]
