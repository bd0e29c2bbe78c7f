"""Atomic file commits: a file appears under its final name complete, or not at all.

Local file systems: write a hidden temp file in the target directory, flush it (and fsync it
when asked: writers follow config ``io.fsync``, off by default), then ``os.replace`` it onto
the final name (atomic within one directory) and, with fsync, fsync the directory.
Object stores and other fsspec file systems: build the bytes in memory and upload them with one
``pipe_file`` (a single PUT is atomic on S3-compatible stores).

Local JSON files (``write_json_atomically``, ``..._if_absent``) follow NeMo Curator 1.4's
``utils/atomic_io.py`` byte for byte: ``json.dump`` with sorted keys, a trailing newline, mode
0600 (from ``tempfile``), always fsynced.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from fsspec.implementations.local import LocalFileSystem

TEMP_SUFFIX = ".tmp"


def temp_name(final_basename: str) -> str:
    """Hidden temp name next to ``final_basename``: ``.<name>.<host>-<pid>-<rand>.tmp``.

    Host and pid are in the name so that a tool can tell a live writer's temp file from one
    left by a killed process.
    """
    return f".{final_basename}.{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}"


_TEMP_RE = re.compile(r"^\..+\.(?P<host>[^.]+)-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user's counts: it can
    not be signalled, but it is there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _host() -> str:
    """This host's name as it appears in temp names (no dots)."""
    return socket.gethostname().replace(".", "-")


def _stale(directory: str, pattern: re.Pattern, gone: Any) -> list[str]:
    """Names in ``directory`` matching ``pattern`` whose ``host`` group is this host and for
    whose match ``gone(match)`` holds (the owner process is no longer there)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    host = _host()
    return [name for name in names
            if (match := pattern.match(name)) and match["host"] == host and gone(match)]


def remove_stale_temp_files(directory: str) -> list[str]:
    """Delete temp files in ``directory`` left by dead writer processes of this host.

    Only names made by :func:`temp_name` whose host is this host and whose pid is no longer
    alive are removed: a live writer here or any writer on another host is left alone.
    """
    removed = []
    for name in _stale(directory, _TEMP_RE, lambda m: not pid_alive(int(m["pid"]))):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name))
            removed.append(name)
    return removed


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (whole seconds since the epoch), or None if unknown."""
    try:
        import psutil

        return int(psutil.Process(pid).create_time())
    except Exception:  # noqa: BLE001 (no such process, or no psutil)
        return None


def owned_temp_dir(prefix: str) -> str:
    """``tempfile.mkdtemp`` named ``<prefix><host>-<pid>-<start>-<rand>``: this process's
    host, pid and start time are in the name so that :func:`remove_stale_temp_dirs` can tell
    a live owner's folder from one left by a killed process (or a recycled pid)."""
    return tempfile.mkdtemp(prefix=f"{prefix}{_host()}-{os.getpid()}-"
                                   f"{_start_time(os.getpid()) or 0}-")


def _owner_gone(pid: int, start: int) -> bool:
    """True when process ``pid`` is dead, or alive but started at another time than
    ``start`` (a recycled pid; ``start`` 0: unknown, so only a dead pid counts)."""
    if not pid_alive(pid):
        return True
    actual = _start_time(pid)
    return bool(start) and actual is not None and abs(actual - start) > 2


def remove_stale_temp_dirs(prefix: str, directory: str | None = None) -> list[str]:
    """Delete folders made by :func:`owned_temp_dir` with ``prefix`` in ``directory`` (default:
    the temp directory) whose owner, a process of this host, is gone; returns their names.

    A live owner's folder and any folder of another host are left alone.
    """
    directory = directory or tempfile.gettempdir()
    pattern = re.compile(re.escape(prefix) + r"(?P<host>.+)-(?P<pid>\d+)-(?P<start>\d+)-"
                         r"[a-z0-9_]{8}$")
    removed = _stale(directory, pattern,
                     lambda m: _owner_gone(int(m["pid"]), int(m["start"])))
    for name in removed:
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
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
        try:
            f = open(tmp, "wb")  # noqa: SIM115 (closed by the with below)
        except FileNotFoundError:  # a writer used without its prepare_output: make the folder
            os.makedirs(directory, exist_ok=True)
            f = open(tmp, "wb")  # noqa: SIM115
        with f:
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


def write_atomic(
    fs: Any, path: str, write: Callable[[BinaryIO], object], *, fsync: bool = True
) -> None:
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


def _write_temp_json(path: Path, payload: Any, **dump_kwargs: Any) -> Path:
    dump_kwargs.setdefault("sort_keys", True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(mode="w", encoding="utf-8", dir=path.parent,
                                     prefix=f".{path.name}.", suffix=".tmp", delete=False) as f:
        tmp = Path(f.name)
        try:
            json.dump(payload, f, **dump_kwargs)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        except BaseException:
            f.close()
            tmp.unlink(missing_ok=True)
            raise
    return tmp


def write_json_atomically(path: str | os.PathLike, payload: Any, **dump_kwargs: Any) -> Path:
    """Write ``payload`` + newline to ``path`` via a temp file and ``os.replace`` (mode 0600).

    Example:
        >>> import tempfile
        >>> path = write_json_atomically(Path(tempfile.mkdtemp(), "a.json"), {"b": 1, "a": 2},
        ...                              separators=(",", ":"))
        >>> path.read_text()
        '{"a":2,"b":1}\\n'
    """
    path = Path(path)
    tmp = _write_temp_json(path, payload, **dump_kwargs)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def write_json_atomically_if_absent(
    path: str | os.PathLike, payload: Any, **dump_kwargs: Any
) -> bool:
    """Create ``path`` with ``payload`` only if it does not exist (``os.link``); True if created."""
    path = Path(path)
    tmp = _write_temp_json(path, payload, **dump_kwargs)
    try:
        os.link(tmp, path)
    except FileExistsError:
        tmp.unlink(missing_ok=True)
        return False
    with contextlib.suppress(OSError):
        tmp.unlink()
    fsync_dir(path.parent)
    return True
