"""Content-change detection for checkpointed runs (``verify_inputs``).

NeMo Curator identifies a source by a hash of its file *paths*, so a completed source whose
file was rewritten is silently skipped forever. With ``verify_inputs="fingerprint"`` (size and
mtime or ETag) or ``"content"`` (plus a sha256 of every byte), each source's input fingerprint
is recorded in the checkpoint when the source completes, and a later run compares it for every
source the checkpoint marks complete. A changed source is processed again
(``on_input_change="reprocess"``) or the run is refused before anything starts (``"error"``).

Records live beside NeMo's LMDB files, which stay untouched (so interop is unaffected)::

    <checkpoint>/.curator_dask/input_fingerprints/<host>-<pid>-<run>.json

A record is written only after its source completed, so a crash while reprocessing a changed
source leaves the old record in place and the next run detects the change again.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterable, Sequence
from typing import Any

import fsspec

from curator_dask.errors import CuratorDaskError
from curator_dask.resumability.fingerprint import diff_inputs, input_fingerprints
from curator_dask.resumability.layout import INPUT_FINGERPRINTS_SUBDIR

logger = logging.getLogger(__name__)

MODES = ("off", "fingerprint", "content")
ON_CHANGE = ("reprocess", "error")


class InputChangedError(ValueError, CuratorDaskError):
    """Completed sources whose inputs changed, with ``on_input_change="error"``."""


class InputCheck:
    """Checks completed sources' inputs against the fingerprints recorded when they completed.

    Example:
        >>> InputCheck("sometimes", "reprocess", "/tmp/ckpt")
        Traceback (most recent call last):
        ...
        ValueError: verify_inputs must be one of off, fingerprint, content (got 'sometimes')
    """

    def __init__(self, mode: str, on_change: str, checkpoint_url: str,
                 storage_options: dict | None = None) -> None:
        if mode not in MODES:
            msg = f"verify_inputs must be one of {', '.join(MODES)} (got {mode!r})"
            raise ValueError(msg)
        if on_change not in ON_CHANGE:
            msg = f"on_input_change must be one of {', '.join(ON_CHANGE)} (got {on_change!r})"
            raise ValueError(msg)
        self.mode = mode
        self.on_change = on_change
        self.url = f"{checkpoint_url.rstrip('/')}/{INPUT_FINGERPRINTS_SUBDIR}"
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **(storage_options or {}))
        self.current: dict[str, dict[str, Any]] = {}
        self.baseline: set[str] = set()

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def _source_files(self, task: Any) -> dict[str, Any]:
        from curator_dask.classes import class_named

        if not class_named(task, "FileGroupTask"):  # either model's
            msg = (f"verify_inputs={self.mode!r} needs sources that are file groups (a "
                   f"FilePartitioningStage or a reader); source {task.task_id!r} is a "
                   f"{type(task).__name__}. Use verify_inputs='off' for this pipeline.")
            raise ValueError(msg)
        options = (task.reader_config or {}).get("storage_options")
        return input_fingerprints(task.data, storage_options=options,
                                  content=self.mode == "content")

    def load(self) -> dict[str, dict[str, Any]]:
        """Every recorded source fingerprint (the newest record of a source wins)."""
        try:
            names = sorted(self.fs.ls(self.root, detail=False))
        except FileNotFoundError:
            return {}
        # One batched read (concurrent on object stores); a failed file comes back as its error.
        files = [n for n in names if n.endswith(".json")]
        blobs = self.fs.cat(files, on_error="return") if files else {}
        records: dict[str, dict[str, Any]] = {}
        for name, blob in sorted(blobs.items()):
            try:
                if isinstance(blob, BaseException):
                    raise blob
                data = json.loads(blob)
            except (OSError, ValueError) as exc:
                logger.warning("input fingerprints: skipping unreadable %s: %s", name, exc)
                continue
            for sid, rec in data.get("sources", {}).items():
                if sid not in records or rec.get("recorded", 0) >= records[sid].get("recorded", 0):
                    records[sid] = rec
        return records

    def changed_sources(self, sources: Sequence[Any], completed: set[str]) -> list[str]:
        """Ids of completed sources whose inputs changed; raises with ``on_change="error"``."""
        started = time.perf_counter()
        saved = self.load()
        changed, details = [], []
        for task in sources:
            sid = task.get_source_id()
            files = self._source_files(task)
            self.current[sid] = files
            if sid not in completed:
                continue
            old = saved.get(sid)
            if old is None:
                self.baseline.add(sid)
                continue
            diff = diff_inputs(old.get("files", {}), files, common_fields_only=True)
            if diff:
                changed.append(sid)
                details.append(f"source {sid}: " + "; ".join(diff))
        logger.debug("input check: %d sources in %.3f s", len(sources),
                     time.perf_counter() - started)
        if self.baseline:
            logger.warning(
                "verify_inputs: %d completed sources have no recorded input fingerprint (they "
                "completed without verify_inputs); they stay complete and their current "
                "fingerprint is recorded now", len(self.baseline))
        if changed and self.on_change == "error":
            shown = details[:20] + ([f"... and {len(details) - 20} more"]
                                    if len(details) > 20 else [])
            msg = ("inputs of completed sources changed since they were processed:\n  "
                   + "\n  ".join(shown) + "\nNothing was processed or deleted. Run with "
                   "on_input_change='reprocess' (--on-input-change reprocess) to process them "
                   "again, or restore the files.")
            raise InputChangedError(msg)
        for line in details[:20]:
            logger.warning("verify_inputs: %s; processing it again", line)
        return changed

    def record(self, finished_ids: Iterable[str], failed: set[str]) -> None:
        """Record the fingerprints of sources that completed in this run (and baselines)."""
        ids = [sid for sid in finished_ids if sid not in failed] + sorted(self.baseline)
        now = time.time()
        sources = {sid: {"files": self.current[sid], "recorded": now, "mode": self.mode}
                   for sid in ids if sid in self.current}
        if not sources:
            return
        from curator_dask.utils.atomic import write_atomic

        name = (f"{socket.gethostname().replace('.', '-')}-{os.getpid()}-"
                f"{int(now * 1000)}.json")
        data = json.dumps({"sources": sources}, default=str).encode()
        self.fs.makedirs(self.root, exist_ok=True)
        write_atomic(self.fs, f"{self.root.rstrip('/')}/{name}", lambda f: f.write(data))
