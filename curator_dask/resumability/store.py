"""``CompletionStore``: completed source ids in NeMo Curator 1.4's LMDB layout.

See docs/design/contract.md §4.

One writer file per store (per run: each run's completion plugin opens one store),
``<checkpoint>/.nemo_curator_metadata/<host>-<pid>-<token>.mdb`` with a fresh 8-hex token, so
two runs in one scheduler process, or two hosts of the same name with the same pid, never share
a file (docs/design/contract.md §4.1); named database ``completed_sources``, key = source id
(UTF-8), value ``b"1"``. NeMo Curator reads every ``*.mdb`` there and never parses a name. At
start the store reads the union of every ``*.mdb`` in that directory, read in child processes
(``safe_read.SafeReader``; two for many files) so that a damaged file cannot kill this one, into
a compact ``CompletedSet``; an unreadable or damaged file is skipped with a warning. A store
with a generated name that completed nothing removes its file at close. With an explicit
``writer_id`` naming an existing file (NeMo Curator's recycled pid), a damaged one is moved
aside before the writer opens it.

LMDB memory-maps its file and needs a local POSIX file system. For object stores (``s3://``,
``memory://``, ...) and network file systems (NFS, Lustre, GPFS, ...; detected from the mount
table) the writer keeps its file on local disk and *publishes* a compact snapshot to the shared
path every ``publish_interval`` seconds while dirty and at close, by one upload (object stores)
or a temp file + rename (network file systems). Completions newer than the last snapshot are
lost if the process dies: that is the durability window, and those sources are replayed.

The writer's memory stays flat however many ids its file holds. An LMDB environment maps the
whole file, and every page a transaction walks stays in the process's RSS until the
environment is closed (py-lmdb has no call to unmap them); without a write map, LMDB also
keeps each transaction's dirty-page buffers for reuse until then. Source ids are hashes, so a
commit of a few thousand of them walks most leaf pages of the file: at 10^6 ids the whole
file (about 60 MiB) was resident in the driver (the embedded scheduler runs the plugin) and
each commit mapped it again. So a store commits at most ``KEYS_PER_COMMIT`` keys a
transaction and closes and reopens its environment after each one, with the same flags:
at most one commit's pages are mapped at a time (``benchmarks/RESULTS.md``, "scale-memory
with file groups and a checkpoint").
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import fsspec
import lmdb

from curator_dask.resumability.completed_set import CompletedSet
from curator_dask.resumability.layout import METADATA_DIRNAME
from curator_dask.resumability.safe_read import DB_NAME as DB_NAME
from curator_dask.resumability.safe_read import MAP_SIZE as MAP_SIZE
from curator_dask.resumability.safe_read import SafeReader, pack_keys, probe_writer_file, unpacked
from curator_dask.resumability.safe_read import open_writer_env as open_writer_env
from curator_dask.resumability.safe_read import read_completed as read_completed
from curator_dask.resumability.writer_id import claim, release
from curator_dask.resumability.writer_id import default_writer_id as default_writer_id
from curator_dask.utils.atomic import owned_temp_dir, remove_stale_temp_dirs, write_atomic
from curator_dask.utils.files import is_remote_url

logger = logging.getLogger(__name__)

STAGING_PREFIX = "curator-dask-ckpt-"  # a staged writer file's local folder
UNION_PREFIX = "curator-dask-union-"  # other writers' files, downloaded to be read
PARALLEL_READ_FILES = 16  # from this many other writer files on, two reader processes
KEYS_PER_COMMIT = 1000  # keys a transaction at most (module docstring: flat memory)

NETWORK_FS_TYPES = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "smbfs", "beegfs", "cephfs", "ceph",
    "glusterfs", "fuse.glusterfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs",
    "9p", "afs", "panfs", "wekafs", "fuse.weka",
})


def mount_fs_type(path: str, mounts_file: str = "/proc/mounts") -> str | None:
    """The file-system type of the mount that holds ``path`` (longest mount-point prefix)."""
    path = os.path.realpath(path)
    best, best_type = "", None
    try:
        with open(mounts_file, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount_point = parts[1].replace("\\040", " ")
        prefix = mount_point.rstrip("/") + "/"
        if (path == mount_point or path.startswith(prefix) or mount_point == "/") and len(
            mount_point
        ) >= len(best):
            best, best_type = mount_point, parts[2]
    return best_type


def needs_staging(checkpoint_url: str, mounts_file: str = "/proc/mounts") -> bool:
    """True when LMDB cannot live at ``checkpoint_url`` itself (object store or network FS)."""
    if is_remote_url(checkpoint_url):
        return True
    local = checkpoint_url[len("file://"):] if checkpoint_url.startswith("file://") else (
        checkpoint_url)
    existing = os.path.abspath(local)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    fs_type = mount_fs_type(existing, mounts_file)
    return fs_type is not None and fs_type.lower() in NETWORK_FS_TYPES


def writer_file_sizes(fs: Any, meta_dir: str) -> dict[str, int]:
    """``{path: size}`` of the ``*.mdb`` files directly in ``meta_dir``, sorted by path (listed,
    not globbed: the folder name may hold glob characters such as ``[``)."""
    try:
        entries = fs.ls(meta_dir, detail=True)
    except FileNotFoundError:
        return {}
    return {
        e["name"]: int(e.get("size") or 0)
        for e in sorted(entries, key=lambda e: e["name"])
        if e.get("type") != "directory" and e["name"].rstrip("/").endswith(".mdb")
    }


def list_writer_files(fs: Any, meta_dir: str) -> list[str]:
    """The ``*.mdb`` files directly in ``meta_dir``, sorted."""
    return list(writer_file_sizes(fs, meta_dir))


def reader_count(files: int) -> int:
    """Reader processes for ``files`` writer files: two when there are many and two CPUs (each
    parses what it reads, so a large checkpoint loads in about half the time), else one."""
    return 2 if files >= PARALLEL_READ_FILES and (os.cpu_count() or 1) > 1 else 1


def read_writer_files(
    fs: Any, paths: list[str], *, remote: bool
) -> Iterator[tuple[str, CompletedSet | None, BaseException | None]]:
    """``(shown path, completed ids or None, error or None)`` for each writer file, in order.

    Every file is read in a child process (docs/design/contract.md §4.3; two take turns when
    there are many files), so a damaged file yields ``safe_read.ReaderCrashedError`` instead of
    killing this process. Remote files are downloaded to a temporary folder first (LMDB needs a
    local file), a few ahead of each reader.
    """
    download_dir = owned_temp_dir(UNION_PREFIX) if remote else None

    def local_files(share: list[str]) -> Iterator[str | BaseException]:
        for path in share:
            if download_dir is None:
                yield path
                continue
            local = os.path.join(download_dir, os.path.basename(path))
            try:
                fs.get_file(path, local)
            except OSError as exc:
                yield exc
            else:
                yield local

    n = reader_count(len(paths))
    try:
        with contextlib.ExitStack() as stack:
            readers = [stack.enter_context(SafeReader()) for _ in range(n)]
            outcomes = [r.read_all(local_files(paths[i::n])) for i, r in enumerate(readers)]
            for i, path in enumerate(paths):
                ids, exc = next(outcomes[i % n])
                yield (fs.unstrip_protocol(path) if remote else path), ids, exc
    finally:
        if download_dir is not None:
            shutil.rmtree(download_dir, ignore_errors=True)


def _remove_stale_staging() -> None:
    """Remove the local staging and download folders that killed processes of this host left
    in the temp directory (a live process's folders are left alone)."""
    removed = [*remove_stale_temp_dirs(STAGING_PREFIX), *remove_stale_temp_dirs(UNION_PREFIX)]
    if removed:
        logger.info("resumability: removed %d local checkpoint folders of killed processes in "
                    "%s", len(removed), tempfile.gettempdir())


class CompletionStore:
    """This process's writer file plus the union of every writer's completions.

    Example:
        >>> import tempfile
        >>> store = CompletionStore(tempfile.mkdtemp(), writer_id="doc-1")
        >>> store.add(["abc123"])
        >>> store.load_union()
        CompletedSet(['abc123'])
        >>> store.close()
    """

    def __init__(
        self,
        checkpoint_url: str,
        *,
        writer_id: str | None = None,
        storage_options: dict | None = None,
        staged: bool | None = None,
        publish_interval: float = 5.0,
    ) -> None:
        self.checkpoint_url = checkpoint_url.rstrip("/")
        # A generated id names a file nobody else opens or will reopen; an explicit one may
        # name an earlier writer's file, which is then reopened (NeMo Curator's recycled pid).
        self.generated_id = not writer_id
        self.writer_id = writer_id or default_writer_id()
        if "/" in self.writer_id or self.writer_id.startswith("."):
            msg = f"writer_id must be a plain file name, got {self.writer_id!r}"
            raise ValueError(msg)
        self.fs, root = fsspec.core.url_to_fs(self.checkpoint_url, **(storage_options or {}))
        self.meta_dir = self.fs.sep.join([root.rstrip(self.fs.sep), METADATA_DIRNAME])
        self.remote_path = self.fs.sep.join([self.meta_dir, f"{self.writer_id}.mdb"])
        self.env: lmdb.Environment | None = None
        self._claimed = claim(self._claim_key())
        try:
            self._open(staged, publish_interval)
        except BaseException:
            release(self._claimed)
            raise

    def _claim_key(self) -> str:
        """The process-wide name of this store's writer file."""
        if self._is_remote():
            return self.fs.unstrip_protocol(self.remote_path)
        return os.path.realpath(self.remote_path)

    def _open(self, staged: bool | None, publish_interval: float) -> None:
        """Create the metadata directory, stage the file if needed, and open the writer."""
        self.staged = needs_staging(self.checkpoint_url) if staged is None else staged
        self.publish_interval = publish_interval
        self._lock = threading.Lock()
        self._dirty = False
        self._last_publish = time.monotonic()
        self.fs.makedirs(self.meta_dir, exist_ok=True)
        self._local_dir: str | None = None  # staged: the temporary folder of the local file
        if self.staged:
            _remove_stale_staging()
            self._local_dir = owned_temp_dir(STAGING_PREFIX)
            self.local_path = os.path.join(self._local_dir, f"{self.writer_id}.mdb")
            if not self.generated_id and self.fs.exists(self.remote_path):
                # An explicit id resumes its own file, as NeMo Curator's recycled pid does.
                self.fs.get_file(self.remote_path, self.local_path)
        else:
            self.local_path = self.remote_path
        self.set_aside = self._set_aside_if_damaged()
        self.env = open_writer_env(self.local_path)
        self.db = self.env.open_db(DB_NAME)
        self.unreadable: list[str] = []

    def _set_aside_if_damaged(self) -> str | None:
        """Check a file of this writer's own name left by an earlier process before reopening
        it for writing (docs/design/contract.md §4.2): a damaged one would kill this process.
        Only an explicit ``writer_id`` used again (like NeMo Curator's recycled pid) finds one;
        a generated id's fresh token does not. A damaged one is moved to
        ``<name>.mdb.damaged`` (staged: dropped, and replaced at the next publish) and its
        sources run again. Returns the shown path of such a file."""
        path = self.local_path
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            return None  # none, or a fresh file LMDB initialises
        error = probe_writer_file(path)
        if error is None:
            return None
        shown = self.fs.unstrip_protocol(self.remote_path) if self._is_remote() else (
            self.remote_path)
        if self.staged:
            os.unlink(path)
            self._dirty = True  # the next publish replaces the damaged file with a sound one
            where = "dropped; the next publish replaces it"
        else:
            os.replace(path, f"{path}.damaged")
            where = f"moved to {path}.damaged"
        logger.warning("resumability: own writer file %s is damaged (%s); %s: %s", shown,
                       type(error).__name__, where, error)
        return shown

    def _opened(self) -> lmdb.Environment:
        """The writer file's environment, open from construction until ``close``."""
        if self.env is None:
            msg = (f"the checkpoint writer file {self.remote_path} is closed: make a new "
                   "CompletionStore to write to it again")
            raise ValueError(msg)
        return self.env

    # -- reading ----------------------------------------------------------------------------
    def own_completed(self) -> CompletedSet:
        """The ids in this writer's own file (read here: it was checked before it was opened)."""
        with self._lock, self._opened().begin() as txn, txn.cursor(db=self.db) as cur:
            return unpacked(pack_keys(list(cur.iternext(keys=True, values=False))))

    def writer_files(self) -> list[str]:
        """Every writer file in the metadata directory (file-system paths), sorted."""
        return list_writer_files(self.fs, self.meta_dir)

    def load_union(self) -> CompletedSet:
        """Own completions plus those of every other ``*.mdb`` (unreadable files skipped), as
        a compact ``CompletedSet`` (8 bytes per hex or decimal id)."""
        self.unreadable = [self.set_aside] if self.set_aside else []
        return CompletedSet.union_all(self._union_parts())

    def _union_parts(self) -> Iterator[CompletedSet]:
        """Each readable file's ids, one after the other (none kept here: the union is made
        as they come)."""
        yield self.own_completed()
        others = [p for p in self.writer_files() if p != self.remote_path]
        outcomes = read_writer_files(self.fs, others, remote=self._is_remote())
        for path, (shown, ids, exc) in zip(others, outcomes, strict=True):
            if ids is None and not self.fs.exists(path):
                # removed since it was listed: an empty file its run dropped at close
                logger.debug("resumability: writer file %s went away while read", shown)
            elif ids is None:
                logger.warning("resumability: skipping unreadable checkpoint %s: %s", shown, exc)
                self.unreadable.append(shown)
            else:
                yield ids

    def _is_remote(self) -> bool:
        return is_remote_url(self.checkpoint_url)

    # -- writing ----------------------------------------------------------------------------
    def update(self, add: Iterable[str] = (), remove: Iterable[str] = ()) -> None:
        """Forget ``remove``, then record ``add`` (sorted: sorted keys write fastest), in
        transactions of at most ``KEYS_PER_COMMIT`` keys, the file unmapped after each one
        (module docstring). Each id is recorded or forgotten on its own, so a crash between
        two transactions loses no more than a crash before the first: the ids not committed
        stay pending and their sources run again.

        Only this writer's own file changes; other writers' files are never touched.
        """
        keys = ([(sid.encode(), False) for sid in remove]
                + [(key, True) for key in sorted({sid.encode() for sid in add})])
        for start in range(0, len(keys), KEYS_PER_COMMIT):
            with self._lock:
                with self._opened().begin(write=True, db=self.db) as txn:
                    for key, put in keys[start:start + KEYS_PER_COMMIT]:
                        if put:
                            txn.put(key, b"1", db=self.db, overwrite=True)
                        else:
                            txn.delete(key, db=self.db)
                    self._dirty = True
                self._unmap()

    def _unmap(self) -> None:
        """Close the environment and open it again with the same flags: the pages the last
        transaction mapped leave the process's RSS (called with ``_lock`` held)."""
        env, self.env = self._opened(), None
        env.close()
        self.env = open_writer_env(self.local_path)
        self.db = self.env.open_db(DB_NAME)

    def add(self, source_ids: Iterable[str]) -> None:
        """Record completed sources."""
        self.update(add=source_ids)

    def remove(self, source_ids: Iterable[str]) -> None:
        """Forget sources in this writer's own file."""
        self.update(remove=source_ids)

    def publish(self, *, force: bool = False) -> bool:
        """Upload a snapshot of the writer file when staged and dirty; True if one was made."""
        # staged: _local_dir is set (named here for the type checker)
        if not self.staged or self.env is None or self._local_dir is None:
            return False
        with self._lock:
            if not (self._dirty or force):
                return False
            snapshot = os.path.join(self._local_dir, f".{self.writer_id}.snapshot.mdb")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(snapshot)
            self.env.copy(snapshot, compact=True)
            self._dirty = False
        try:
            if self._is_remote():
                self.fs.put_file(snapshot, self.remote_path)  # one PUT: atomic
            else:  # a network file system: temp file, fsync, rename
                with open(snapshot, "rb") as src:
                    write_atomic(self.fs, self.remote_path,
                                 lambda f: shutil.copyfileobj(src, f))
        except BaseException:
            self._dirty = True
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(snapshot)
        self._last_publish = time.monotonic()
        return True

    def maybe_publish(self) -> bool:
        """Publish when staged, dirty, and ``publish_interval`` has passed since the last one."""
        if time.monotonic() - self._last_publish < self.publish_interval:
            return False
        return self.publish()

    def _is_empty(self) -> bool:
        with self._lock, self._opened().begin() as txn:
            return txn.stat(self.db)["entries"] == 0

    def close(self) -> None:
        """Publish (when staged) and close; idempotent. A store with a generated id that holds
        no completions removes its file instead (nobody reopens it, and it holds nothing)."""
        if self.env is None:
            return
        drop = self.generated_id and self._is_empty()
        try:
            if not drop:
                self.publish()
        finally:
            env, self.env = self.env, None
            env.close()
            try:
                if drop:
                    self._remove_own_file()
            finally:
                if self._local_dir is not None:
                    shutil.rmtree(self._local_dir, ignore_errors=True)
                release(self._claimed)

    def _remove_own_file(self) -> None:
        """Remove this store's empty writer file (staged: a snapshot published before its
        completions were withdrawn)."""
        try:
            if self.staged:
                if self.fs.exists(self.remote_path):
                    self.fs.rm_file(self.remote_path)
            else:
                os.unlink(self.local_path)
        except FileNotFoundError:
            pass
        except OSError as exc:  # an empty file left behind is harmless
            logger.warning("resumability: could not remove the empty writer file %s: %s",
                           self.remote_path, exc)
