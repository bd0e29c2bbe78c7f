"""Checkpoint interchange with NeMo Curator 1.4 (docs/design/contract.md §4): files written with
plain
``lmdb`` in NeMo's layout are honoured, and this package's files read back with NeMo's exact
reader flags and union logic. Real LMDB files in ``tmp_path``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

import lmdb
import pytest

from curator_dask.resumability.store import METADATA_DIRNAME, CompletionStore

STORE_LOGGER = "curator_dask.resumability.store"


def nemo_write(path: Path, ids: Iterable[str]) -> None:
    """A writer file exactly as NeMo Curator 1.4's actor opens and writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), subdir=False, lock=False, max_dbs=1, map_size=1 << 30,
                    metasync=False, sync=True, readahead=False)
    db = env.open_db(b"completed_sources")
    with env.begin(write=True) as txn:
        for sid in ids:
            txn.put(sid.encode(), b"1", db=db, overwrite=True)
    env.close()


def nemo_open(path: Path) -> lmdb.Environment:
    """NeMo Curator 1.4's exact reader flags."""
    return lmdb.open(str(path), subdir=False, readonly=True, lock=False, max_dbs=1)


def nemo_named_db(path: Path) -> dict[bytes, bytes]:
    env = nemo_open(path)
    try:
        db = env.open_db(b"completed_sources")
        with env.begin() as txn, txn.cursor(db=db) as cur:
            return {bytes(k): bytes(v) for k, v in cur}
    finally:
        env.close()


def nemo_main_db_keys(path: Path) -> list[bytes]:
    env = nemo_open(path)
    try:
        with env.begin() as txn, txn.cursor() as cur:
            return [bytes(k) for k, _ in cur]
    finally:
        env.close()


def nemo_union(meta_dir: Path, own: Path | None = None) -> tuple[set[str], list[str]]:
    """NeMo's ``_load_completed`` for the other writers' files (docs/design/contract.md §4): sorted
    glob, own
    file excluded, unreadable files skipped with the warning, a missing named db is empty."""
    completed: set[str] = set()
    warnings: list[str] = []
    for mdb in sorted(meta_dir.glob("*.mdb")):
        if own is not None and mdb == own:
            continue
        try:
            env = nemo_open(mdb)
        except lmdb.Error as e:
            warnings.append(f"resumability: skipping unreadable checkpoint {mdb}: {e}")
            continue
        try:
            try:
                db = env.open_db(b"completed_sources")
            except lmdb.Error:
                continue
            with env.begin() as txn, txn.cursor(db=db) as cur:
                completed |= {k.decode() for k, _ in cur}
        finally:
            env.close()
    return completed, warnings


def meta(ckpt: Path) -> Path:
    return ckpt / METADATA_DIRNAME


class TestNemoFilesAreHonoured:
    def test_load_union_reads_nemo_file(self, tmp_path: Path) -> None:
        ids = ["5ca81c9e2d3b", "663c66c4fc54", "0", "ü"]
        nemo_write(meta(tmp_path) / "vm-24644.mdb", ids)
        store = CompletionStore(str(tmp_path), writer_id="dask-1")
        try:
            assert store.load_union() == set(ids)
            assert store.own_completed() == set()
            assert store.unreadable == []
        finally:
            store.close()

    def test_recycled_pid_appends_to_nemo_file(self, tmp_path: Path) -> None:
        path = meta(tmp_path) / "vm-24644.mdb"
        nemo_write(path, ["a"])
        store = CompletionStore(str(tmp_path), writer_id="vm-24644")
        assert store.own_completed() == {"a"}
        store.add(["b"])
        store.close()
        assert nemo_named_db(path) == {b"a": b"1", b"b": b"1"}
        assert sorted(os.listdir(meta(tmp_path))) == ["vm-24644.mdb"]

    def test_nemo_file_without_named_db_is_empty(self, tmp_path: Path) -> None:
        path = meta(tmp_path) / "main-only.mdb"
        path.parent.mkdir(parents=True)
        env = lmdb.open(str(path), subdir=False, lock=False, max_dbs=1, map_size=1 << 20)
        with env.begin(write=True) as txn:
            txn.put(b"stray", b"1")
        env.close()
        assert nemo_union(meta(tmp_path)) == (set(), [])
        store = CompletionStore(str(tmp_path), writer_id="dask-1")
        try:
            assert store.load_union() == set()
            assert store.unreadable == []
        finally:
            store.close()


