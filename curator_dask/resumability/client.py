"""Driver side of resumable runs: register the completion plugin, open sources, flush, close."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from curator_dask.errors import CuratorDaskError
from curator_dask.resumability.counters import set_source_id, source_deltas
from curator_dask.resumability.plugin import CompletionPlugin, handler_names
from curator_dask.utils.files import is_remote_url

if TYPE_CHECKING:
    from distributed import Client

    from curator_dask.tasks import Task

logger = logging.getLogger(__name__)

CHECK_BLOCK = 50_000  # source ids per "which are complete?" call to the scheduler


class CheckpointError(RuntimeError, CuratorDaskError):
    """The completion plugin failed; completions after the failure may not be recorded."""


def normalize_checkpoint_url(path: str) -> str:
    """An absolute local path (created) or the URL unchanged, as NeMo Curator resolves it."""
    path = os.fspath(path)
    if is_remote_url(path):
        return path.rstrip("/")
    local = path[len("file://"):] if path.startswith("file://") else path
    local = os.path.abspath(local)
    os.makedirs(local, exist_ok=True)
    return local


class CompletionClient:
    """One checkpointed run's connection to its ``CompletionPlugin`` on the scheduler.

    Example:
        >>> # client = CompletionClient(dask_client, "run1", "/ckpt")
        >>> # todo = client.open_sources(sources)   # drops completed sources
        >>> # summary = client.close()               # flushes to LMDB
    """

    def __init__(
        self,
        client: Client,
        run_id: str,
        checkpoint_url: str,
        *,
        storage_options: dict | None = None,
        flush_interval: float | None = None,
        publish_interval: float | None = None,
        staged: bool | None = None,
    ) -> None:
        from curator_dask import config

        self.client = client
        self.run_id = run_id
        self.checkpoint_url = checkpoint_url
        self.storage_options = storage_options
        self.names = handler_names(run_id)
        # Resolved here, on the client: the scheduler does not see the client's config.
        plugin = CompletionPlugin(
            checkpoint_url, run_id, storage_options=storage_options, owner=client.id,
            flush_interval=float(config.get("checkpoint.flush-interval", flush_interval)),
            publish_interval=float(config.get("checkpoint.publish-interval", publish_interval)),
            staged=config.get("checkpoint.staged", staged),
        )
        client.register_plugin(plugin, name=plugin.name)
        self._closed = False

    def _call(self, op: str, **kwargs: Any) -> Any:
        method = getattr(self.client.scheduler, self.names[op])
        return self.client.sync(method, **kwargs)

    def completed_ids(self, sources: list[Task]) -> set[str]:
        """The ids of those ``sources`` that the checkpoint marks complete (read-only)."""
        return self.completed_source_ids(t.get_source_id() for t in sources)

    def completed_source_ids(self, source_ids: Iterable[str]) -> set[str]:
        """Those of ``source_ids`` that the checkpoint marks complete (read-only)."""
        return set(self._call("completed", source_ids=list(source_ids)))

    def check_partitioning(self, source_stage: Any, sources: Iterable[Task]) -> None:
        """Refuse sources that regroup files of completed partitions; record the partitioning
        (``partitions/groups.py``). Give it every source, before a shard filter: a list, or
        an iterator compared a block at a time."""
        from curator_dask.partitions.groups import check_partitioning

        check_partitioning(source_stage, sources, self.completed_source_ids,
                           self.checkpoint_url, self.storage_options)

    def open_sources(self, sources: list[Task], reopen: list[str] | None = None, *,
                     now: bool = True) -> tuple[list[Task], int]:
        """Drop completed sources, open the rest; returns ``(to process, skipped count)``.

        Sources in ``reopen`` are processed again although complete (changed inputs). With
        ``now=False`` the rest are opened later, by :meth:`open_block` just before they are
        submitted, so that the plugin holds counters only for the sources sent.
        """
        if now:
            opened = source_deltas(sources)
            completed = set(self._call("open_sources", sources=[[t, s] for t, s, _ in opened],
                                       reopen=list(reopen or ())))
            del opened
        else:  # only ask which are complete, in blocks: small messages at 10^6 sources
            if reopen:
                self._call("open_sources", sources=[], reopen=list(reopen), open=False)
            # the ids first, then the calls: their transient objects do not interleave with
            # the ids in memory (which would keep the allocator's arenas from being freed)
            ids = [set_source_id(t) for t in sources]
            completed = set()
            for start in range(0, len(ids), CHECK_BLOCK):
                completed.update(self._call("completed",
                                            source_ids=ids[start:start + CHECK_BLOCK]))
            del ids
        todo = [t for t in sources if t._source_id not in completed]
        return todo, len(sources) - len(todo)

    def open_block(self, sources: Iterable[Task]) -> None:
        """Open (``+1``) sources that ``open_sources(now=False)`` left to process, before any
        of them is submitted (docs/design/contract.md §3.1: a source's ``+1`` comes first)."""
        self._call("open_sources", sources=[[t, s] for t, s, _ in source_deltas(list(sources))])

    def close(self) -> dict[str, Any]:
        """Flush every completion to the store, close it, and remove the plugin."""
        if self._closed:
            return {}
        self._closed = True
        summary = self._call("close")
        for text, n in summary.get("warnings", {}).items():
            logger.warning("%s (%d batch%s)", text, n, "" if n == 1 else "es")
        return summary
