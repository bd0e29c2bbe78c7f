"""MinHash signatures on CPU, vectorised with numpy (no per-shingle Python loop).

A document's shingles are its ``char_ngrams``-character windows (a document shorter than that
is one shingle, the whole text; an empty or null text is the empty shingle). Each shingle gets
one 64-bit hash: a polynomial hash of its UTF-8 bytes (each plus one), computed for every window
of a batch of documents at once from prefix sums (``T[end] - T[start]``, rescaled by the inverse
power of the multiplier, which exists mod 2**64 because the multiplier is odd), then mixed by
murmur3's 64-bit finaliser. Windows are cut at character boundaries (UTF-8 lead
bytes), so a shingle is ``char_ngrams`` characters, not bytes, as ``char_ngrams`` says.

The ``num_hashes`` permutations are ``(a_i * h + b_i) mod 2**64`` with odd ``a_i`` (64-bit
signatures), or ``(a_i * (h >> 32) + b_i) mod 2**32`` (32-bit signatures: half the memory
traffic, and AVX2 multiplies 32-bit lanes natively), minimised per document with
``np.minimum.reduceat`` over chunks of shingles small enough to stay in the CPU's L2 cache.
All constants come from ``seed`` through splitmix64, so a seed gives the same signatures on any
machine and numpy version. See docs/deduplication.md.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

MINHASH_FIELD = "_minhash_signature"
_M64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_FMIX1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
# Batches of ~256 KiB of text: the rolling hash's temporaries (~64 bytes per byte of text)
# stay small enough for malloc to reuse them (larger ones are fresh pages each time: measured
# 2-4x slower per byte), and a permutation pass over 2**17 shingles stays in L2
_BATCH_BYTES = 1 << 18
_CHUNK = 1 << 17


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's output function over uint64 values (a bijection, well mixed)."""
    z = x.astype(np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def fmix64(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser (in place on a uint64 array, which it returns)."""
    x ^= x >> _S33
    x *= _FMIX1
    x ^= x >> _S33
    x *= _FMIX2
    x ^= x >> _S33
    return x


@dataclass(frozen=True)
class HashParameters:
    """The constants a seed gives: the rolling hash's odd multiplier ``base`` (and its inverse
    mod 2**64) and the permutations ``(a, b)``, 32- or 64-bit."""

    base: int
    inverse: int
    a: np.ndarray
    b: np.ndarray


@functools.lru_cache(maxsize=16)
def hash_parameters(seed: int, num_hashes: int, use_64_bit_hash: bool) -> HashParameters:
    """The constants of ``seed`` (cached per process).

    Example:
        >>> p = hash_parameters(42, 4, False)
        >>> p.a.dtype.name, bool((p.a % 2 == 1).all()), (p.base * p.inverse) % 2**64
        ('uint32', True, 1)
    """
    count = 2 * num_hashes + 1
    stream = splitmix64(np.uint64((seed * count) & _M64) + np.arange(count, dtype=np.uint64))
    base = int(stream[0]) | 1
    a, b = stream[1::2] | np.uint64(1), stream[2::2]
    if not use_64_bit_hash:
        a = (a >> _S32).astype(np.uint32) | np.uint32(1)
        b = (b >> _S32).astype(np.uint32)
    return HashParameters(base, pow(base, -1, 1 << 64), a, b)


_POWERS: dict[int, np.ndarray] = {}


def _powers(value: int, n: int) -> np.ndarray:
    """``value**j mod 2**64`` for ``j < n`` (numpy's uint64 products wrap, as wanted); the
    table is kept per process and grown when a longer one is asked for."""
    table = _POWERS.get(value)
    if table is None or len(table) < n:
        size = max(n, _BATCH_BYTES + 1, 2 * len(table) if table is not None else 0)
        table = np.full(size, value, dtype=np.uint64)
        table[0] = 1
        np.cumprod(table, out=table)
        _POWERS[value] = table
    return table[:n]


def _utf8(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes and int64 offsets of ``texts`` (nulls as empty strings), zero-copy."""
    arr = pc.fill_null(texts.cast(pa.large_string()), "")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(
        0, np.uint8)
    return data, offsets


def window_hashes(data: np.ndarray, offsets: np.ndarray, char_ngrams: int, base: int,
                  inverse: int) -> tuple[np.ndarray, np.ndarray]:
    """The 64-bit hash of every shingle of the documents ``data[offsets[i]:offsets[i+1]]``
    and the index of each document's first shingle (every document has at least one).

    Example:
        >>> p = hash_parameters(1, 1, True)
        >>> h, first = window_hashes(np.frombuffer(b"abcab", np.uint8), np.array([0, 3, 5]),
        ...                          2, p.base, p.inverse)
        >>> first.tolist(), bool(h[0] == h[2])  # "ab" twice
        ([0, 2], True)
    """
    lo, hi = int(offsets[0]), int(offsets[-1])
    text = data[lo:hi]
    rel = offsets - lo
    ascii_only = not text.size or int(text.max()) < 0x80
    # character starts: every byte of ASCII text (None), else the UTF-8 lead bytes
    chars = None if ascii_only else np.flatnonzero((text & 0xC0) != 0x80)
    cs, ce = (rel[:-1], rel[1:]) if chars is None else (
        np.searchsorted(chars, rel[:-1]), np.searchsorted(chars, rel[1:]))
    nchar = ce - cs
    count = np.maximum(nchar - char_ngrams + 1, 1)
    first = np.zeros(len(count), dtype=np.int64)
    np.cumsum(count[:-1], out=first[1:])
    char = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(cs - first, count)
    stop = char + np.repeat(np.minimum(nchar, char_ngrams), count)
    if chars is None:  # ASCII only
        start, end = char, stop
    else:
        cpos = np.append(chars, hi - lo)
        start, end = cpos[char], cpos[stop]
    prefix = np.zeros(len(text) + 1, dtype=np.uint64)
    # +1 so that a NUL byte still counts (and strings of different lengths differ)
    np.cumsum((text.astype(np.uint64) + np.uint64(1)) * _powers(base, len(text)),
              out=prefix[1:])
    raw = prefix[end] - prefix[start]
    raw *= _powers(inverse, len(text) + 1)[start]
    return fmix64(raw), first


def _minimise(h: np.ndarray, first: np.ndarray, params: HashParameters,
              out: np.ndarray) -> None:
    """``out[i, d] = min over the shingles of document d of (a_i * h + b_i)`` (wrapping)."""
    if params.a.dtype == np.uint32:
        h = (h >> _S32).astype(np.uint32)
    n_win = len(h)
    bounds = np.union1d(first, np.arange(0, n_win, _CHUNK))  # doc starts and chunk starts
    seg_doc = np.searchsorted(first, bounds, side="right") - 1
    tmp = np.empty(min(_CHUNK, n_win), dtype=h.dtype)
    for c0 in range(0, n_win, _CHUNK):
        lo, hi = np.searchsorted(bounds, [c0, c0 + _CHUNK])
        chunk = h[c0:c0 + _CHUNK]
        t = tmp[:len(chunk)]
        local = bounds[lo:hi] - c0
        d0, d1 = int(seg_doc[lo]), int(seg_doc[hi - 1]) + 1  # the docs of a chunk are adjacent
        for i, (a, b) in enumerate(zip(params.a, params.b, strict=True)):
            np.multiply(chunk, a, out=t)
            t += b
            row = out[i, d0:d1]
            np.minimum(row, np.minimum.reduceat(t, local), out=row)


def window_hash_batches(texts: pa.Array | pa.ChunkedArray, char_ngrams: int,
                        params: HashParameters) -> Iterator[tuple[int, int, np.ndarray,
                                                                  np.ndarray]]:
    """``(d0, d1, hashes, first)`` for consecutive batches of whole documents ``d0:d1`` of
    about ``_BATCH_BYTES`` of text (a longer document is a batch of its own): the shingle
    hashes of the batch and the index of each document's first shingle."""
    data, offsets = _utf8(texts)
    n = len(offsets) - 1
    d0 = 0
    while d0 < n:
        d1 = int(np.searchsorted(offsets, offsets[d0] + _BATCH_BYTES, side="right")) - 1
        d1 = min(max(d1, d0 + 1), n)
        h, first = window_hashes(data, offsets[d0:d1 + 1], char_ngrams, params.base,
                                 params.inverse)
        yield d0, d1, h, first
        d0 = d1


def minhash_signatures(texts: pa.Array | pd.Series | list[str], *, seed: int = 42,
                       num_hashes: int = 260, char_ngrams: int = 24,
                       use_64_bit_hash: bool = False) -> np.ndarray:
    """The MinHash signatures of ``texts``: shape ``(len(texts), num_hashes)``, uint32 or
    uint64.

    Example:
        >>> sig = minhash_signatures(["the same text here", "the same text here", "other"],
        ...                          num_hashes=8, char_ngrams=5)
        >>> sig.shape, bool((sig[0] == sig[1]).all()), bool((sig[0] == sig[2]).any())
        ((3, 8), True, False)
    """
    _check(num_hashes, char_ngrams)
    params = hash_parameters(int(seed), int(num_hashes), bool(use_64_bit_hash))
    arr = as_text_array(texts)
    dtype = params.a.dtype
    out = np.full((num_hashes, len(arr)), np.iinfo(dtype).max, dtype=dtype)
    for d0, d1, h, first in window_hash_batches(arr, char_ngrams, params):
        _minimise(h, first, params, out[:, d0:d1])
    return np.ascontiguousarray(out.T)


def as_text_array(texts: pa.Array | pa.ChunkedArray | pd.Series | list[str]) -> pa.Array:
    """``texts`` as one Arrow ``large_string`` array (pandas' missing values as nulls)."""
    if isinstance(texts, pa.Array | pa.ChunkedArray):
        return texts
    if isinstance(texts, pd.Series):
        return pa.array(texts, type=pa.large_string(), from_pandas=True)
    return pa.array(list(texts), type=pa.large_string())


def signature_array(sig: np.ndarray) -> pa.Array:
    """``sig`` (rows x hashes) as an Arrow list column (NeMo's ``_minhash_signature`` type:
    ``list<uint32>`` or ``list<uint64>``), without copying the values."""
    n, k = sig.shape
    values = pa.array(sig.reshape(-1))
    if n * k < 2**31:
        return pa.ListArray.from_arrays(pa.array(np.arange(0, n * k + 1, k, dtype=np.int32)),
                                        values)
    return pa.LargeListArray.from_arrays(pa.array(np.arange(0, n * k + 1, k, dtype=np.int64)),
                                         values)


def signature_matrix(column: pa.Array | pa.ChunkedArray, num_hashes: int) -> np.ndarray:
    """The inverse of :func:`signature_array`: a list column back to a (rows x hashes)
    numpy array (zero-copy when it is one chunk)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    values = column.flatten().to_numpy(zero_copy_only=False)
    if values.size != len(column) * num_hashes:
        msg = (f"the minhash column holds {values.size} values for {len(column)} documents, "
               f"not {num_hashes} each: the MinHashStage files were written with other "
               "num_bands x minhashes_per_band; run without checkpoint_path= (or with a new "
               "cache_path) to recompute them")
        raise ValueError(msg)
    return values.reshape(len(column), num_hashes)


@dataclass(frozen=True)
class MinHashSignature:
    """Phase 1's per-partition computation of the fuzzy workflow: the text column in, the
    ``_minhash_signature`` column out (same rows, same order). A frozen dataclass, so its
    parameters are part of the checkpoint's fingerprint.

    Example:
        >>> table = MinHashSignature(num_hashes=4)(pd.DataFrame({"text": ["a b c", None]}))
        >>> table.column_names, table.column(0).type
        (['_minhash_signature'], ListType(list<item: uint32>))
    """

    seed: int = 42
    num_hashes: int = 260
    char_ngrams: int = 24
    use_64_bit_hash: bool = False
    text_field: str = "text"
    normalize_text: bool = False

    def __call__(self, frame: pd.DataFrame) -> pa.Table:
        texts = frame[self.text_field]
        if self.normalize_text:
            from curator_dask.dedup.text import normalize_text

            texts = normalize_text(texts)
        sig = minhash_signatures(as_text_array(texts), seed=self.seed, num_hashes=self.num_hashes,
                                 char_ngrams=self.char_ngrams,
                                 use_64_bit_hash=self.use_64_bit_hash)
        return pa.table({MINHASH_FIELD: signature_array(sig)})


def _check(num_hashes: int, char_ngrams: int) -> None:
    if num_hashes < 1 or char_ngrams < 1:
        msg = (f"num_hashes={num_hashes} and char_ngrams={char_ngrams} must both be at least "
               "1 (NeMo's defaults: 260 = 20 bands x 13, and 24)")
        raise ValueError(msg)


__all__ = ["MINHASH_FIELD", "HashParameters", "MinHashSignature", "as_text_array", "fmix64",
           "hash_parameters", "minhash_signatures", "signature_array", "signature_matrix",
           "splitmix64", "window_hash_batches", "window_hashes"]
