"""The compact completed set and what feeds it (docs/design/architecture.md, "The completed
set"): exact for every kind of source id (docs/design/contract.md §1.3-§1.5), equal to a Python
set under any sequence of changes, the reader's packed keys, the union of many writer files read
by two reader processes, and the counter book dropping a source's state when it completes.

Pure code plus real LMDB files in ``tmp_path``: no Dask cluster.
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator_dask.resumability import completed_set as cs
from curator_dask.resumability.completed_set import (
    CompletedSet,
    decode,
    encode,
    encode_many,
    unpack_keys,
)
from curator_dask.resumability.counters import CounterBook
from curator_dask.resumability.safe_read import pack_keys
from curator_dask.resumability.store import METADATA_DIRNAME, CompletionStore, read_completed

# Ids that must all stay apart: hex of every length (leading zeros matter), decimal indexes,
# upper case, too long, empty, non-ASCII, NUL, a uuid id, letters past f, signs and spaces
# that int(x, 16) would accept.
TRICKY = ["a", "0a", "00a", "A", "0A", "abc", "ABC", "aBc", "1f82e4a37355", "1F82E4A37355",
          "1f82e4a373550", "000000000000", "0", "00", "3", "03", "10", "999999", "", "ü",
          "a\x00", "\x00a", "r" + "0" * 32, "g", "0x1", "+1", "-1", " 1", "1 ", "1_0", "٣",
          "ffffffffffff", "fffffffffffff"]


def sha_id(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()[:12]


def test_codes_are_exact_and_round_trip():
    codes = {s: encode(s) for s in TRICKY}
    encoded = {s: c for s, c in codes.items() if c is not None}
    assert len(set(encoded.values())) == len(encoded)  # no two ids share a code
    assert all(decode(c) == s for s, c in encoded.items())
    assert set(encoded) == {"a", "0a", "00a", "abc", "1f82e4a37355", "000000000000", "0", "00",
                            "3", "03", "10", "999999", "ffffffffffff"}
    vectorised = encode_many(TRICKY)
    assert [int(c) or None for c in vectorised] == [codes[s] for s in TRICKY]
    assert [int(c) or None for c in encode_many(TRICKY, chunk=3)] == [codes[s] for s in TRICKY]


def test_the_set_keeps_every_tricky_id_apart():
    for half in (TRICKY[::2], TRICKY[1::2]):
        done = CompletedSet(half)
        assert done == set(half) and len(done) == len(set(half))
        assert [s in done for s in TRICKY] == [s in half for s in TRICKY]
        assert done.mask(TRICKY).tolist() == [s in half for s in TRICKY]
        assert done.among(TRICKY) == [s for s in TRICKY if s in half]
        assert sorted(done) == sorted(set(half))


@pytest.fixture
def small_overlays(monkeypatch):
    """Fold the overlays into the array after a few changes, so the tests cross merges."""
    monkeypatch.setattr(cs, "_MERGE_MIN", 3)


ids = st.one_of(st.sampled_from(TRICKY), st.integers(0, 40).map(str),
                st.integers(0, 40).map(lambda i: f"{i:x}"), st.text(max_size=4))


@settings(max_examples=200, deadline=None)
@given(start=st.lists(ids, max_size=12),
       ops=st.lists(st.tuples(st.sampled_from(["add", "discard", "absent"]), ids), max_size=40))
def test_property_behaves_like_a_python_set(start, ops):
    cs._MERGE_MIN, saved = 3, cs._MERGE_MIN
    try:
        done, model = CompletedSet(start), set(start)
        for op, sid in ops:
            if op == "add":
                done.add(sid)
                model.add(sid)
            elif op == "discard":
                done.discard(sid)
                model.discard(sid)
            elif sid not in model:
                done.add_absent_many([sid])
                model.add(sid)
            assert len(done) == len(model)
        probe = [s for _, s in ops] + start + TRICKY
        assert done == model and set(done) == model
        assert done.mask(probe).tolist() == [s in model for s in probe]
        assert [s in done for s in probe] == [s in model for s in probe]
        assert CompletedSet(done) == model
    finally:
        cs._MERGE_MIN = saved


def test_many_additions_fold_into_one_sorted_array(small_overlays):
    done = CompletedSet(sha_id(i) for i in range(1000))
    done.add_absent_many([sha_id(i) for i in range(1000, 1500)])
    for i in range(1500, 2000):
        done.add(sha_id(i))
    for i in range(0, 2000, 7):
        done.discard(sha_id(i))
    expected = {sha_id(i) for i in range(2000) if i % 7}
    assert done == expected
    codes = done.codes()
    assert len(codes) == len(expected) and bool(np.all(codes[1:] > codes[:-1]))
    assert done.nbytes() == 8 * len(expected)  # 8 bytes an id, no overlay left


def test_packed_keys_round_trip():
    cases = [[b"0a", b"ff"], [b"abc", b"fff"], [b"1f82e4a37355"] * 2, [b"3", b"10", b"999"],
             [b"a", b"XYZ", "\u00fc".encode(), b"", b"0" * 13], [],
             [str(i).encode() for i in range(1200)]]
    for keys in cases:
        codes, others = unpack_keys(pack_keys(keys))
        got = [decode(int(c)) for c in codes] + others
        assert sorted(got) == sorted(k.decode() for k in keys)
    assert pack_keys([b"1f82e4a37355"])[0] == "hex"  # parsed by the reader process
    with pytest.raises(UnicodeDecodeError):  # a damaged key
        unpack_keys(pack_keys([b"ok", b"\xff\xfe"]))


def test_union_of_many_writer_files_read_by_two_processes(tmp_path):
    """20 files (two reader processes) with hex, decimal and other ids, overlapping."""
    from curator_dask.resumability.store import reader_count

    assert reader_count(20) == (2 if (__import__("os").cpu_count() or 1) > 1 else 1)
    expected: set[str] = set()
    for w in range(20):
        ids = [sha_id(w * 50 + i) for i in range(60)] + [str(w), f"Custom-{w}", "shared"]
        expected |= set(ids)
        store = CompletionStore(str(tmp_path), writer_id=f"host-{w}")
        store.add(ids)
        store.close()
    reader = CompletionStore(str(tmp_path), writer_id="reader-1")
    union = reader.load_union()
    reader.close()
    assert isinstance(union, CompletedSet) and union == expected and reader.unreadable == []
    meta = tmp_path / METADATA_DIRNAME
    assert read_completed(str(meta / "host-3.mdb")) == {
        *(sha_id(150 + i) for i in range(60)), "3", "Custom-3", "shared"}


def test_counter_book_drops_a_sources_state_when_it_completes(caplog):
    book = CounterBook()
    n = 10_000  # past RetiredDeltas.FOLD: retired entries in the array and the dict
    for start in range(0, n, 500):
        sids = [sha_id(i) for i in range(start, start + 500)]
        book.apply([(f"0_{s}", s, 1) for s in sids], opening=True)
        book.apply([(f"0_{s}_0", s, 1) for s in sids])  # fan-out into two: +2 - 1
        book.apply([(f"0_{s}_0_{k}", s, -1) for s in sids for k in (0, 1)])
    assert len(book.completed) == n
    assert book.pending == {} and book.entries == {} and book.applied == {}
    assert len(book.retired) == 4 * n and book.completed.nbytes() <= 8 * n + 60 * 4096
    with caplog.at_level(logging.WARNING, logger="curator_dask.resumability.counters"):
        retried = [(f"0_{sha_id(i)}_0_1", sha_id(i), -1) for i in range(0, n, 97)]
        assert book.apply(retried) == ([], [])  # a retried task after completion: ignored
        assert caplog.records == []
        late = sha_id(5)
        assert book.apply([(f"0_{late}_0_2", late, -1)]) == ([], [late])  # a new one: undone
    assert late not in book.completed and len(book.completed) == n - 1
    assert book.applied_delta(f"0_{late}_0") == 1


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.dictionaries(st.sampled_from([f"t{i}" for i in range(12)]),
                                        st.integers(-300, 300), max_size=5), max_size=12))
def test_property_retired_deltas_behave_like_a_dict(batches):
    """8 bytes an entry (the delta in the low bits, big ones aside), newest wins, across folds."""
    from curator_dask.resumability.counters import RetiredDeltas

    retired, model = RetiredDeltas(), {}
    retired.FOLD = 3
    for batch in batches:
        retired.put_many(batch.items())
        model.update(batch)
        assert len(retired) == len(model)
        assert {t: retired.get(t) for t in model} == model
    assert retired.get("never") is None