class TestOwnFilesReadByNemo:
    def test_named_db_and_single_main_key(self, tmp_path: Path) -> None:
        store = CompletionStore(str(tmp_path), writer_id="host-1")
        store.add(["ab12", "ü"])
        store.close()
        path = meta(tmp_path) / "host-1.mdb"
        assert nemo_named_db(path) == {b"ab12": b"1", "ü".encode(): b"1"}
        assert nemo_main_db_keys(path) == [b"completed_sources"]
        assert sorted(os.listdir(meta(tmp_path))) == ["host-1.mdb"]  # no -lock file

    def test_file_size_after_one_completion(self, tmp_path: Path) -> None:
        store = CompletionStore(str(tmp_path), writer_id="vm-24644")
        store.add(["5ca81c9e2d3b"])
        store.close()
        # Observed with NeMo Curator 1.4's writer (§4): 24,576 bytes after one completion.
        assert os.path.getsize(meta(tmp_path) / "vm-24644.mdb") == 24576

    def test_published_snapshot_reads_with_nemo_flags(self, tmp_path: Path) -> None:
        store = CompletionStore(str(tmp_path), writer_id="host-2", staged=True)
        store.add(["x", "y"])
        store.remove(["y"])
        store.close()
        path = meta(tmp_path) / "host-2.mdb"
        assert nemo_named_db(path) == {b"x": b"1"}
        assert nemo_main_db_keys(path) == [b"completed_sources"]

    def test_empty_writer_file_reads_as_empty(self, tmp_path: Path) -> None:
        CompletionStore(str(tmp_path), writer_id="idle").close()
        path = meta(tmp_path) / "idle.mdb"
        assert nemo_named_db(path) == {}
        assert nemo_main_db_keys(path) == [b"completed_sources"]


class TestUnion:
    def test_two_writers_union_both_ways(self, tmp_path: Path) -> None:
        nemo_write(meta(tmp_path) / "nemo-1.mdb", ["a", "shared"])
        dask_writer = CompletionStore(str(tmp_path), writer_id="dask-2")
        dask_writer.add(["b", "shared"])
        dask_writer.close()
        # NeMo's reader, as a third writer, sees both files.
        own = meta(tmp_path) / "nemo-3.mdb"
        nemo_write(own, [])
        assert nemo_union(meta(tmp_path), own) == ({"a", "b", "shared"}, [])
        store = CompletionStore(str(tmp_path), writer_id="dask-4")
        try:
            assert store.load_union() == {"a", "b", "shared"}
        finally:
            store.close()

    def test_garbage_skipped_with_the_same_warning(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        nemo_write(meta(tmp_path) / "nemo-1.mdb", ["a"])
        bad = meta(tmp_path) / "bad.mdb"
        bad.write_bytes(b"not an lmdb file" * 64)
        expected, nemo_warnings = nemo_union(meta(tmp_path))
        assert expected == {"a"}
        assert nemo_warnings == [
            f"resumability: skipping unreadable checkpoint {bad}: "
            f"{bad}: MDB_INVALID: File is not an LMDB file"
        ]
        store = CompletionStore(str(tmp_path), writer_id="dask-1")
        with caplog.at_level(logging.WARNING, logger=STORE_LOGGER):
            union = store.load_union()
        store.close()
        assert union == expected
        assert store.unreadable == [str(bad)]
        assert [r.getMessage() for r in caplog.records if r.name == STORE_LOGGER] == (
            nemo_warnings
        )
