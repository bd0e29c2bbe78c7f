"""Committed records: the JSON files whose presence says that a step is complete.

Every record that commits a step goes through :class:`CommittedRecord`: the partitioning
records (``partitions/record.py``), the deduplication phases' records (``dedup/commits.py``:
the fuzzy workflow's phase markers, the exact workflow's marker, ``removal.json``). The policy
is written once, here and in docs/design/architecture.md ("Committed records"):

- **written atomically**, last, after the step's outputs are complete: a temp file and a
  rename, or one upload on an object store (``utils/atomic.py``), so a reader sees the whole
  record or none; each record carries its ``kind`` and ``version``;
- **read with a check**: no file, ``None`` (the step has not committed); a file of another
  ``kind`` (not ours to overwrite) or of a ``version`` newer than this curator_dask's is
  refused (:class:`~curator_dask.errors.CommittedRecordError`, or the record's own subclass of
  it), the file kept; a record without ``kind`` or ``version`` was written before records
  carried them and is read as version 1 of this kind; an older version is returned as read,
  for the record's class to migrate or refuse;
- **a record that cannot be read** (an I/O error, torn or invalid JSON, not a JSON object, not
  the shape its class expects) gets the policy its class declares: ``redo`` (a warning; read
  as absent, so the step runs again from scratch and writes the record anew) or ``refuse``
  (refused, the file kept: the record holds what cannot be rebuilt).
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, ClassVar, Literal

import fsspec

from curator_dask.errors import CommittedRecordError
from curator_dask.utils.atomic import write_atomic

logger = logging.getLogger(__name__)

Policy = Literal["redo", "refuse"]
POLICIES = ("redo", "refuse")
RESERVED = ("kind", "version")  # written by the record itself, over the payload's


class CommittedRecord:
    """One committed record at ``url`` (a local path or an fsspec URL), of the class's ``kind``
    and ``version``; see the module docstring for the policy.

    A subclass names its ``kind``, its current ``version``, its policy for an unreadable file
    (``on_unreadable``: ``"redo"`` or ``"refuse"``), the exception it refuses with (``error``,
    a subclass of :class:`~curator_dask.errors.CommittedRecordError`) and, optionally, the
    shape it expects (:meth:`problem`).

    Example:
        >>> class Note(CommittedRecord):
        ...     kind, version, on_unreadable = "note", 1, "redo"
        >>> note = Note("memory://doc-records/note.json")
        >>> note.read() is None
        True
        >>> note.write({"done": True}); note.read()
        {'done': True, 'kind': 'note', 'version': 1}
    """

    kind: ClassVar[str] = ""
    version: ClassVar[int] = 1
    on_unreadable: ClassVar[Policy] = "refuse"
    error: ClassVar[type[CommittedRecordError]] = CommittedRecordError
    what: ClassVar[str] = "record"  # how messages name it ("partition record", ...)
    fix: ClassVar[str] = "use a new checkpoint path (or move the file aside)"

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = str(url)
        self.fs, self.path = fsspec.core.url_to_fs(self.url, **(storage_options or {}))

    # -- reading ------------------------------------------------------------------------------
    def read(self) -> dict[str, Any] | None:
        """The record (its ``kind`` and ``version`` included), or ``None`` when there is none
        or, with the ``redo`` policy, when it cannot be read.

        Raises:
            CommittedRecordError: (``error``) another kind, a newer version, or an unreadable
                file with the ``refuse`` policy; the file is kept.
        """
        try:
            raw = self.fs.cat_file(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return self._unreadable(f"it cannot be read ({exc})")
        try:
            data = json.loads(raw)
        except ValueError as exc:  # torn (never by our writes, which are atomic) or foreign
            return self._unreadable(f"it is not valid JSON ({exc})")
        if not isinstance(data, dict):
            return self._unreadable(f"it is not a JSON object but {type(data).__name__}")
        kind = data.setdefault("kind", self.kind)  # written before records named their kind
        if kind != self.kind:
            msg = (f"{self.url} is a record of kind {kind!r}, not the {self.what} "
                   f"({self.kind!r}) expected there; it is kept, and nothing was done. Give "
                   f"this step a path of its own: {self.fix}")
            raise self.error(msg)
        version = data.setdefault("version", 1)  # written before records had a version
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            return self._unreadable(f"its version {version!r} is not a number")
        if version > self.version:
            msg = (f"the {self.what} {self.url} is of version {version}, newer than this "
                   f"curator_dask reads (up to {self.version}): it was written by a newer "
                   "curator_dask. It is kept, and nothing was done; run that newer "
                   f"curator_dask, or {self.fix}")
            raise self.error(msg)
        why = self.problem(data)
        if why is not None:
            return self._unreadable(why)
        return data

    def problem(self, data: dict[str, Any]) -> str | None:
        """Why ``data`` is not the shape this record expects (read as unreadable), or None."""
        return None

    def _unreadable(self, why: str) -> dict[str, Any] | None:
        """``None`` (read as absent) with the ``redo`` policy; else refused."""
        if self.on_unreadable == "redo":
            logger.warning("the %s %s is unreadable (%s); the step runs again and writes it "
                           "anew", self.what, self.url, why)
            return None
        msg = (f"the {self.what} {self.url} cannot be used: {why}. It is kept, and nothing "
               f"was done; restore it, or {self.fix}")
        raise self.error(msg)

    # -- writing ------------------------------------------------------------------------------
    def write(self, payload: dict[str, Any]) -> None:
        """Replace the record atomically with ``payload`` plus this class's ``kind`` and
        ``version`` (which take the place of any the payload holds)."""
        record = {**payload, "kind": self.kind, "version": self.version}
        blob = json.dumps(record, indent=1, sort_keys=True, default=str).encode() + b"\n"
        parent = self.path.rsplit("/", 1)[0]
        if parent and parent != self.path:
            self.fs.makedirs(parent, exist_ok=True)
        write_atomic(self.fs, self.path, lambda f: f.write(blob))

    def remove(self) -> None:
        """Remove the record (the step is no longer complete); none is fine."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path)

    def exists(self) -> bool:
        return bool(self.fs.exists(self.path))


__all__ = ["POLICIES", "CommittedRecord", "Policy"]
