"""Crash-proof reads of LMDB writer files: a child process reads them, file after file.

See docs/design/contract.md §4.3. LMDB memory-maps a file and trusts its page numbers, so a
truncated file or a scrambled page makes the reading process die of ``SIGBUS`` or ``SIGSEGV``
rather than raise. :class:`SafeReader` therefore reads writer files in a fresh ``python -c``
child (never a fork: the driver and the scheduler run threads), which streams each file's ids
back as one pickled frame while it already reads the next: packed (:func:`pack_keys`; 12-hex ids
as 6 bytes each, parsed by the child) and turned into a ``CompletedSet`` here. When the child
dies, the file it was reading is reported damaged (:class:`ReaderCrashedError`) and a new child
takes the rest, so the normal case costs one process start (``store.read_writer_files`` runs
two such readers side by side for many files). If no child can be started at all, files are
read in this process, as before, with a warning.

This module imports only the standard library and ``lmdb`` (``completed_set``, which imports
numpy, only in the parent, when it unpacks): the child imports it.
"""

from __future__ import annotations

import array
import contextlib
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING

import lmdb

from curator_dask.errors import CuratorDaskError

if TYPE_CHECKING:
    from curator_dask.resumability.completed_set import CompletedSet

logger = logging.getLogger(__name__)

DB_NAME = b"completed_sources"
MAP_SIZE = 1 << 30
WINDOW = 4  # requests in flight: the child reads the next file while the parent unpickles
_LEN = struct.Struct("<Q")
_READ, _PROBE = b"r", b"w"
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CHILD = ("import sys; sys.path.insert(0, {root!r}); "
          "from curator_dask.resumability.safe_read import serve; serve()")
HEX_DIGITS = b"0123456789abcdef"
MAX_HEX = 12  # as completed_set.MAX_HEX: longer ids are sent as they are
# The outcome of one file: its ids (a CompletedSet), or the error that made it unreadable.
Outcome = tuple["CompletedSet | None", BaseException | None]


class ReaderCrashedError(lmdb.Error, CuratorDaskError):
    """Reading a writer file killed the reader process: the file is damaged."""


def open_writer_env(path: str) -> lmdb.Environment:
    """Open a writer file with NeMo Curator's exact flags (docs/design/contract.md §4.2)."""
    return lmdb.open(path, subdir=False, lock=False, max_dbs=1, map_size=MAP_SIZE,
                     metasync=False, sync=True, readahead=False)


def _keys(path: str) -> list[bytes]:
    env = lmdb.open(path, subdir=False, readonly=True, lock=False, max_dbs=1)
    try:
        try:
            db = env.open_db(DB_NAME, create=False)
        except lmdb.NotFoundError:
            return []
        with env.begin() as txn, txn.cursor(db=db) as cur:
            return list(cur.iternext(keys=True, values=False))
    finally:
        env.close()


def pack_keys(keys: list[bytes]) -> tuple:
    """One file's keys as the reader process sends them: ``("hex", length, bytes.fromhex(...))``
    when every key is ``length`` (1-12) lowercase hex characters, the common case, parsed in the
    child so that two of them share the work; else ``("raw", joined keys, their lengths)``.
    ``completed_set.unpack_keys`` reads either.

    Example:
        >>> pack_keys([b"0a", b"ff"]), pack_keys([b"abc"])
        (('hex', 2, b'\\n\\xff'), ('hex', 3, b'\\n\\xbc'))
        >>> pack_keys([b"a", b"xyz"])[:2]
        ('raw', b'axyz')
    """
    joined = b"".join(keys)
    length = len(keys[0]) if keys else 0
    if (0 < length <= MAX_HEX and len(joined) == length * len(keys)
            and max(map(len, keys)) == length and not joined.translate(None, HEX_DIGITS)):
        pad = b"0" if length % 2 else b""  # an odd length gets a leading zero digit
        return "hex", length, bytes.fromhex((pad + pad.join(keys)).decode("ascii"))
    return "raw", joined, array.array("I", map(len, keys)).tobytes()


def _completed_list(path: str) -> list[str]:
    return [k.decode() for k in _keys(path)]


def read_completed(path: str) -> set[str]:
    """Completed ids in one ``.mdb`` file, opened as NeMo Curator's reader opens it, in this
    process (a damaged file can kill it: see :class:`SafeReader`).

    Raises ``lmdb.Error`` for an unreadable file. A file without the named database holds none.
    """
    return set(_completed_list(path))


