"""Generated writer ids (issue 24): every store writes its own file, an empty one goes at close,
and one process never opens one writer file twice.

Real LMDB files in ``tmp_path`` and on fsspec's in-process ``memory://`` file system. Stores of
one process share its host name and pid, so two of them stand for two runs in one scheduler
process and for two containers with equal host names and pids alike.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import fsspec
import lmdb
import pytest

from curator_dask.resumability.inspect import inspect_checkpoint
from curator_dask.resumability.store import METADATA_DIRNAME, CompletionStore, read_completed


def names(ckpt: Path) -> list[str]:
    return sorted(os.listdir(ckpt / METADATA_DIRNAME))


def nemo_union(ckpt: Path) -> set[str]:
    """The union as NeMo Curator 1.4's ``ResumabilityActor._load_completed`` reads it: every
    ``*.mdb`` of the folder by glob, opened read-only without a lock, names never parsed."""
    done: set[str] = set()
    for mdb in sorted((ckpt / METADATA_DIRNAME).glob("*.mdb")):
        env = lmdb.open(str(mdb), subdir=False, readonly=True, lock=False, max_dbs=1)
        try:
            db = env.open_db(b"completed_sources")
            with env.begin() as txn, txn.cursor(db=db) as cur:
                done |= {k.decode() for k, _ in cur}
        finally:
            env.close()
    return done


def test_two_open_stores_of_one_process_write_two_files(tmp_path: Path) -> None:
    first = CompletionStore(str(tmp_path))
    second = CompletionStore(str(tmp_path))
    try:
        assert first.writer_id != second.writer_id
        assert first.remote_path != second.remote_path
        first.add(["a", "shared"])
        second.add(["b", "shared"])
    finally:
        first.close()
        second.close()
    assert names(tmp_path) == sorted([f"{first.writer_id}.mdb", f"{second.writer_id}.mdb"])
    assert read_completed(first.remote_path) == {"a", "shared"}
    assert read_completed(second.remote_path) == {"b", "shared"}
    assert nemo_union(tmp_path) == {"a", "b", "shared"}
    later = CompletionStore(str(tmp_path))  # one after the other: a third file, the union
    try:
        assert later.writer_id not in (first.writer_id, second.writer_id)
        assert later.load_union() == {"a", "b", "shared"} and later.unreadable == []
    finally:
        later.close()
    assert len(names(tmp_path)) == 2  # the third completed nothing: its file is gone


def test_a_generated_store_that_completes_nothing_leaves_no_file(tmp_path: Path) -> None:
    idle = CompletionStore(str(tmp_path))
    assert os.path.exists(idle.remote_path)  # open: the file exists, as NeMo's does
    idle.close()
    withdrawn = CompletionStore(str(tmp_path))
    withdrawn.add(["x"])
    withdrawn.remove(["x"])
    withdrawn.close()
    assert names(tmp_path) == []
    explicit = CompletionStore(str(tmp_path), writer_id="host-1")  # may be reopened: kept
    explicit.close()
    assert names(tmp_path) == ["host-1.mdb"]
    assert read_completed(str(tmp_path / METADATA_DIRNAME / "host-1.mdb")) == set()


def test_a_staged_generated_store_leaves_no_empty_snapshot(mem_ckpt: str, tmp_path: Path) -> None:
    fs = fsspec.filesystem("memory")
    idle = CompletionStore(mem_ckpt)
    idle.close()
    withdrawn = CompletionStore(mem_ckpt, publish_interval=3600)
    withdrawn.add(["x"])
    assert withdrawn.publish() is True and fs.exists(withdrawn.remote_path)
    withdrawn.remove(["x"])
    withdrawn.close()
    kept = CompletionStore(mem_ckpt)
    kept.add(["y"])
    kept.close()
    meta_dir = kept.meta_dir
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(meta_dir, detail=False)) == [
        f"{kept.writer_id}.mdb"]


def test_one_writer_file_is_never_opened_twice_in_one_process(tmp_path: Path) -> None:
    store = CompletionStore(str(tmp_path), writer_id="host-7")
    try:
        expected = str(tmp_path / METADATA_DIRNAME / "host-7.mdb")
        with pytest.raises(ValueError, match="already open in this process") as info:
            CompletionStore(str(tmp_path), writer_id="host-7")
        assert expected in str(info.value) and "pass another writer_id" in str(info.value)
        with pytest.raises(ValueError, match="already open in this process"):
            CompletionStore(f"file://{tmp_path}/", writer_id="host-7")  # the same file
        store.add(["a"])
    finally:
        store.close()
    again = CompletionStore(str(tmp_path), writer_id="host-7")  # closed: may be reopened
    try:
        assert again.own_completed() == {"a"}
    finally:
        again.close()


def test_a_file_removed_while_the_union_is_read_is_no_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """FAKE listing (the store's and ``checkpoint inspect``'s): another run's close removing
    its empty file between a listing and its read is a race no test can time, so the listing
    names a file that is gone."""
    kept = CompletionStore(str(tmp_path))
    kept.add(["a"])
    kept.close()
    gone = str(tmp_path / METADATA_DIRNAME / "host-1-0a1b2c3d.mdb")
    store = CompletionStore(str(tmp_path))
    real = store.writer_files()
    monkeypatch.setattr(store, "writer_files", lambda: sorted([*real, gone]))
    try:
        with caplog.at_level(logging.WARNING, logger="curator_dask.resumability.store"):
            assert store.load_union() == {"a"}
        assert store.unreadable == [] and caplog.records == []
    finally:
        store.close()
    from curator_dask.resumability import inspect

    real_sizes = inspect.writer_file_sizes
    monkeypatch.setattr(inspect, "writer_file_sizes",
                        lambda fs, meta: dict(sorted({**real_sizes(fs, meta), gone: 0}.items())))
    report = inspect_checkpoint(str(tmp_path))
    assert [os.path.basename(w.path) for w in report.writers] == [f"{kept.writer_id}.mdb"]
    assert report.completed == ["a"] and report.damaged == []
