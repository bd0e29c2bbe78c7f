"""The Filters' equivalents, each exact for these reasons (the tests compare with
Data-Juicer row for row):

- ``character_repetition_filter``: each n-gram written exactly as a number in base (number of
  distinct characters of the text) over dense character codes, grouped by the first character
  where it needs more than 64 bits, and counted by sorting (no hashing); where two numbers do
  not suffice, or for short texts, counted in Python. Same integer sums, same division.
- ``words_num_filter`` (no tokenization), ``alphanumeric_filter`` (no tokenization),
  ``special_characters_filter``: one numpy pass over the batch's code points with a table of
  the characters Data-Juicer tests one at a time (``SPECIAL_CHARACTERS``' single characters,
  ``str.isalnum``); a word survives Data-Juicer's split on space, tab and newline and its
  strip of special characters exactly when it holds a character that is not special. Counts
  are Python ints divided as Data-Juicer divides them.
- ``text_length_filter``, ``average_line_length_filter``, ``maximum_line_length_filter``: the
  same expressions (``len``, ``str.splitlines``) without the per-row wrappers.
- Filters keep a stat already present in a row's stats (Data-Juicer's caching) and never use
  the ``context`` cache (the executor does not pass ``context``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from curator_dask.data_juicer.fast_ops.base import FastFilter

# Below this many characters, counting n-grams in Python beats numpy's fixed costs.
_NUMPY_MIN_CHARS = 512


class CharacterRepetition(FastFilter):
    name = "character_repetition_filter"
    stat = "char_rep_ratio"

    def __init__(self, op: Any) -> None:
        super().__init__(op)
        self.n: int = op.n

    def _values(self, texts: list[str]) -> list[Any]:
        return [self._ratio(text) for text in texts]

    def _ratio(self, text: str) -> float:
        n = self.n
        windows = len(text) - n + 1
        if windows <= 0:
            return 0.0
        counts = _ngram_counts(text, n) if len(text) >= _NUMPY_MIN_CHARS else None
        if counts is None:
            values = list(Counter(text[i : i + n] for i in range(windows)).values())
            distinct = len(values)
            repeated = sorted((v for v in values if v != 1), reverse=True)
        else:
            distinct = len(counts)
            repeated = sorted(counts[counts != 1].tolist(), reverse=True)
        # Data-Juicer sorts all counts and takes the largest ``top``; ``top`` is at most the
        # number of repeated n-grams, so the repeated ones alone give the same sum. The total
        # of all counts is the number of windows.
        top = min(int(np.sqrt(distinct)), len(repeated))
        return sum(repeated[:top]) / windows


def _ngram_counts(text: str, n: int) -> np.ndarray | None:
    """How often each distinct character n-gram of ``text`` occurs, in no given order, or None
    where an n-gram needs more than two 64-bit numbers (then the caller counts in Python).

    Each window is the number its characters' dense codes write in base ``base`` (the number
    of distinct characters): exact, so equal windows give equal numbers and different windows
    different ones. Where that number needs more than 64 bits, windows are grouped by their
    first character, so that within a group the rest of the number fits.
    """
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    windows = len(points) - n + 1
    codes, base = _dense_codes(points)
    tail = base ** (n - 1)
    if tail * base <= 1 << 64:
        return _run_lengths([_polynomial(codes, 0, n, base, windows)])
    if tail < 1 << 64:
        per_group = (1 << 64) // tail
        keys = _polynomial(codes, 1, n, base, windows)
        lead = codes[:windows]
        group = lead // np.uint64(per_group)
        keys += (lead - group * np.uint64(per_group)) * np.uint64(tail)
        if int(group.max()) < 1 << 16:
            group = group.astype(np.uint16)  # numpy sorts 16-bit keys stably by radix
        return _run_lengths([group, keys])
    return None


def _polynomial(codes: np.ndarray, first: int, stop: int, base: int, windows: int) -> np.ndarray:
    """Codes ``first..stop-1`` of every window as one number in base ``base`` (the caller
    checks that it fits 64 bits)."""
    keys = np.zeros(windows, dtype=np.uint64)
    step = np.uint64(base)
    for offset in range(first, stop):
        keys *= step
        keys += codes[offset : offset + windows]
    return keys


def _run_lengths(parts: list[np.ndarray]) -> np.ndarray:
    """How often each distinct key occurs, a key being the tuple of ``parts`` at one index.

    Only equality matters, so 64-bit parts are sorted as int64 (faster than uint64 in numpy).
    Two parts: a small group number first, sorted stably, then the second part within each
    group.
    """
    parts = [p.view(np.int64) if p.dtype == np.uint64 else p for p in parts]
    if len(parts) == 1:
        ordered = [np.sort(parts[0])]
    else:
        order = np.argsort(parts[0], kind="stable")
        ordered = [parts[0][order], parts[1][order]]
        edges = np.flatnonzero(ordered[0][1:] != ordered[0][:-1]) + 1
        for start, stop in zip([0, *edges.tolist()], [*edges.tolist(), len(order)], strict=True):
            ordered[1][start:stop].sort()
    size = len(ordered[0])
    starts = np.zeros(size, dtype=bool)
    starts[:1] = True
    for part in ordered:
        starts[1:] |= part[1:] != part[:-1]
    return np.diff(np.append(np.flatnonzero(starts), size))


def _dense_codes(points: np.ndarray) -> tuple[np.ndarray, int]:
    """Each code point's rank among the text's distinct code points, and how many there are."""
    top = int(points.max())
    if top < 1 << 16:
        present = np.bincount(points, minlength=top + 1) > 0
        ranks = np.cumsum(present, dtype=np.uint64) - np.uint64(1)
        return ranks[points], int(ranks[-1]) + 1
    alphabet = np.unique(points)
    return np.searchsorted(alphabet, points).astype(np.uint64), len(alphabet)


_UNICODE_SIZE = 0x110000


def _code_points(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The batch's code points, end to end (lone surrogates included), and where each text
    starts and ends in them (``bounds[i]:bounds[i + 1]``)."""
    bounds = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(text) for text in texts], out=bounds[1:])
    raw = "".join(texts).encode("utf-32-le", "surrogatepass")
    return np.frombuffer(raw, dtype=np.uint32), bounds