def probe_writable(path: str) -> list[bytes]:
    """Read ``path``, then open it as its writer would and put one key in a transaction that is
    aborted, so the pages a write walks are touched too; the file is not changed. Returns the
    keys."""
    ids = _keys(path)
    env = open_writer_env(path)
    try:
        txn = env.begin(write=True)
        try:
            try:
                db = env.open_db(DB_NAME, txn=txn, create=False)
            except lmdb.NotFoundError:
                db = None
            txn.put(b"\0curator-dask-probe", b"1", db=db)
        finally:
            txn.abort()
    finally:
        env.close()
    return ids


def _send_frame(stream: IO[bytes], obj: tuple[str, object]) -> None:
    try:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 (an unpicklable error is still an error)
        data = pickle.dumps(("error", RuntimeError(f"{type(obj[1]).__name__}: {obj[1]} "
                                                   f"({exc})")))
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def _read_exact(stream: IO[bytes], n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def serve() -> None:
    """The child's loop: answer each request ``(mode, path)`` with ``("ok", ids)`` or
    ``("error", exception)`` until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray output goes to stderr, never into the stream
    inp = sys.stdin.buffer
    _send_frame(out, ("ready", os.getpid()))
    while (head := _read_exact(inp, _LEN.size)) is not None:
        request = _read_exact(inp, _LEN.unpack(head)[0]) or b""
        mode, path = request[:1], os.fsdecode(request[1:])
        try:
            keys = probe_writable(path) if mode == _PROBE else _keys(path)
            _send_frame(out, ("ok", pack_keys(keys)))
        except Exception as exc:  # noqa: BLE001 (sent to the parent, which decides)
            _send_frame(out, ("error", exc))


def _how_it_died(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def truncation_hint(path: str) -> str:
    """``" (truncated? ...)"`` when ``path`` is shorter than its newest meta page (64-bit
    LMDB 0.9 layout) says, else ``""``. Pure Python: safe on any file.

    Example:
        >>> truncation_hint("/nonexistent.mdb")
        ''
    """
    try:
        with open(path, "rb") as f:
            head = f.read(160)
            if len(head) < 152 or struct.unpack_from("<I", head, 16)[0] != 0xBEEFC0DE:
                return ""
            psize = struct.unpack_from("<I", head, 40)[0]
            metas = [head]
            if psize >= 160 and psize & (psize - 1) == 0:
                f.seek(psize)
                metas.append(f.read(160))
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return ""
    newest = max((m for m in metas if len(m) >= 152),
                 key=lambda m: struct.unpack_from("<Q", m, 144)[0])
    need = (struct.unpack_from("<Q", newest, 136)[0] + 1) * psize
    return f" (truncated? {size} bytes, its meta page records {need})" if size < need else ""


def unpacked(packed: tuple) -> CompletedSet:
    """The ``CompletedSet`` of one file's packed keys (``UnicodeDecodeError`` for a key that is
    not UTF-8: the file is damaged)."""
    from curator_dask.resumability.completed_set import CompletedSet, unpack_keys

    return CompletedSet.from_codes(*unpack_keys(packed))


def _read_here(mode: bytes, path: str) -> Outcome:
    try:
        return unpacked(pack_keys(probe_writable(path) if mode == _PROBE else _keys(path))), None
    except (lmdb.Error, OSError, UnicodeDecodeError) as exc:
        return None, exc


class SafeReader:
    """Reads writer files in a child process; a context manager (the child exits at the end).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "w.mdb")
        >>> env = open_writer_env(path)
        >>> with env.begin(write=True, db=env.open_db(DB_NAME)) as txn:
        ...     txn.put(b"abc", b"1")
        True
        >>> env.close()
        >>> with SafeReader() as reader:
        ...     list(reader.read_all([path, OSError("download failed")]))
        [(CompletedSet(['abc']), None), (None, OSError('download failed'))]
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._in_process = False
        self.starts = 0  # child processes started: one unless a file killed one

    def __enter__(self) -> SafeReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> int | None:
        """End the child (it exits when its input closes); its return code."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        with contextlib.suppress(OSError):  # dead already: a buffered request cannot flush
            if proc.stdin is not None:  # always: Popen(stdin=PIPE)
                proc.stdin.close()
        try:
            returncode = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            returncode = proc.wait()
        if proc.stdout is not None:  # always: Popen(stdout=PIPE)
            proc.stdout.close()
        return returncode

    def read_all(self, items: Iterable[str | BaseException], *,
                 probe: bool = False) -> Iterator[Outcome]:
        """``(ids, None)`` or ``(None, error)`` for each local path in ``items``, in order; an
        exception in ``items`` (e.g. a failed download) is passed through as its error.

        With ``probe``, each file is also opened for writing and a write is tried and aborted
        (:func:`probe_writable`). A file that kills the child gives a
        :class:`ReaderCrashedError`; a new child reads the files after it.
        """
        mode = _PROBE if probe else _READ
        items = iter(items)
        queue: deque[list] = deque()  # [path or error, sent]
        while True:
            while len(queue) < WINDOW and (item := next(items, None)) is not None:
                sent = not isinstance(item, BaseException) and self._send(mode, item)
                queue.append([item, sent])
            if not queue:
                return
            item, sent = queue.popleft()
            if isinstance(item, BaseException):
                yield None, item
            else:
                yield self._outcome(mode, item, sent, queue)

    def _outcome(self, mode: bytes, path: str, sent: bool, queue: deque[list]) -> Outcome:
        for _ in range(3):  # a child that dies before reading anything is started again
            if self._in_process:
                return _read_here(mode, path)
            frame = self._receive() if sent else None
            if frame is not None:
                status, value = frame
                if status != "ok":
                    return None, value
                try:
                    return unpacked(value), None
                except UnicodeDecodeError as exc:  # a key that is not UTF-8: damaged
                    return None, exc
            returncode = self.close()
            if sent:  # the child died reading this file: it is damaged
                error = ReaderCrashedError(
                    f"{path}: reading it killed the reader process "
                    f"({_how_it_died(returncode)}){truncation_hint(path)}")
                self._resend(mode, queue)
                return None, error
            sent = self._send(mode, path)
            self._resend(mode, queue)
        self._give_up("the reader process keeps exiting")
        return _read_here(mode, path)

    def _resend(self, mode: bytes, queue: deque[list]) -> None:
        for entry in queue:
            if not isinstance(entry[0], BaseException):
                entry[1] = self._send(mode, entry[0])

    def _send(self, mode: bytes, path: str) -> bool:
        if self._in_process or (self._proc is None and not self._start()):
            return False
        stdin = None if self._proc is None else self._proc.stdin
        if stdin is None:  # never: _start made the child, with Popen(stdin=PIPE)
            return False
        data = mode + os.fsencode(path)
        try:
            stdin.write(_LEN.pack(len(data)) + data)
            stdin.flush()
        except OSError:  # the child died: what it answered is still in the pipe
            return False
        return True

    def _receive(self) -> tuple | None:
        stdout = None if self._proc is None else self._proc.stdout
        head = None if stdout is None else _read_exact(stdout, _LEN.size)
        data = (None if stdout is None or head is None
                else _read_exact(stdout, _LEN.unpack(head)[0]))
        return None if data is None else pickle.loads(data)

    def _start(self) -> bool:
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD.format(root=_ROOT)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except (OSError, ValueError) as exc:
            return self._give_up(str(exc))
        self.starts += 1
        frame = self._receive()
        if frame is None or frame[0] != "ready":
            return self._give_up(f"it ended with {_how_it_died(self.close())}")
        return True

    def _give_up(self, why: str) -> bool:
        self.close()
        self._in_process = True
        logger.warning("resumability: cannot start a reader process for checkpoint files (%s); "
                       "reading them in this process, where a damaged one can crash it", why)
        return False


def probe_writer_file(path: str) -> BaseException | None:
    """Why the existing writer file ``path`` cannot safely be reopened for writing, or None."""
    with SafeReader() as reader:
        ((_, error),) = reader.read_all([path], probe=True)
    return error


def is_damage(error: BaseException, size: int | None = None) -> bool:
    """True when ``error`` says the file's content is at fault (LMDB refused it, a key is not
    UTF-8, reading it killed the reader, or it is empty), not the file system (a plain
    ``lmdb.Error`` from an errno such as ``ENOENT``, or an ``OSError``).

    Example:
        >>> is_damage(lmdb.InvalidError("x.mdb: MDB_INVALID: File is not an LMDB file"))
        True
        >>> is_damage(lmdb.Error("x.mdb: No such file or directory"))
        False
        >>> is_damage(lmdb.Error("x.mdb: Bad file descriptor"), size=0)
        True
    """
    if size == 0 or isinstance(error, UnicodeDecodeError):
        return True
    return isinstance(error, lmdb.Error) and type(error) is not lmdb.Error
