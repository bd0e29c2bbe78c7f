"""A JSON record inside a checkpoint folder (``<checkpoint>/.curator_dask/<name>.json``), read
and replaced atomically through fsspec. Each record decides what an unreadable file means
(refused, or written again); the reading and writing are here once."""

from __future__ import annotations

import json
from typing import Any

import fsspec


class CheckpointJsonRecord:
    """``<checkpoint_url>/<relative_path>`` as a JSON document.

    Example:
        >>> record = CheckpointJsonRecord("memory://doc-json-record", ".curator_dask/x.json")
        >>> record.read() is None
        True
        >>> record.write({"a": 1}); record.read()
        {'a': 1}
    """

    sort_keys = False  # how ``write`` orders an object's keys

    def __init__(self, checkpoint_url: str, relative_path: str,
                 storage_options: dict | None = None) -> None:
        self.url = f"{checkpoint_url.rstrip('/')}/{relative_path}"
        self.fs, self.path = fsspec.core.url_to_fs(self.url, **(storage_options or {}))

    def read(self) -> Any:
        """The parsed document, or ``None`` when there is none. An unreadable one raises the
        ``OSError`` or ``ValueError`` (invalid JSON) for the caller to judge."""
        try:
            return json.loads(self.fs.cat_file(self.path))
        except FileNotFoundError:
            return None

    def write(self, record: Any) -> None:
        """Replace the document atomically (a temp file and rename, or one upload)."""
        from curator_dask.utils.atomic import write_atomic

        blob = json.dumps(record, indent=1, sort_keys=self.sort_keys).encode() + b"\n"
        self.fs.makedirs(self.path.rsplit("/", 1)[0], exist_ok=True)
        write_atomic(self.fs, self.path, lambda f: f.write(blob))


__all__ = ["CheckpointJsonRecord"]
