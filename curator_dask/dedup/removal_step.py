"""The workflows' removal step (``perform_removal=True``): ``<output_path>/deduplicated/`` made
from exactly the ids the identification just wrote, and committed like a phase.

The deduplicated corpus is named by its input files' groups, so files of an earlier run (another
corpus, another ``input_blocksize``, a file deleted since) would stay beside the new ones: the
folder is emptied before a removal starts. With ``checkpoint_path=`` the removal is a phase by
the deduplication phases' rule (``dedup/commits.py``), with a key (a digest of the
identification's key and the removal's parameters) and a record
``<checkpoint_path>/removal.json``:

- committed with this key (``"done": true``) and the folder there: skipped, its counts
  reported again (``phases_skipped`` lists ``removal``);
- begun with this key (``"done": false``: a run killed inside the removal): resumed through the
  removal's pipeline checkpoint ``<checkpoint_path>/removal/``; the count then comes from the
  rows the folder holds, as the sources an earlier run completed report nothing;
- anything else (other ids: a changed input, other parameters): the record, the folder and the
  removal's pipeline checkpoint are removed, the record says ``"done": false``, and the removal
  runs from scratch.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

import fsspec

from curator_dask.dedup.commits import PhaseRecord, start_over

RECORD = "removal.json"


def removal_key(upstream: str, params: dict[str, Any]) -> str:
    """The digest a removal's record must hold: the ids' key and the removal's parameters.

    Example:
        >>> removal_key("ids", {"blocksize": "1kB"}) == removal_key("ids", {"blocksize": "1kB"})
        True
    """
    text = json.dumps({"phase": "removal", "upstream": upstream, "params": params},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def removal_params(*, input_path: Any, input_filetype: str, input_blocksize: Any,
                   extensions: Any, initial_tasks: list[Any] | None, output: str,
                   write_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """What a removal's output depends on besides the ids, as it enters :func:`removal_key`
    (the write options as text, without credentials)."""
    return {"input_path": input_path, "input_filetype": input_filetype,
            "input_blocksize": input_blocksize, "extensions": extensions,
            "initial_tasks": [list(t.data) for t in initial_tasks or []], "output": output,
            "write_kwargs": {k: repr(v) for k, v in sorted((write_kwargs or {}).items())
                             if k != "storage_options"}}


@dataclass(frozen=True)
class RemovalStep:
    """Where the removal writes and what identifies it.

    ``output``: the deduplicated folder; ``checkpoint``: the workflow's ``checkpoint_path``
    (``None``: no record, the folder is always rebuilt; its fsspec options are config
    ``io.storage-options``, as for the removal's pipeline checkpoint); ``num_documents``: the
    input's documents (the count of a resumed removal is those less the rows kept).
    """

    output: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    key: str = ""
    num_documents: int = 0

    @property
    def pipeline_checkpoint(self) -> str | None:
        """The removal pipeline's own checkpoint."""
        return None if self.checkpoint is None else posixpath.join(self.checkpoint, "removal")

    def run(self, client: Any, removal: Any, executor: Any,
            initial_tasks: list[Any] | None) -> tuple[dict[str, Any], Any]:
        """Run (or skip) the removal workflow ``removal`` (its ``checkpoint_path`` is
        :attr:`pipeline_checkpoint`); returns ``(counts, its result or None when skipped)``.

        ``counts``: ``num_duplicates_removed`` and ``skipped`` (the record was complete).
        """
        record = self._record()
        if record is not None:
            committed = record.committed(self.key)
            if committed is not None and self._exists(self.output):
                return {**committed, "skipped": True}, None
        # a committed record whose folder is gone (deleted since) is redone from scratch
        resuming = record is not None and record.begun(self.key)
        if not resuming:
            start_over(record, [(self.output, self.storage_options)] + (
                [] if self.pipeline_checkpoint is None
                else [(self.pipeline_checkpoint, self._checkpoint_options())]), recreate=False)
            if record is not None:
                record.begin(self.key)
        result = removal.run(executor=executor, initial_tasks=initial_tasks)
        removed = result.get_metadata("num_duplicates_removed")
        if resuming:  # the sources an earlier run completed were not counted in this one
            removed = self.num_documents - count_rows(client, self.output, self.storage_options)
        counts = {"num_duplicates_removed": int(removed or 0)}
        if record is not None:
            record.commit(self.key, counts)
        return {**counts, "skipped": False}, result

    def empty_output(self) -> None:
        """Remove the deduplicated folder (files of an earlier run must not stay)."""
        self._empty(self.output, self.storage_options)

    # -- the record ---------------------------------------------------------------------------
    def _record(self) -> PhaseRecord | None:
        if self.checkpoint is None:
            return None
        return PhaseRecord(posixpath.join(self.checkpoint, RECORD), self._checkpoint_options(),
                           phase="removal")

    def _checkpoint_options(self) -> dict[str, Any]:
        """The checkpoint's fsspec options: as the removal's pipeline resolves them."""
        from curator_dask.utils.storage_options import default_storage_options

        return dict(default_storage_options(str(self.checkpoint), None) or {})

    @staticmethod
    def _empty(folder: str, storage_options: dict[str, Any]) -> None:
        fs, root = fsspec.core.url_to_fs(folder, **storage_options)
        if fs.exists(root):
            fs.rm(root, recursive=True)

    def _exists(self, folder: str) -> bool:
        fs, root = fsspec.core.url_to_fs(folder, **self.storage_options)
        return fs.exists(root)


def count_rows(client: Any, folder: str, storage_options: dict[str, Any]) -> int:
    """The documents in the files of ``folder`` (Parquet: from the footers; JSON Lines: the
    non-empty lines), counted on the workers."""
    fs, root = fsspec.core.url_to_fs(folder, **storage_options)
    if not fs.exists(root):
        return 0
    files = sorted(p for p in fs.find(root) if not posixpath.basename(p).startswith("."))
    urls = [fs.unstrip_protocol(p) for p in files]
    counts = client.gather(client.map(_rows_in, urls, storage_options=storage_options,
                                      pure=False))
    return int(sum(counts))


def _rows_in(url: str, storage_options: dict[str, Any]) -> int:
    if url.endswith(".parquet"):
        import pyarrow.parquet as pq

        with fsspec.open(url, "rb", **storage_options) as f:
            return pq.ParquetFile(f).metadata.num_rows
    rows = 0
    with fsspec.open(url, "rb", compression="infer", **storage_options) as f:
        for line in f:
            rows += bool(line.strip())
    return rows


__all__ = ["RECORD", "RemovalStep", "count_rows", "removal_key", "removal_params"]
