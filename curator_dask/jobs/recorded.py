"""What one attempt of a job recorded in its checkpoint, read from the checkpoint when it ends.

The driver counts a source completed when it collects its chain's result, but the checkpoint
records it when the chain's last stage reports it, on the scheduler. When Ctrl+C, a stop or an
error ends an attempt, a chain can be recorded and not collected yet: complete for the resume
(it skips it) and for the run's own last line (which counts the checkpoint), though the
driver never counted it. The job's summary, its end event and what ``status`` and ``report``
show therefore take the attempt's completions from the checkpoint.

Each run writes its completions into a writer file of its own, named with a fresh token
(docs/design/contract.md §4.1), so the writer files that were not there when the attempt
started hold what it recorded; of those, the one named for this process when the scheduler
runs here (a ``LocalCluster``'s), so that array tasks writing to one checkpoint at the same time
do not count each other's. With a scheduler elsewhere, runs writing to the checkpoint at the
same time would be counted together (the job then keeps the driver's count when the sum is
more than the attempt had to process). A checkpoint on an object
store (without storage options) is not read: the driver's count stays.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

logger = logging.getLogger(__name__)


class AttemptCompletions:
    """The completions an attempt records in ``checkpoint``: the writer files are listed when
    it is made (before the run starts), and :meth:`count` reads the new ones at the end.

    Example:
        >>> import tempfile
        >>> AttemptCompletions(tempfile.mkdtemp()).count()
        0
    """

    def __init__(self, checkpoint: str, storage_options: dict[str, Any] | None = None) -> None:
        self.checkpoint = checkpoint
        self.storage_options = storage_options
        self.before = self._writer_files()

    def _meta(self) -> tuple[Any, str]:
        import fsspec

        from curator_dask.resumability.layout import METADATA_DIRNAME

        fs, root = fsspec.core.url_to_fs(self.checkpoint, **(self.storage_options or {}))
        return fs, fs.sep.join([root.rstrip(fs.sep), METADATA_DIRNAME])

    def _writer_files(self) -> set[str] | None:
        from curator_dask.resumability.store import writer_file_sizes
        from curator_dask.utils.files import is_remote_url

        if is_remote_url(self.checkpoint) and self.storage_options is None:
            # the job is not given the run's storage options: an object store asked without
            # them can take long to fail (credential look-ups, retries)
            return None
        try:
            fs, meta = self._meta()
            return set(writer_file_sizes(fs, meta))
        except Exception as exc:  # noqa: BLE001 (the job then keeps the driver's count)
            logger.debug("cannot list the writer files of %s: %s", self.checkpoint, exc)
            return None

    def count(self) -> int | None:
        """The sources recorded complete since this was made, or ``None`` when the checkpoint
        cannot be listed or one of the new writer files cannot be read."""
        from curator_dask.resumability.completed_set import CompletedSet
        from curator_dask.resumability.store import read_writer_files
        from curator_dask.utils.files import is_remote_url

        after = self._writer_files()
        if self.before is None or after is None:
            return None
        new = sorted(after - self.before)
        # A scheduler in this process (a LocalCluster's, dask-jobqueue's) names its writer file
        # <host>-<pid>-<token>: that file is this run's even when other runs (the other array
        # tasks of a SLURM array) write to the same checkpoint at the same time.
        mine = f"{socket.gethostname()}-{os.getpid()}-"
        new = [p for p in new if p.rsplit("/", 1)[-1].startswith(mine)] or new
        if not new:
            return 0
        try:
            fs, _ = self._meta()
            parts = []
            for path, ids, exc in read_writer_files(fs, new, remote=is_remote_url(
                    self.checkpoint)):
                if ids is None:
                    if fs.exists(path):  # else an empty file its run removed at close
                        logger.debug("cannot read the writer file %s: %s", path, exc)
                        return None
                    continue
                parts.append(ids)
        except Exception as exc:  # noqa: BLE001 (the job then keeps the driver's count)
            logger.debug("cannot read the writer files of %s: %s", self.checkpoint, exc)
            return None
        return len(CompletedSet.union_all(parts))
