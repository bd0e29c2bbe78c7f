"""``StageCheckpointStore``: saves, verifies, loads and deletes one source's memoized outputs.

An entry holds the outputs a fusion group produced for one source at a checkpointed boundary:
one Arrow IPC, Parquet or JSON Lines file per tabular task (:mod:`.formats`: the format and
its compression), the task shells (ids, metadata, non-tabular payloads) in one pickle, and,
written last and atomically, ``manifest.json`` with rows, schemas, sizes and digests, the
chain and input fingerprints, and the completion deltas the chain emitted for the source. An
entry whose manifest is missing or does not verify raises :class:`CheckpointUnusable`.

The manifest is not a committed record (``utils/records.py``), on purpose: an entry is a cache
of outputs that can be computed again, written by the thousands on the workers, and whatever is
wrong with it (missing, torn, another ``format_version`` newer or older, a file that does not
match its digest) makes it unusable and the source is computed again; a record's policy would
refuse a newer version and stop the run. Its write is the same atomic commit
(``write_atomic``, last), its version check the one line in ``_manifest``.

Layout (flat, so one listing finds everything)::

    <checkpoint>/.curator_dask/stage_checkpoints/<source id>--<stage index:03d>-<chain fp>/
        manifest.json      # written last: its presence is the commit
        tasks.pkl          # task shells (data removed for tabular tasks)
        part-00000.arrow   # one file per tabular task (.parquet, .jsonl or .jsonl.gz)
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, BinaryIO

import fsspec

from curator_dask.errors import CuratorDaskError
from curator_dask.resumability.fingerprint import input_fingerprints, stage_fingerprint
from curator_dask.resumability.layout import STAGE_CHECKPOINTS_SUBDIR
from curator_dask.resumability.stage_checkpoints.formats import (
    check_compression,
    decode_table,
    encode_table,
    file_suffix,
)

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
_PLAIN = re.compile(r"^[A-Za-z0-9.]+$")


class CheckpointUnusable(CuratorDaskError):
    """A stage checkpoint that cannot be used (the message says why)."""


def chain_fingerprint(stages: Sequence[Any], upto: int) -> str:
    """A digest of every stage up to and including ``stages[upto]`` (classes and parameters)."""
    body = [stage_fingerprint(s) for s in stages[: upto + 1]]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def source_input_digest(task: Any) -> str | None:
    """A digest of a source's input files (path, size, mtime or ETag); ``None`` if not files."""
    from curator_dask.classes import class_named

    if not class_named(task, "FileGroupTask") or not task.data:  # either model's
        return None
    options = (task.reader_config or {}).get("storage_options")
    try:
        prints = input_fingerprints(task.data, storage_options=options)
    except (OSError, ValueError):
        return None
    text = json.dumps(prints, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def entry_source(source_id: str) -> str:
    """The source part of an entry name: the id itself if it is a plain token, else a hash."""
    if _PLAIN.match(source_id):
        return source_id
    return "h" + hashlib.sha256(source_id.encode()).hexdigest()[:32]


def entry_name(source_id: str, stage_index: int, fingerprint: str) -> str:
    """``<source id>--<stage index:03d>-<chain fingerprint>`` (ids that are not plain tokens
    are hashed, so no id can leave the folder)."""
    return f"{entry_source(source_id)}--{stage_index:03d}-{fingerprint}"


def parse_entry_name(name: str) -> tuple[str, int, str] | None:
    """``(entry source, stage index, fingerprint)`` from an entry name; ``None`` if not one.

    Example:
        >>> parse_entry_name(entry_name("s1", 2, "f00d"))
        ('s1', 2, 'f00d')
    """
    head, sep, rest = name.rpartition("--")
    index, dash, fingerprint = rest.partition("-")
    if not sep or not dash or not index.isdigit() or not head:
        return None
    return head, int(index), fingerprint


def _writing(data: bytes) -> Callable[[BinaryIO], object]:
    """``write_atomic``'s writer of ``data`` (bound now: the loop that makes it moves on)."""
    return lambda f: f.write(data)


def _tabular(task: Any) -> str | None:
    """``"arrow"``/``"pandas"`` for a task whose data is a table, else ``None``."""
    import pyarrow as pa

    data = getattr(task, "data", None)
    if isinstance(data, pa.Table):
        return "arrow"
    pd = sys.modules.get("pandas")  # a DataFrame implies pandas is already imported
    if pd is not None and isinstance(data, pd.DataFrame):
        return "pandas"
    return None


class StageCheckpointStore:
    """Saves, lists, verifies, loads and deletes stage checkpoints under one checkpoint path.

    Example:
        >>> import pyarrow as pa
        >>> from curator_dask.tasks import DocumentBatch
        >>> store = StageCheckpointStore("memory://sc-doc/ckpt")
        >>> t = DocumentBatch(dataset_name="d", data=pa.table({"text": ["a", "b"]}))
        >>> t.task_id, t._source_id = "0_s_0", "s"
        >>> name, size = store.save("s", 1, "f00d", "reader", [[t]], [("0_s_0", "s", 0)], None)
        >>> batches, deltas = store.load(name, "f00d", None)
        >>> batches[0][0].task_id, batches[0][0].data.num_rows, deltas
        ('0_s_0', 2, [('0_s_0', 's', 0)])
    """

    def __init__(self, checkpoint_url: str, storage_options: dict | None = None,
                 fmt: str = "arrow", compression: str | None = None) -> None:
        self.url = f"{checkpoint_url.rstrip('/')}/{STAGE_CHECKPOINTS_SUBDIR}"
        self.storage_options = dict(storage_options or {})
        self.format = fmt
        self.compression = check_compression(fmt, compression)
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.storage_options)

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options, "format": self.format,
                "compression": self.compression}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.storage_options)

    def _path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    # -- listing ----------------------------------------------------------------------------
    def listing(self) -> dict[str, list[tuple[int, str, str]]]:
        """``{entry source: [(stage index, fingerprint, entry name), ...]}`` of every entry."""
        try:
            names = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return {}
        found: dict[str, list[tuple[int, str, str]]] = {}
        for path in names:
            name = path.rstrip("/").rsplit("/", 1)[-1]
            parsed = parse_entry_name(name)
            if parsed is not None:
                found.setdefault(parsed[0], []).append((parsed[1], parsed[2], name))
        return found

    # -- save -------------------------------------------------------------------------------
    def save(
        self,
        source_id: str,
        stage_index: int,
        fingerprint: str,
        stage_name: str,
        batches: list[list[Any]],
        deltas: Iterable[tuple[str, str, int]],
        input_digest: str | None,
    ) -> tuple[str, int]:
        """Store one source's outputs at a boundary; returns the entry name and its bytes.

        Data files first, the manifest last (atomically): a crash leaves no manifest, and an
        entry without one is never used.
        """
        import cloudpickle
        import pyarrow as pa

        from curator_dask.utils.atomic import write_atomic

        name = entry_name(source_id, stage_index, fingerprint)
        directory = self._path(name)
        self.fs.makedirs(directory, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(name, MANIFEST))  # an older entry stops counting now
        shells: list[tuple[str | None, Any]] = []  # (data file or None, task without data)
        files: list[dict[str, Any]] = []
        for i, task in enumerate(t for batch in batches for t in batch):
            kind = _tabular(task)
            if kind is None:
                shells.append((None, task))
                continue
            table = task.data if kind == "arrow" else pa.Table.from_pandas(task.data)
            file = f"part-{i:05d}.{file_suffix(self.format, self.compression)}"
            data, stored_as = encode_table(table, self.format, self.compression)
            write_atomic(self.fs, self._path(name, file), _writing(data),
                         fsync=False)
            # the digest of the bytes written, taken from memory: no second read of the file
            files.append({"file": file, "task_id": task.task_id, "rows": table.num_rows,
                          "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                          "kind": kind, "schema": str(table.schema), **stored_as})
            shell = copy.copy(task)  # no __init__: validation would refuse data=None
            shell.data = None
            shells.append((file, shell))
        pickled = cloudpickle.dumps({"shells": shells,
                                     "sizes": [len(b) for b in batches]})
        write_atomic(self.fs, self._path(name, "tasks.pkl"), lambda f: f.write(pickled),
                     fsync=False)
        manifest = {
            "format_version": FORMAT_VERSION,
            "source_id": source_id,
            "stage_index": stage_index,
            "stage": stage_name,
            "chain_fingerprint": fingerprint,
            "input_fingerprint": input_digest,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rows": sum(f["rows"] for f in files),
            "files": files,
            "tasks": {"file": "tasks.pkl", "bytes": len(pickled),
                      "sha256": hashlib.sha256(pickled).hexdigest()},
            "deltas": [list(d) for d in deltas],
        }
        text = json.dumps(manifest, indent=1).encode()
        write_atomic(self.fs, self._path(name, MANIFEST), lambda f: f.write(text), fsync=False)
        return name, len(text) + len(pickled) + sum(f["bytes"] for f in files)

    # -- load -------------------------------------------------------------------------------
    def load(self, name: str, fingerprint: str, input_digest: str | None
             ) -> tuple[list[list[Any]], list[tuple[str, str, int]]]:
        """Verify and read an entry: ``(batches, deltas)``; raises :class:`CheckpointUnusable`."""
        manifest = self._manifest(name, fingerprint, input_digest)
        payload = self._shells(name, manifest)
        by_file = {f["file"]: f for f in manifest["files"]}
        tasks = []
        for file, shell in payload["shells"]:
            if file is not None:
                meta = by_file[file]
                table = self._table(name, file, meta)
                shell.data = table if meta["kind"] == "arrow" else table.to_pandas()
            tasks.append(shell)
        batches, start = [], 0
        for size in payload["sizes"]:
            batches.append(tasks[start:start + size])
            start += size
        deltas = [(str(t), str(s), int(d)) for t, s, d in manifest["deltas"]]
        return batches, deltas

    def _manifest(self, name: str, fingerprint: str, input_digest: str | None) -> dict:
        """The entry's manifest, if it was made by this chain from these inputs."""
        try:
            manifest = json.loads(self.fs.cat_file(self._path(name, MANIFEST)))
        except FileNotFoundError as exc:
            raise CheckpointUnusable("no manifest (the save never committed)") from exc
        except (OSError, ValueError) as exc:
            raise CheckpointUnusable(f"unreadable manifest: {exc}") from exc
        if manifest.get("format_version") != FORMAT_VERSION:
            raise CheckpointUnusable(f"format version {manifest.get('format_version')!r}")
        if manifest.get("chain_fingerprint") != fingerprint:
            raise CheckpointUnusable("made by a different stage chain")
        if manifest.get("input_fingerprint") != input_digest:
            raise CheckpointUnusable("the source's input files changed since it was saved")
        return manifest

    def _shells(self, name: str, manifest: dict) -> dict:
        """The pickled task shells, checked against the manifest's digest first."""
        import cloudpickle

        try:
            pickled = self.fs.cat_file(self._path(name, manifest["tasks"]["file"]))
        except OSError as exc:
            raise CheckpointUnusable(f"task file unreadable: {exc}") from exc
        if hashlib.sha256(pickled).hexdigest() != manifest["tasks"]["sha256"]:
            raise CheckpointUnusable(
                f"tasks.pkl has {len(pickled)} bytes and a different digest than the manifest's "
                f"({manifest['tasks']['bytes']} bytes)")
        try:
            return cloudpickle.loads(pickled)
        except Exception as exc:  # noqa: BLE001 (any unpickling failure makes it unusable)
            raise CheckpointUnusable(f"task file does not unpickle: {exc!r}") from exc

    def _table(self, name: str, file: str, meta: dict) -> Any:
        """One stored table, checked against the manifest's size, digest and row count: any
        damage to the file makes the entry unusable (the source is computed again)."""
        import pyarrow as pa

        try:
            raw = self.fs.cat_file(self._path(name, file))
        except OSError as exc:
            raise CheckpointUnusable(f"{file} unreadable: {exc}") from exc
        if len(raw) != meta["bytes"]:
            raise CheckpointUnusable(
                f"{file} has {len(raw)} bytes, the manifest says {meta['bytes']}")
        if "sha256" not in meta:
            raise CheckpointUnusable(f"{file} has no digest in the manifest (written by an "
                                     "older curator_dask): it cannot be verified")
        if hashlib.sha256(raw).hexdigest() != meta["sha256"]:
            raise CheckpointUnusable(f"{file} does not match the sha256 digest recorded when "
                                     "it was written (the file is damaged)")
        try:
            table = decode_table(raw, file, meta)
        except (pa.ArrowException, OSError, ValueError, EOFError) as exc:  # gzip: EOFError
            raise CheckpointUnusable(f"{file} does not read: {exc}") from exc
        if table.num_rows != meta["rows"]:
            raise CheckpointUnusable(
                f"{file} has {table.num_rows} rows, the manifest says {meta['rows']}")
        return table

    # -- delete -----------------------------------------------------------------------------
    def delete(self, names: Iterable[str]) -> int:
        """Remove entries (manifest first, so a half-deleted entry is never used)."""
        removed = 0
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self._path(name, MANIFEST))
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(self._path(name), recursive=True)
                removed += 1
        return removed

