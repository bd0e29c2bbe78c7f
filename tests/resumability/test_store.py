"""``CompletionStore`` and its helpers (docs/design/contract.md §4): writer files, union reads,
unreadable
files, mount-table detection and the staged mode for object stores and network file systems.

Real LMDB files in ``tmp_path`` and on fsspec's in-process ``memory://`` file system.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import uuid
from pathlib import Path

import fsspec
import lmdb
import pytest

from curator_dask.resumability.safe_read import SafeReader
from curator_dask.resumability.store import (
    KEYS_PER_COMMIT,
    METADATA_DIRNAME,
    CompletionStore,
    default_writer_id,
    mount_fs_type,
    needs_staging,
    open_writer_env,
    read_completed,
)

STORE_LOGGER = "curator_dask.resumability.store"
WRITER_FLAGS = {
    "subdir": False, "readonly": False, "lock": False, "metasync": False, "sync": True,
    "readahead": False,
}


def meta(ckpt: Path) -> Path:
    return ckpt / METADATA_DIRNAME


def listing(ckpt: Path) -> list[str]:
    return sorted(os.listdir(meta(ckpt)))


def complete(ckpt: Path | str, writer_id: str, ids: list[str], **kwargs: object) -> None:
    store = CompletionStore(str(ckpt), writer_id=writer_id, **kwargs)
    store.add(ids)
    store.close()


def union_of(ckpt: Path | str, writer_id: str = "reader", **kwargs: object) -> set[str]:
    store = CompletionStore(str(ckpt), writer_id=writer_id, **kwargs)
    try:
        return store.load_union()
    finally:
        store.close()


def _mapped_rss(path: str) -> int:
    """Bytes of ``path``'s mappings resident in this process (Linux's ``/proc/self/smaps``)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = fields[-1] == path
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def skip_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records
        if r.name == STORE_LOGGER and r.levelno == logging.WARNING
        and r.getMessage().startswith("resumability: skipping unreadable checkpoint ")
    ]


# --------------------------------------------------------------------------------------------
# Layout and flags
# --------------------------------------------------------------------------------------------


class TestLayout:
    def test_writer_file_name_and_nothing_else(self, tmp_path: Path) -> None:
        ckpt = tmp_path / "a" / "b"
        store = CompletionStore(str(ckpt), writer_id="vm-24644")
        expected = str(meta(ckpt) / "vm-24644.mdb")
        assert store.staged is False
        assert store.remote_path == expected
        assert store.local_path == expected
        assert store.writer_files() == [expected]
        store.add(["abc"])
        store.close()
        # One single file (subdir=False), no "-lock" file (lock=False).
        assert listing(ckpt) == ["vm-24644.mdb"]
        assert read_completed(expected) == {"abc"}

    def test_open_flags(self, tmp_path: Path) -> None:
        store = CompletionStore(str(tmp_path), writer_id="w")
        try:
            flags = store.env.flags()
            assert {k: flags[k] for k in WRITER_FLAGS} == WRITER_FLAGS
            assert store.env.info()["map_size"] == 1 << 30
            with pytest.raises(lmdb.DbsFullError):  # max_dbs=1: only completed_sources
                store.env.open_db(b"another")
        finally:
            store.close()

    def test_open_writer_env_flags(self, tmp_path: Path) -> None:
        env = open_writer_env(str(tmp_path / "x.mdb"))
        try:
            flags = env.flags()
            assert {k: flags[k] for k in WRITER_FLAGS} == WRITER_FLAGS
            assert env.info()["map_size"] == 1 << 30
            env.open_db(b"completed_sources")
            with pytest.raises(lmdb.DbsFullError):
                env.open_db(b"another")
        finally:
            env.close()
        assert os.listdir(tmp_path) == ["x.mdb"]

    def test_default_writer_id(self, tmp_path: Path) -> None:
        """NeMo Curator's ``<host>-<pid>``, then 8 hex characters fresh for every store."""
        prefix = re.escape(f"{socket.gethostname()}-{os.getpid()}-")
        assert re.fullmatch(rf"{prefix}[0-9a-f]{{8}}", default_writer_id())
        assert default_writer_id("0a1b2c3d").endswith("-0a1b2c3d")
        store = CompletionStore(str(tmp_path))
        store.add(["a"])
        store.close()
        assert re.fullmatch(rf"{prefix}[0-9a-f]{{8}}", store.writer_id)
        assert listing(tmp_path) == [f"{store.writer_id}.mdb"]

    @pytest.mark.parametrize("bad", ["a/b", ".hidden", "../up"])
    def test_writer_id_must_be_a_plain_name(self, tmp_path: Path, bad: str) -> None:
        with pytest.raises(ValueError, match="writer_id must be a plain file name"):
            CompletionStore(str(tmp_path), writer_id=bad)
        assert not meta(tmp_path).exists()

    def test_file_url_and_trailing_slash(self, tmp_path: Path) -> None:
        store = CompletionStore(f"file://{tmp_path}/", writer_id="w")
        store.close()
        assert store.remote_path == str(meta(tmp_path) / "w.mdb")
        assert store.staged is False