def _per_text(positions: np.ndarray, bounds: np.ndarray) -> list[int]:
    """How many of the (sorted) ``positions`` fall in each text."""
    return np.diff(np.searchsorted(positions, bounds)).tolist()


def _membership(chars: str) -> np.ndarray:
    table = np.zeros(_UNICODE_SIZE, dtype=bool)
    table[[ord(c) for c in chars]] = True
    return table


class _AlnumTable:
    """``str.isalnum`` of every code point below ``size``, grown on demand (the whole of
    Unicode takes a noticeable fraction of a second; most batches stay below U+0800)."""

    def __init__(self) -> None:
        self.table = np.zeros(0, dtype=bool)

    def upto(self, top: int) -> np.ndarray:
        if top >= len(self.table):
            import re

            size = min(_UNICODE_SIZE, max(256, 1 << top.bit_length()))
            table = np.zeros(size, dtype=bool)
            table[: len(self.table)] = self.table
            chunk = "".join(map(chr, range(len(self.table), size)))
            # sre's \w is str.isalnum() or "_" (tests check the table against isalnum)
            alnum = re.sub(r"[\W_]+", "", chunk).encode("utf-32-le", "surrogatepass")
            table[np.frombuffer(alnum, dtype=np.uint32)] = True
            self.table = table
        return self.table


_ALNUM = _AlnumTable()


def _ratios(counts: list[int], texts: list[str]) -> list[float]:
    # Python ints divided as Data-Juicer divides them: the same float.
    return [
        count / len(text) if len(text) != 0 else 0.0
        for count, text in zip(counts, texts, strict=True)
    ]


class Alphanumeric(FastFilter):
    name = "alphanumeric_filter"
    stat = "alnum_ratio"

    def _values(self, texts: list[str]) -> list[Any]:
        points, bounds = _code_points(texts)
        if len(points) == 0:
            return [0.0] * len(texts)
        table = _ALNUM.upto(int(points.max()))
        return _ratios(_per_text(np.flatnonzero(table[points]), bounds), texts)


class SpecialCharacters(FastFilter):
    name = "special_characters_filter"
    stat = "special_char_ratio"

    def __init__(self, op: Any, special: str) -> None:
        super().__init__(op)
        self.table = _membership(special)

    def _values(self, texts: list[str]) -> list[Any]:
        points, bounds = _code_points(texts)
        return _ratios(_per_text(np.flatnonzero(self.table[points]), bounds), texts)


class WordsNum(FastFilter):
    """Data-Juicer splits on ``" "``, ``"\\n"`` and ``"\\t"``, strips each word of the special
    characters and counts the words left non-empty: the words holding a character that is
    not special. Counted here as the first such character of each word."""

    name = "words_num_filter"
    stat = "num_words"

    def __init__(self, op: Any, special: str) -> None:
        super().__init__(op)
        self.table = _membership(special)

    def _values(self, texts: list[str]) -> list[Any]:
        points, bounds = _code_points(texts)
        if len(points) == 0:
            return [0] * len(texts)
        # word numbers: +1 after every separator and at the start of every text
        breaks = (points == 32) | (points == 10) | (points == 9)
        breaks[bounds[:-1][bounds[:-1] < len(points)]] = True
        word = np.cumsum(breaks, dtype=np.int32 if len(points) < 1 << 31 else np.int64)
        # separators are special characters too, so these are all inside words
        plain = np.flatnonzero(~self.table[points])
        words_of_plain = word[plain]
        first = np.ones(len(plain), dtype=bool)
        np.not_equal(words_of_plain[1:], words_of_plain[:-1], out=first[1:])
        return _per_text(plain[first], bounds)


class TextLength(FastFilter):
    name = "text_length_filter"
    stat = "text_len"

    def _values(self, texts: list[str]) -> list[Any]:
        return [len(text) for text in texts]


class AverageLineLength(FastFilter):
    name = "average_line_length_filter"
    stat = "avg_line_length"

    def _values(self, texts: list[str]) -> list[Any]:
        out: list[Any] = []
        for text in texts:
            lines = len(text.splitlines())
            out.append(len(text) / lines if lines != 0 else 0.0)
        return out


class MaximumLineLength(FastFilter):
    name = "maximum_line_length_filter"
    stat = "max_line_length"

    def _values(self, texts: list[str]) -> list[Any]:
        return [max(map(len, text.splitlines()), default=0) for text in texts]
