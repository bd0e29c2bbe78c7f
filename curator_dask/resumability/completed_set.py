"""``CompletedSet``: the completed source ids of a checkpoint, 8 bytes per id.

See docs/design/architecture.md ("The completed set"). Source ids are mostly 12 lowercase hex
characters (a file group's hash, docs/design/contract.md §1.5) or bare decimal indexes (positional
ids, §1.3); custom ids can be any string without ``_``. An id of 1 to 12 characters that are all
``0-9a-f`` is stored *exactly* as the integer ``(len << 48) | int(id, 16)`` (the length keeps
``"0a"`` and ``"a"`` apart; no hashing, so no collisions) in a sorted ``numpy.uint64`` array;
any other id (upper case, longer, non-ASCII, ``"r"`` + a uuid) is kept in a Python set.

Changes during a run go to two small overlays, ``added`` and ``removed`` codes, folded into the
array once they reach 1/64 of it (or 4,096), so one change costs a set operation, the overlays
stay small, and the array is rebuilt a few dozen times as a run grows it. Membership of a batch
(``among``, ``mask``) is one vectorised search; of one id, an integer parse and a binary search
(about 1 µs).

The checkpoint reader process sends each writer file's keys packed
(``safe_read.pack_keys``; it does not import numpy); :func:`unpack_keys` turns them into codes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSet, Sequence

import numpy as np

MAX_HEX = 12  # longest id stored as an integer: 48 bits of value, the length above them
_VALUE_BITS = 48
_VALUE_MASK = (1 << _VALUE_BITS) - 1
_HEX = b"0123456789abcdef"  # as safe_read.HEX_DIGITS
_HEX_STR = _HEX.decode()
_EMPTY = np.empty(0, dtype=np.uint64)
_MERGE_MIN = 4096  # an overlay this large is always folded into the array
_MERGE_SHIFT = 6  # ... and one of more than 1/64 of the array


def encode(sid: str) -> int | None:
    """The integer code of ``sid``, or None when it is not 1-12 lowercase hex characters.

    Example:
        >>> hex(encode("1f82e4a37355")), encode("3") == (1 << 48) | 3, encode("03") != encode("3")
        ('0xc1f82e4a37355', True, True)
        >>> encode("ABC"), encode("1f82e4a37355a"), encode(""), encode("r0"), encode("0x1")
        (None, None, None, None, None)
    """
    if 0 < len(sid) <= MAX_HEX and not sid.strip(_HEX_STR):  # only 0-9a-f, so int() agrees
        return (len(sid) << _VALUE_BITS) | int(sid, 16)
    return None


def decode(code: int) -> str:
    """The id of an integer code.

    Example:
        >>> decode(encode("00a1")), decode(encode("1f82e4a37355"))
        ('00a1', '1f82e4a37355')
    """
    return f"{code & _VALUE_MASK:0{code >> _VALUE_BITS}x}"


def _codes_from_hex(length: int, data: bytes) -> np.ndarray:
    width = (length + 1) // 2
    rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, width)
    padded = np.zeros((len(rows), 8), dtype=np.uint8)
    padded[:, 8 - width:] = rows
    codes = padded.view(">u8").ravel().astype(np.uint64)
    codes |= np.uint64(length << _VALUE_BITS)
    return codes


def _codes_from_joined(joined: bytes, lengths: np.ndarray) -> np.ndarray:
    """Codes of ids given as one buffer and their lengths; 0 where an id is not encodable."""
    chars = np.frombuffer(joined, dtype=np.uint8)
    digit = np.full(256, 255, dtype=np.uint8)
    digit[np.frombuffer(_HEX, dtype=np.uint8)] = np.arange(16, dtype=np.uint8)
    values = digit[chars]
    ends = np.cumsum(lengths)
    starts = ends - lengths
    bad = np.concatenate(([0], np.cumsum(values == 255)))
    ok = (lengths > 0) & (lengths <= MAX_HEX) & (bad[ends] == bad[starts])
    codes = np.zeros(len(lengths), dtype=np.uint64)
    for j in range(MAX_HEX):  # the j-th digit from the right of every id that has one
        rows = np.nonzero(ok & (lengths > j))[0]
        if not len(rows):
            break
        codes[rows] |= values[ends[rows] - 1 - j].astype(np.uint64) << np.uint64(4 * j)
    codes[ok] |= lengths[ok].astype(np.uint64) << np.uint64(_VALUE_BITS)
    return codes


def unpack_keys(packed: tuple) -> tuple[np.ndarray, list[str]]:
    """``(codes, other ids)`` of ``safe_read.pack_keys``' result. Raises
    ``UnicodeDecodeError`` for a key that is not UTF-8 (a damaged file)."""
    if packed[0] == "hex":
        return _codes_from_hex(packed[1], packed[2]), []
    joined, lengths = packed[1], np.frombuffer(packed[2], dtype=np.uint32).astype(np.int64)
    codes = _codes_from_joined(joined, lengths)
    ends = np.cumsum(lengths)
    others = [joined[e - n:e].decode() for e, n in zip(ends[codes == 0].tolist(),
                                                       lengths[codes == 0].tolist(), strict=True)]
    return codes[codes != 0], others


def encode_many(ids: Sequence[str], chunk: int = 1 << 16) -> np.ndarray:
    """The codes of ``ids`` (``uint64``), 0 for an id that is not encodable; vectorised, in
    chunks of ``chunk`` ids (bounded temporaries).

    Example:
        >>> [decode(int(c)) if c else None for c in encode_many(["0a", "x", "3"])]
        ['0a', None, '3']
    """
    codes = np.zeros(len(ids), dtype=np.uint64)
    for at in range(0, len(ids), chunk):
        part = ids[at:at + chunk]
        try:
            joined = "".join(part).encode("ascii")
        except UnicodeEncodeError:
            codes[at:at + len(part)] = [encode(s) or 0 for s in part]
            continue
        lengths = np.fromiter(map(len, part), dtype=np.int64, count=len(part))
        codes[at:at + len(part)] = _codes_from_joined(joined, lengths)
    return codes


def _sorted_unique(codes: np.ndarray, *, own: bool = False) -> np.ndarray:
    """``codes`` sorted, without repeats (sorted in place when the caller hands them over)."""
    if own:
        codes.sort()
    else:
        codes = np.sort(codes)
    if len(codes) > 1:
        keep = np.empty(len(codes), dtype=bool)
        keep[0] = True
        np.not_equal(codes[1:], codes[:-1], out=keep[1:])
        if not keep.all():
            codes = codes[keep]
    return codes


def _in_sorted(base: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``codes`` that occur in the sorted ``base``, as a mask (queries sorted first: a search in
    order touches the array's memory in order)."""
    if not len(base) or not len(codes):
        return np.zeros(len(codes), dtype=bool)
    order = np.argsort(codes)
    at = np.minimum(base.searchsorted(codes[order]), len(base) - 1)
    found = np.empty(len(codes), dtype=bool)
    found[order] = base[at] == codes[order]
    return found