# --------------------------------------------------------------------------------------------
# Writing, reading, the union
# --------------------------------------------------------------------------------------------


class TestWriteRead:
    def test_add_remove_own(self, tmp_path: Path) -> None:
        store = CompletionStore(str(tmp_path), writer_id="w")
        store.add([])
        assert store.own_completed() == set()
        store.add(["b", "a", "a", "ü"])
        assert store.own_completed() == {"a", "b", "ü"}
        store.remove(["a", "never-added"])
        store.remove([])
        assert store.own_completed() == {"b", "ü"}
        assert store.load_union() == {"b", "ü"}
        store.close()
        store.close()  # idempotent
        assert read_completed(str(meta(tmp_path) / "w.mdb")) == {"b", "ü"}

    def test_updates_past_one_commit(self, tmp_path: Path) -> None:
        """More ids than one transaction takes (``KEYS_PER_COMMIT``): every one recorded, the
        removals of an update before its additions, as in one transaction (the three ids in
        both are recorded)."""
        ids = [f"{i:012x}" for i in range(2 * KEYS_PER_COMMIT + 7)]
        store = CompletionStore(str(tmp_path), writer_id="w")
        store.update(add=ids[:KEYS_PER_COMMIT + 3])
        assert store.own_completed() == set(ids[:KEYS_PER_COMMIT + 3])
        store.update(add=ids[KEYS_PER_COMMIT:], remove=ids[:KEYS_PER_COMMIT + 3])
        assert store.own_completed() == set(ids[KEYS_PER_COMMIT:])
        store.close()
        assert read_completed(str(meta(tmp_path) / "w.mdb")) == set(ids[KEYS_PER_COMMIT:])

    @pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux's smaps")
    def test_the_file_is_not_left_mapped(self, tmp_path: Path) -> None:
        """After an update the writer file's pages are no longer in the process's RSS
        (module docstring of store.py: flat memory): 200,000 hash-like ids make a file of
        megabytes, every page of which a single environment kept resident."""
        import hashlib

        ids = [hashlib.sha256(str(i).encode()).hexdigest()[:12] for i in range(200_000)]
        store = CompletionStore(str(tmp_path), writer_id="w")
        path = str(meta(tmp_path) / "w.mdb")
        try:
            for start in range(0, len(ids), 20_000):
                store.update(add=ids[start:start + 20_000])
            size = os.path.getsize(path)
            assert size > 4 * 2**20
            assert _mapped_rss(path) <= 64 * 1024, (_mapped_rss(path), size)
        finally:
            store.close()
        # what the unmapping prevents: an environment that walked the file keeps it resident
        env = open_writer_env(path)
        try:
            db = env.open_db(b"completed_sources")
            with env.begin(db=db) as txn:
                assert sum(1 for _ in txn.cursor()) == len(ids)
            assert _mapped_rss(path) > size // 2
        finally:
            env.close()

    def test_values_are_b1(self, tmp_path: Path) -> None:
        complete(tmp_path, "w", ["x", "y"])
        env = lmdb.open(str(meta(tmp_path) / "w.mdb"), subdir=False, readonly=True, lock=False,
                        max_dbs=1)
        db = env.open_db(b"completed_sources")
        with env.begin() as txn:
            assert list(txn.cursor(db=db)) == [(b"x", b"1"), (b"y", b"1")]
        env.close()

    def test_pending_only_writes_nothing(self, tmp_path: Path) -> None:
        complete(tmp_path, "w", [])
        assert read_completed(str(meta(tmp_path) / "w.mdb")) == set()

    def test_reopen_same_writer_appends(self, tmp_path: Path) -> None:
        complete(tmp_path, "host-7", ["a"])
        store = CompletionStore(str(tmp_path), writer_id="host-7")
        assert store.own_completed() == {"a"}
        store.add(["b"])
        store.close()
        assert listing(tmp_path) == ["host-7.mdb"]
        assert read_completed(str(meta(tmp_path) / "host-7.mdb")) == {"a", "b"}

    def test_three_writers_each_see_the_union(self, tmp_path: Path) -> None:
        a = CompletionStore(str(tmp_path), writer_id="hostA-1")
        assert a.load_union() == set()
        a.add(["0"])
        a.close()
        b = CompletionStore(str(tmp_path), writer_id="hostB-2")
        assert b.load_union() == {"0"}
        b.add(["1"])
        b.close()
        c = CompletionStore(str(tmp_path), writer_id="hostC-3")
        assert c.load_union() == {"0", "1"}
        assert c.own_completed() == set()
        assert c.writer_files() == [
            str(meta(tmp_path) / n) for n in ("hostA-1.mdb", "hostB-2.mdb", "hostC-3.mdb")
        ]
        c.close()
        assert listing(tmp_path) == ["hostA-1.mdb", "hostB-2.mdb", "hostC-3.mdb"]
        assert read_completed(str(meta(tmp_path) / "hostA-1.mdb")) == {"0"}
        assert read_completed(str(meta(tmp_path) / "hostB-2.mdb")) == {"1"}

    def test_writer_that_finishes_nothing_leaves_others_readable(self, tmp_path: Path) -> None:
        complete(tmp_path, "A", ["s"])
        complete(tmp_path, "B", [])
        assert union_of(tmp_path, "reader") == {"s"}
        assert read_completed(str(meta(tmp_path) / "A.mdb")) == {"s"}

    def test_remove_touches_only_own_file(self, tmp_path: Path) -> None:
        complete(tmp_path, "A", ["x", "y"])
        b = CompletionStore(str(tmp_path), writer_id="B")
        b.add(["x"])
        b.remove(["x", "y"])
        assert b.own_completed() == set()
        # Another writer's completion survives and reappears in the union.
        assert b.load_union() == {"x", "y"}
        b.close()
        assert read_completed(str(meta(tmp_path) / "A.mdb")) == {"x", "y"}
        assert read_completed(str(meta(tmp_path) / "B.mdb")) == set()

    def test_union_ignores_other_names_and_subdirectories(self, tmp_path: Path) -> None:
        complete(tmp_path, "A", ["a"])
        complete(tmp_path / METADATA_DIRNAME / "nested", "N", ["nested"])
        (meta(tmp_path) / "notes.txt").write_text("x")
        (meta(tmp_path) / "A.mdb.123.tmp").write_bytes((meta(tmp_path) / "A.mdb").read_bytes())
        os.replace(meta(tmp_path) / "nested" / METADATA_DIRNAME / "N.mdb",
                   meta(tmp_path) / "nested" / "N.mdb")
        store = CompletionStore(str(tmp_path), writer_id="R")
        assert store.load_union() == {"a"}
        assert store.unreadable == []
        assert store.writer_files() == [str(meta(tmp_path) / "A.mdb"),
                                        str(meta(tmp_path) / "R.mdb")]
        store.close()

    def test_file_without_named_db_contributes_nothing(self, tmp_path: Path) -> None:
        meta(tmp_path).mkdir()
        env = lmdb.open(str(meta(tmp_path) / "main-only.mdb"), subdir=False, lock=False,
                        max_dbs=1, map_size=1 << 20)
        with env.begin(write=True) as txn:
            txn.put(b"k", b"1")
        env.close()
        complete(tmp_path, "A", ["a"])
        store = CompletionStore(str(tmp_path), writer_id="R")
        assert store.load_union() == {"a"}
        assert store.unreadable == []
        store.close()

    @pytest.mark.parametrize("content", [b"garbage" * 100, b"", os.urandom(9000)],
                             ids=["text", "empty", "random"])
    def test_unreadable_file_skipped_with_warning(
        self, tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
    ) -> None:
        complete(tmp_path, "A", ["a"])
        complete(tmp_path, "C", ["c"])
        bad = meta(tmp_path) / "bad.mdb"
        bad.write_bytes(content)
        store = CompletionStore(str(tmp_path), writer_id="R")
        store.add(["own"])
        with caplog.at_level(logging.WARNING, logger=STORE_LOGGER):
            assert store.load_union() == {"a", "c", "own"}
        assert store.unreadable == [str(bad)]
        try:
            read_completed(str(bad))
        except lmdb.Error as exc:
            error = str(exc)
        assert skip_warnings(caplog) == [
            f"resumability: skipping unreadable checkpoint {bad}: {error}"
        ]
        bad.unlink()
        assert store.load_union() == {"a", "c", "own"}
        assert store.unreadable == []  # recomputed on every read
        store.close()

    def test_garbage_is_mdb_invalid(self, tmp_path: Path) -> None:
        bad = tmp_path / "bad.mdb"
        bad.write_bytes(b"garbage" * 100)
        with pytest.raises(lmdb.InvalidError, match="MDB_INVALID"):
            read_completed(str(bad))

    def test_checkpoint_dir_with_glob_characters(self, tmp_path: Path) -> None:
        """NeMo reads the union with ``Path(dir).glob("*.mdb")``: the directory part is taken
        literally, so a checkpoint directory named like ``run[1]`` works there."""
        ckpt = tmp_path / "run[1]"
        complete(ckpt, "A", ["a"])
        store = CompletionStore(str(ckpt), writer_id="B")
        try:
            assert store.writer_files() == [str(meta(ckpt) / "A.mdb"), str(meta(ckpt) / "B.mdb")]
            assert store.load_union() == {"a"}
        finally:
            store.close()

    @pytest.mark.parametrize("others", [0, 1, 12])
    def test_one_reader_process_at_most(
        self, tmp_path: Path, others: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Other writers' files are read in one child process (none when there are none; a
        damaged file restarts it: tests/resumability/test_damaged_writers.py)."""
        starts: list[int] = []
        real_start = SafeReader._start
        monkeypatch.setattr(SafeReader, "_start",
                            lambda self: starts.append(1) or real_start(self))
        for i in range(others):
            complete(tmp_path, f"host-{i}", [f"id-{i}"])
        store = CompletionStore(str(tmp_path), writer_id="own")
        store.add(["mine"])
        assert store.load_union() == {"mine", *(f"id-{i}" for i in range(others))}
        store.close()
        assert len(starts) == min(others, 1)


# --------------------------------------------------------------------------------------------
# Mount table and staging decision (a fake mounts file is real parser input)
# --------------------------------------------------------------------------------------------

MOUNTS = (
    "rootfs / rootfs rw 0 0\n"
    "/dev/sda1 / ext4 rw,relatime 0 0\n"
    "10.0.0.1:/vol/home1 /home nfs rw,vers=3 0 0\n"
    "10.0.0.2@tcp:/fs /lustre/fsw lustre rw 0 0\n"
    "tmpfs /lustre/fsw/scratch tmpfs rw 0 0\n"
    "//srv/share /mnt/my\\040share cifs rw 0 0\n"
    "\n"
    "short line\n"
)


class TestMounts:
    @pytest.fixture
    def mounts(self, tmp_path: Path) -> str:
        path = tmp_path / "mounts"
        path.write_text(MOUNTS)
        return str(path)

    @pytest.mark.parametrize(
        ("path", "fs_type"),
        [
            ("/lustre/fsw/projects/run", "lustre"),
            ("/lustre/fsw", "lustre"),
            ("/lustre/fsw/scratch/ckpt", "tmpfs"),  # longest mount point wins
            ("/lustre/fswx/ckpt", "ext4"),  # not a path prefix
            ("/home", "nfs"),
            ("/home/me/ckpt", "nfs"),
            ("/homework/ckpt", "ext4"),
            ("/srv/data/checkpoints", "ext4"),  # a later mount on "/" overrides rootfs
            ("/mnt/my share/checkpoints", "cifs"),  # octal-escaped space
        ],
    )
    def test_mount_fs_type(self, mounts: str, path: str, fs_type: str) -> None:
        assert mount_fs_type(path, mounts_file=mounts) == fs_type

    def test_unreadable_mounts_file(self, tmp_path: Path) -> None:
        assert mount_fs_type("/anywhere", mounts_file=str(tmp_path / "missing")) is None
        assert needs_staging(str(tmp_path), mounts_file=str(tmp_path / "missing")) is False

    @pytest.mark.parametrize("url", ["memory://x/ckpt", "s3://bucket/ckpt", "gs://b/c"])
    def test_remote_urls_need_staging(self, tmp_path: Path, url: str) -> None:
        assert needs_staging(url, mounts_file=str(tmp_path / "missing")) is True

    @pytest.mark.parametrize(
        ("fs_type", "staged"),
        [("nfs4", True), ("NFS", True), ("lustre", True), ("gpfs", True),
         ("fuse.sshfs", True), ("ext4", False), ("xfs", False), ("tmpfs", False)],
    )
    def test_local_path_on_mount(self, tmp_path: Path, fs_type: str, staged: bool) -> None:
        ckpt = tmp_path / "ckpt"
        ckpt.mkdir()
        real = os.path.realpath(ckpt)
        mounts = tmp_path / "mounts"
        mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/export {real} {fs_type} rw 0 0\n")
        assert mount_fs_type(str(ckpt), mounts_file=str(mounts)) == fs_type
        # A not-yet-existing checkpoint is judged by its nearest existing ancestor.
        for url in (str(ckpt), str(ckpt / "new" / "deeper"), f"file://{ckpt}/new"):
            assert needs_staging(url, mounts_file=str(mounts)) is staged

    def test_local_mount_inside_network_mount(self, tmp_path: Path) -> None:
        real = os.path.realpath(tmp_path)
        mounts = tmp_path / "mounts"
        mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nsrv:/x {real} lustre rw 0 0\n"
                          f"tmpfs {real}/local tmpfs rw 0 0\n")
        (tmp_path / "local").mkdir()
        assert needs_staging(str(tmp_path / "shared"), mounts_file=str(mounts)) is True
        assert needs_staging(str(tmp_path / "local" / "c"), mounts_file=str(mounts)) is False


# --------------------------------------------------------------------------------------------
# Staged mode: a local directory with staged=True
# --------------------------------------------------------------------------------------------


class TestStagedLocal:
    def test_publish_makes_ids_visible(self, tmp_path: Path) -> None:
        store = CompletionStore(str(tmp_path), writer_id="w", staged=True, publish_interval=3600)
        assert store.staged is True
        assert store.remote_path == str(meta(tmp_path) / "w.mdb")
        assert store.local_path != store.remote_path
        assert os.path.basename(store.local_path) == "w.mdb"
        assert not os.path.exists(store.remote_path)
        store.add(["a", "b"])
        assert store.own_completed() == {"a", "b"}
        assert store.load_union() == {"a", "b"}
        # Not yet published: another reader does not see the ids.
        assert union_of(tmp_path, "reader") == set()
        assert store.publish() is True
        assert union_of(tmp_path, "reader") == {"a", "b"}
        assert read_completed(store.remote_path) == {"a", "b"}
        assert store.publish() is False  # clean
        assert store.publish(force=True) is True
        local_dir = os.path.dirname(store.local_path)
        store.close()
        assert not os.path.exists(local_dir)
        # No temp or snapshot file is left next to the published file.
        assert listing(tmp_path) == ["reader.mdb", "w.mdb"]

    def test_own_published_file_is_not_read_twice(self, tmp_path: Path) -> None:
        store = CompletionStore(str(tmp_path), writer_id="w", staged=True)
        store.add(["a"])
        store.publish()
        store.remove(["a"])
        # The union is the live local file plus *other* writers: the stale snapshot is ignored.
        assert store.load_union() == set()
        assert store.unreadable == []
        store.close()
        assert read_completed(str(meta(tmp_path) / "w.mdb")) == set()

    def test_maybe_publish_respects_interval(self, tmp_path: Path) -> None:
        slow = CompletionStore(str(tmp_path), writer_id="slow", staged=True,
                               publish_interval=3600)
        slow.add(["a"])
        assert slow.maybe_publish() is False
        assert not os.path.exists(slow.remote_path)
        fast = CompletionStore(str(tmp_path), writer_id="fast", staged=True, publish_interval=0)
        assert fast.maybe_publish() is False  # nothing to publish
        fast.add(["b"])
        assert fast.maybe_publish() is True
        assert read_completed(fast.remote_path) == {"b"}
        slow.close()  # close publishes what maybe_publish held back
        fast.close()
        assert union_of(tmp_path) == {"a", "b"}

    def test_close_publishes(self, tmp_path: Path) -> None:
        complete(tmp_path, "w", ["x"], staged=True, publish_interval=3600)
        assert listing(tmp_path) == ["w.mdb"]
        assert read_completed(str(meta(tmp_path) / "w.mdb")) == {"x"}

    def test_recycled_writer_id_resumes_its_published_file(self, tmp_path: Path) -> None:
        complete(tmp_path, "host-1", ["a"], staged=True)
        store = CompletionStore(str(tmp_path), writer_id="host-1", staged=True)
        assert store.own_completed() == {"a"}
        store.add(["b"])
        store.remove(["a"])
        store.close()
        assert read_completed(str(meta(tmp_path) / "host-1.mdb")) == {"b"}

    def test_non_staged_publish_is_noop(self, tmp_path: Path) -> None:
        store = CompletionStore(str(tmp_path), writer_id="w")
        store.add(["a"])
        assert store.publish() is False
        assert store.publish(force=True) is False
        assert store.maybe_publish() is False
        store.close()


# --------------------------------------------------------------------------------------------
# Staged mode on memory:// (an object store stand-in)
# --------------------------------------------------------------------------------------------


def mem_read(path: str, tmp_path: Path) -> set[str]:
    """Download a memory:// writer file and read it with NeMo's reader flags."""
    local = tmp_path / f"download-{uuid.uuid4().hex}.mdb"
    local.write_bytes(fsspec.filesystem("memory").cat_file(path))
    return read_completed(str(local))


