"""Commit markers of the fuzzy workflow's phases after phase 1.

Each phase writes its directory, then (last) a marker ``<cache_path>/.curator_dask/fuzzy/
<phase>.json`` holding its key and its counts. The key is a digest of the phase's parameters
and of the key of the phase before it (phase 1's key: its groups and rows and the minhash
parameters), so a marker names exactly the inputs that made the directory. With
``checkpoint_path=``, a phase whose marker holds the expected key is skipped (its counts are
read back); any other phase is redone from scratch: its directory is removed first, then
rewritten, then committed. A run killed inside a phase leaves no marker for it, so the rerun
redoes that phase and keeps the ones before. Without ``checkpoint_path=`` every marker is
removed at the start and every phase is redone, as NeMo does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
from typing import Any

import fsspec

from curator_dask.utils.atomic import write_atomic

logger = logging.getLogger(__name__)

MARKER_DIR = posixpath.join(".curator_dask", "fuzzy")


def phase_key(phase: str, params: dict[str, Any], upstream: str) -> str:
    """The digest a phase's marker must hold: its name, parameters and upstream key.

    Example:
        >>> phase_key("lsh", {"num_bands": 20}, "x") == phase_key("lsh", {"num_bands": 20}, "x")
        True
    """
    text = json.dumps({"phase": phase, "params": params, "upstream": upstream},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class PhaseCommits:
    """The markers under one ``cache_path``.

    Example:
        >>> commits = PhaseCommits("memory://doc-cache", {}, resume=True)
        >>> commits.done("lsh", "k") is None
        True
        >>> commits.commit("lsh", "k", {"buckets": 3}); commits.done("lsh", "k")
        {'buckets': 3}
    """

    def __init__(self, cache_path: str, storage_options: dict[str, Any], *,
                 resume: bool) -> None:
        self.fs, root = fsspec.core.url_to_fs(str(cache_path), **storage_options)
        self.root = root
        self.dir = posixpath.join(root, MARKER_DIR)
        self.resume = resume
        if not resume and self.fs.exists(self.dir):
            self.fs.rm(self.dir, recursive=True)

    def _marker(self, phase: str) -> str:
        return posixpath.join(self.dir, f"{phase}.json")

    def done(self, phase: str, key: str) -> dict[str, Any] | None:
        """The counts of ``phase`` if it is committed with ``key`` and this run resumes;
        else ``None`` (the phase must run)."""
        if not self.resume:
            return None
        try:
            with self.fs.open(self._marker(phase), "rb") as f:
                marker = json.load(f)
        except FileNotFoundError:
            return None
        except ValueError:  # a marker is written atomically; an unreadable one is not ours
            logger.warning("ignoring the unreadable phase marker %s", self._marker(phase))
            return None
        if marker.get("key") != key:
            logger.info("phase %s was committed with other inputs or parameters: redoing it",
                        phase)
            return None
        return dict(marker.get("counts") or {})

    def begin(self, phase: str, directories: list[tuple[str, dict[str, Any]]]) -> None:
        """Start ``phase`` from scratch: its marker removed, each of its ``(directory,
        storage_options)`` emptied."""
        if self.fs.exists(self._marker(phase)):
            self.fs.rm(self._marker(phase))
        for directory, options in directories:
            fs, path = fsspec.core.url_to_fs(str(directory), **options)
            if fs.exists(path):
                fs.rm(path, recursive=True)
            fs.makedirs(path, exist_ok=True)

    def commit(self, phase: str, key: str, counts: dict[str, Any]) -> None:
        """Write ``phase``'s marker (atomically): the phase is complete."""
        self.fs.makedirs(self.dir, exist_ok=True)
        data = json.dumps({"phase": phase, "key": key, "counts": counts},
                          sort_keys=True, default=str).encode()
        write_atomic(self.fs, self._marker(phase), lambda f: f.write(data))


__all__ = ["MARKER_DIR", "PhaseCommits", "phase_key"]