class CompletedSet(MutableSet):
    """A set of source ids, compact for hex and decimal ids (see the module docstring).

    Compares equal to a ``set`` with the same ids; iteration yields ``str`` in no useful order.

    Example:
        >>> done = CompletedSet(["1f82e4a37355", "3", "Custom-Id"])
        >>> "3" in done, "03" in done, len(done)
        (True, False, 3)
        >>> done.among(["3", "4", "Custom-Id"])
        ['3', 'Custom-Id']
        >>> done.discard("3"); done.add("4")
        >>> done == {"1f82e4a37355", "4", "Custom-Id"}
        True
    """

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._base = _EMPTY
        self._added: set[int] = set()
        self._removed: set[int] = set()
        self._others: set[str] = set()
        if isinstance(ids, CompletedSet):
            self._base, self._others = ids.codes(), set(ids._others)
            return
        ids = ids if isinstance(ids, Sequence) else list(ids)
        if ids:
            codes = encode_many(ids)
            self._others = {s for s, c in zip(ids, (codes == 0).tolist(), strict=True) if c}
            self._base = _sorted_unique(codes[codes != 0])

    @classmethod
    def from_codes(cls, codes: np.ndarray, others: Iterable[str] = (), *,
                   own: bool = False) -> CompletedSet:
        """A set of the ids of ``codes`` (any order, repeats allowed) and ``others``; with
        ``own``, ``codes`` is sorted in place and kept (no copy)."""
        done = cls()
        done._base = _sorted_unique(np.asarray(codes, dtype=np.uint64), own=own)
        done._others = set(others)
        return done

    @classmethod
    def union_all(cls, parts: Iterable[CompletedSet]) -> CompletedSet:
        """The union of ``parts`` in one sort (the writer files of a checkpoint). Give it a
        generator to hold each part only until it is copied: the peak is then twice the
        union's array, once."""
        codes, others = [], set()
        for part in parts:
            codes.append(part.codes())
            others |= part._others
            del part
        merged = np.concatenate(codes) if codes else _EMPTY.copy()
        del codes
        return cls.from_codes(merged, others, own=True)

    # -- reading -----------------------------------------------------------------------------
    def codes(self) -> np.ndarray:
        """The sorted codes of the hex ids (the overlays folded in first)."""
        self._merge()
        return self._base

    def _in_base(self, code: int) -> bool:
        base = self._base
        if not len(base):
            return False
        at = int(base.searchsorted(np.uint64(code)))  # a numpy scalar: a Python int copies
        return at < len(base) and int(base[at]) == code

    def __contains__(self, sid: object) -> bool:
        if not isinstance(sid, str):
            return False
        code = encode(sid)
        if code is None:
            return sid in self._others
        if code in self._added:
            return True
        return code not in self._removed and self._in_base(code)

    def mask(self, ids: Sequence[str]) -> np.ndarray:
        """Which of ``ids`` are in the set (a boolean array), in one vectorised search."""
        codes = encode_many(ids)
        found = _in_sorted(self._base, codes)
        if self._added or self._removed:
            added, removed = self._added, self._removed
            found = np.fromiter(
                ((c in added or (hit and c not in removed))
                 for c, hit in zip(codes.tolist(), found.tolist(), strict=True)),
                dtype=bool, count=len(codes))
        for i in np.nonzero(codes == 0)[0].tolist():
            found[i] = ids[i] in self._others
        return found

    def among(self, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` that are in the set, in order."""
        ids = ids if isinstance(ids, Sequence) else list(ids)
        return [s for s, hit in zip(ids, self.mask(ids).tolist(), strict=True) if hit]

    def __len__(self) -> int:
        return len(self._base) - len(self._removed) + len(self._added) + len(self._others)

    def __iter__(self) -> Iterator[str]:
        removed, added = self._removed, sorted(self._added)
        for at in range(0, len(self._base), 1 << 16):  # a chunk of Python ints at a time
            for code in self._base[at:at + (1 << 16)].tolist():
                if code not in removed:
                    yield decode(code)
        yield from map(decode, added)
        yield from list(self._others)

    def __repr__(self) -> str:
        if len(self) <= 8:
            return f"CompletedSet({sorted(self)!r})"
        return f"<CompletedSet of {len(self):,} ids>"

    def clear(self) -> None:
        self._base = _EMPTY
        self._added, self._removed, self._others = set(), set(), set()

    def nbytes(self) -> int:
        """Approximate memory held, in bytes (the array, and about 60 per overlay entry)."""
        return int(self._base.nbytes) + 60 * (len(self._added) + len(self._removed)
                                              + len(self._others))

    # -- changing ----------------------------------------------------------------------------
    def add(self, sid: str) -> None:
        code = encode(sid)
        if code is None:
            self._others.add(sid)
        elif code in self._removed:
            self._removed.discard(code)
        elif code not in self._added and not self._in_base(code):
            self._added.add(code)
            if len(self._added) > max(_MERGE_MIN, len(self._base) >> _MERGE_SHIFT):
                self._merge()

    def add_absent_many(self, ids: Sequence[str]) -> None:
        """Add ``ids``, which the caller knows are not in the set (encoded at once, no search).

        Example:
            >>> done = CompletedSet(["a"])
            >>> done.add_absent_many(["b", "Other"]); sorted(done)
            ['Other', 'a', 'b']
        """
        codes = encode_many(ids)
        if not codes.all():
            self._others.update(s for s, c in zip(ids, codes.tolist(), strict=True) if not c)
            codes = codes[codes != 0]
        if self._removed:
            back = self._removed.intersection(codes.tolist())
            self._removed -= back
            self._added.update(c for c in codes.tolist() if c not in back)
        else:
            self._added.update(codes.tolist())
        if len(self._added) > max(_MERGE_MIN, len(self._base) >> _MERGE_SHIFT):
            self._merge()

    def discard(self, sid: str) -> None:
        code = encode(sid)
        if code is None:
            self._others.discard(sid)
        elif code in self._added:
            self._added.discard(code)
        elif code not in self._removed and self._in_base(code):
            self._removed.add(code)
            if len(self._removed) > max(_MERGE_MIN, len(self._base) >> _MERGE_SHIFT):
                self._merge()

    def _merge(self) -> None:
        """Fold the overlays into the sorted array."""
        base = self._base
        if self._removed:
            gone = np.fromiter(self._removed, dtype=np.uint64, count=len(self._removed))
            base = np.delete(base, base.searchsorted(gone))  # each one is in the array
            self._removed = set()
        if self._added:
            new = np.sort(np.fromiter(self._added, dtype=np.uint64, count=len(self._added)))
            base = np.insert(base, base.searchsorted(new), new)
            self._added = set()
        self._base = base
