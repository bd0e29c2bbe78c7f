"""Atomic file commits: a file appears under its final name complete, or not at all.

Local file systems: write a hidden temp file in the target directory, flush it (and fsync it
when asked: writers follow config ``io.fsync``, off by default), then ``os.replace`` it onto
the final name (atomic within one directory) and, with fsync, fsync the directory.
Object stores and other fsspec file systems: build the bytes in memory and upload them with one
``pipe_file`` (a single PUT is atomic on S3-compatible stores).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import uuid
from collections.abc import Callable, Iterator
from typing import BinaryIO

from fsspec.implementations.local import LocalFileSystem

TEMP_SUFFIX = ".tmp"


def temp_name(final_basename: str) -> str:
    """Hidden temp name next to ``final_basename``: ``.<name>.<host>-<pid>-<rand>.tmp``.

    Host and pid are in the name so that a tool can tell a live writer's temp file from one
    left by a killed process.
    """
    host = socket.gethostname().replace(".", "-")
    return f".{final_basename}.{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}"


_TEMP_RE = re.compile(r"^\..+\.(?P<host>[^.]+)-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temp_files(directory: str) -> list[str]:
    """Delete temp files in ``directory`` left by dead writer processes of this host.

    Only names made by :func:`temp_name` whose host is this host and whose pid is no longer
    alive are removed: a live writer here or any writer on another host is left alone.
    """
    host = socket.gethostname().replace(".", "-")
    removed = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return removed
    for name in names:
        match = _TEMP_RE.match(name)
        if match and match["host"] == host and not _pid_alive(int(match["pid"])):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
                removed.append(name)
    return removed


def fsync_dir(path: str | os.PathLike) -> None:
    """Best-effort fsync of a directory, so a rename in it survives a crash."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _local_commit(path: str, *, fsync: bool) -> Iterator[BinaryIO]:
    directory, base = os.path.split(path)
    tmp = os.path.join(directory, temp_name(base))
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        fsync_dir(directory)


def write_atomic(fs, path: str, write: Callable[[BinaryIO], None], *, fsync: bool = True) -> None:
    """Call ``write(binary_file)`` and commit the result to ``path`` on ``fs`` atomically.

    ``path`` is in ``fs``'s own form (no protocol). Replaces an existing file.

    Example:
        >>> import fsspec
        >>> fs = fsspec.filesystem("memory")
        >>> write_atomic(fs, "/doc/x.txt", lambda f: f.write(b"hello"))
        >>> fs.cat_file("/doc/x.txt")
        b'hello'
    """
    if isinstance(fs, LocalFileSystem):
        with _local_commit(path, fsync=fsync) as f:
            write(f)
        return
    buf = io.BytesIO()
    write(buf)
    fs.pipe_file(path, buf.getvalue())
