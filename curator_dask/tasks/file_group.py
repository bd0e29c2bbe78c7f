"""``FileGroupTask``: a group of file paths, the usual source task.

See docs/design/contract.md §2.4.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from curator_dask.lineage import get_deterministic_hash
from curator_dask.tasks.tasks import Task

logger = logging.getLogger(__name__)


@dataclass(repr=False)
class FileGroupTask(Task[list[str]]):
    """A list of file paths. Its deterministic id hashes the sorted paths (not the contents).

    Example:
        >>> FileGroupTask(dataset_name="d", data=["b.parquet", "a.parquet"]).get_deterministic_id()
        '663c66c4fc54'
    """

    data: list[str] = field(default_factory=list)
    reader_config: dict[str, Any] = field(default_factory=dict)

    @property
    def num_items(self) -> int:
        return len(self.data)

    def validate(self) -> bool:
        if not isinstance(self.data, list):
            msg = f"FileGroupTask.data must be a list of paths, got {type(self.data).__name__}"
            raise TypeError(msg)
        if not self.data:
            logger.warning("FileGroupTask %r has no files", self.task_id)
            return False
        return True

    def get_deterministic_id(self) -> str:
        return get_deterministic_hash(self.data)  # it sorts
