"""One run at a time in a deduplication cache: a lock file with its owner's host and pid.

Two runs that share a ``cache_path`` remove and rewrite each other's phase folders (a run
redoes a phase from an empty folder): the result is silently wrong, or a phase fails on a
file the other run removed. So a run takes ``<cache>/.curator_dask/lock.json`` first:

- the file is created atomically (a local folder: a complete temp file hard-linked to the
  name, which fails if the name exists; another file system: written in one piece, then read
  back to check that this run's token is the one there);
- a lock held by a live process, or by a process on another host (whose liveness cannot be
  checked from here), refuses the run with :class:`CacheInUseError`, naming the owner and how
  to remove a lock left by a run that is gone;
- a lock of this host whose process is gone (killed) is taken over, with a warning;
- the lock is removed when the run ends, whatever ended it.

Example:
    >>> with CacheLock("memory://doc-lock-cache", {}, "exact_deduplication") as lock:
    ...     sorted(lock.owner)
    ['host', 'pid', 'started', 'token', 'workflow']
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import socket
import time
import uuid
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from curator_dask.errors import CuratorDaskError
from curator_dask.utils.atomic import pid_alive, temp_name, write_atomic

logger = logging.getLogger(__name__)

LOCK_FILE = posixpath.join(".curator_dask", "lock.json")


class CacheInUseError(RuntimeError, CuratorDaskError):
    """Another run holds the deduplication cache (its lock file names it)."""


class CacheLock:
    """The lock of one cache folder, held by this run between ``__enter__`` and ``__exit__``.

    Example:
        >>> lock = CacheLock("memory://doc-cache-2", {}, "fuzzy_deduplication")
        >>> lock.path
        '/doc-cache-2/.curator_dask/lock.json'
    """

    def __init__(self, cache: str, storage_options: dict[str, Any], workflow: str) -> None:
        self.cache = str(cache)
        self.fs, root = fsspec.core.url_to_fs(self.cache, **storage_options)
        self.path = posixpath.join(root, LOCK_FILE)
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(),
                      "token": uuid.uuid4().hex, "workflow": workflow,
                      "started": time.strftime("%Y-%m-%dT%H:%M:%S")}

    def __enter__(self) -> CacheLock:
        self.fs.makedirs(posixpath.dirname(self.path), exist_ok=True)
        for _ in range(3):  # a takeover races at most with other takers
            if self._create():
                return self
            held = self._read()
            if held is None:
                continue  # removed meanwhile: try again
            if not self._gone(held):
                raise CacheInUseError(self._refusal(held))
            logger.warning("%s: the lock of run %s (host %s, pid %s, started %s) is left by a "
                           "process that is gone; taking it over", self.cache,
                           held.get("workflow"), held.get("host"), held.get("pid"),
                           held.get("started"))
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self.path)
        msg = f"{self.cache}: could not take the lock {self.path}; run again"
        raise CacheInUseError(msg)

    def __exit__(self, *exc: object) -> None:
        held = self._read()
        if held is not None and held.get("token") == self.owner["token"]:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self.path)

    def _create(self) -> bool:
        """Create the lock file with this run as owner; ``False`` if it exists."""
        data = json.dumps(self.owner, sort_keys=True).encode()
        if isinstance(self.fs, LocalFileSystem):
            tmp = posixpath.join(posixpath.dirname(self.path), temp_name("lock.json"))
            with open(tmp, "wb") as f:
                f.write(data)
            try:
                os.link(tmp, self.path)  # atomic, and fails when the name exists
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            return True
        if self.fs.exists(self.path):
            return False
        write_atomic(self.fs, self.path, lambda f: f.write(data))
        held = self._read()
        return held is not None and held.get("token") == self.owner["token"]

    def _read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.fs.cat_file(self.path))
        except FileNotFoundError:
            return None
        except ValueError:  # written in one piece: unreadable means not ours to judge
            return {"host": "?", "pid": "?", "workflow": "unknown (unreadable lock file)"}

    @staticmethod
    def _gone(held: dict[str, Any]) -> bool:
        """Whether the owner is a process of this host that no longer exists."""
        if held.get("host") != socket.gethostname() or not isinstance(held.get("pid"), int):
            return False
        if held["pid"] == os.getpid():
            return False  # another run of this process (another thread)
        return not pid_alive(held["pid"])

    def _refusal(self, held: dict[str, Any]) -> str:
        return (f"the cache {self.cache} is in use by a {held.get('workflow')} run (host "
                f"{held.get('host')}, pid {held.get('pid')}, started {held.get('started')}): "
                "give this run another cache_path (--cache), or wait for that run to end; if "
                f"that run is gone, delete {self._shown()}")

    def _shown(self) -> str:
        local = isinstance(self.fs, LocalFileSystem)
        return self.path if local else self.fs.unstrip_protocol(self.path)


__all__ = ["LOCK_FILE", "CacheInUseError", "CacheLock"]
