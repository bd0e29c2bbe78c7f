"""Writer ids: the names of the LMDB writer files, and which of them this process holds open.

A generated id is ``<hostname>-<pid>-<token>`` (docs/design/contract.md §4.1): NeMo Curator 1.4
names its writer ``<hostname>-<pid>`` (``nemo_curator/utils/resumability_actor.py``) and reads
every ``*.mdb`` of the folder without parsing a name, so the token is invisible to it. The token
makes a file belong to one store (one run), however many runs one scheduler process serves and
however many containers share a host name and pid.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid

TOKEN_CHARS = 8  # hex characters of the per-store token in a generated writer id

# The writer files that stores of this process hold open (local real paths or URLs): LMDB
# breaks when one process opens the same file twice (docs/design/contract.md §4.5).
_OPEN_WRITER_FILES: set[str] = set()
_OPEN_LOCK = threading.Lock()


def default_writer_id(token: str | None = None) -> str:
    """``<hostname>-<pid>-<token>``: NeMo Curator's ``<hostname>-<pid>`` plus a token, by
    default 8 fresh hex characters of a uuid4, so that every store (every run) of one process
    writes its own file, and so do processes of equal host name and pid (containers).

    Example:
        >>> import os, socket
        >>> default_writer_id("0a1b2c3d") == f"{socket.gethostname()}-{os.getpid()}-0a1b2c3d"
        True
        >>> default_writer_id() != default_writer_id()
        True
    """
    return f"{socket.gethostname()}-{os.getpid()}-{token or uuid.uuid4().hex[:TOKEN_CHARS]}"


def claim(key: str) -> str:
    """Mark the writer file ``key`` open in this process; refuse a second opening."""
    with _OPEN_LOCK:
        if key in _OPEN_WRITER_FILES:
            msg = (f"writer file {key} is already open in this process (LMDB breaks when one "
                   "process opens a file twice): pass another writer_id, or none to get a "
                   "unique one, or close the other CompletionStore first")
            raise ValueError(msg)
        _OPEN_WRITER_FILES.add(key)
    return key


def release(key: str) -> None:
    """Forget that ``key`` is open (the store closed it, or failed to open it)."""
    with _OPEN_LOCK:
        _OPEN_WRITER_FILES.discard(key)