class TestStagedMemory:
    def test_staged_by_default(self, mem_ckpt: str) -> None:
        store = CompletionStore(mem_ckpt, writer_id="w")
        try:
            assert store.staged is True
            assert store.remote_path.endswith(f"/ckpt/{METADATA_DIRNAME}/w.mdb")
            assert os.path.exists(store.local_path)
        finally:
            store.close()

    def test_publish_makes_ids_visible(self, mem_ckpt: str, tmp_path: Path) -> None:
        fs = fsspec.filesystem("memory")
        store = CompletionStore(mem_ckpt, writer_id="w", publish_interval=3600)
        store.add(["a", "b"])
        assert not fs.exists(store.remote_path)
        assert union_of(mem_ckpt, "reader") == set()
        assert store.publish() is True
        assert union_of(mem_ckpt, "reader") == {"a", "b"}
        assert mem_read(store.remote_path, tmp_path) == {"a", "b"}
        store.add(["c"])
        store.close()
        assert mem_read(store.remote_path, tmp_path) == {"a", "b", "c"}
        assert union_of(mem_ckpt, "other") == {"a", "b", "c"}
        names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(store.meta_dir, detail=False))
        # Readers that completed nothing publish nothing.
        assert names == ["w.mdb"]

    def test_recycled_writer_id_resumes(self, mem_ckpt: str, tmp_path: Path) -> None:
        complete(mem_ckpt, "host-9", ["a"])
        store = CompletionStore(mem_ckpt, writer_id="host-9")
        assert store.own_completed() == {"a"}
        assert store.load_union() == {"a"}
        store.add(["b"])
        store.close()
        assert mem_read(store.remote_path, tmp_path) == {"a", "b"}

    def test_three_writers_union(self, mem_ckpt: str) -> None:
        complete(mem_ckpt, "hostA-1", ["0"])
        complete(mem_ckpt, "hostB-2", ["1"])
        store = CompletionStore(mem_ckpt, writer_id="hostC-3")
        assert store.load_union() == {"0", "1"}
        assert [p.rsplit("/", 1)[-1] for p in store.writer_files()] == [
            "hostA-1.mdb", "hostB-2.mdb"]  # own file not published yet
        store.close()

    def test_garbage_skipped_with_warning(
        self, mem_ckpt: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        complete(mem_ckpt, "A", ["a"])
        store = CompletionStore(mem_ckpt, writer_id="R")
        store.fs.pipe_file(f"{store.meta_dir}/bad.mdb", b"garbage" * 100)
        with caplog.at_level(logging.WARNING, logger=STORE_LOGGER):
            assert store.load_union() == {"a"}
        store.close()
        assert len(store.unreadable) == 1
        shown = store.unreadable[0]
        assert shown.startswith("memory://")
        assert shown.endswith(f"/ckpt/{METADATA_DIRNAME}/bad.mdb")
        (message,) = skip_warnings(caplog)
        assert message.startswith(f"resumability: skipping unreadable checkpoint {shown}: ")
        assert "MDB_INVALID" in message
