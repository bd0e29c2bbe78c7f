"""Marker tasks: the implicit root and the filtered / failed slots.

See docs/design/contract.md §1.6.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from curator_dask.tasks.tasks import Task


@dataclass(repr=False)
class SentinelTask(Task[None]):
    """A task with no payload. Framework markers derive from it.

    Example:
        >>> SentinelTask().num_items
        0
    """

    dataset_name: str = "sentinel"
    data: None = None

    def __post_init__(self) -> None:
        assert self.data is None, "sentinel tasks carry no data"  # noqa: S101 (upstream contract)
        super().__post_init__()

    @property
    def num_items(self) -> int:
        return 0

    def validate(self) -> bool:
        return True


@dataclass(repr=False)
class EmptyTask(SentinelTask):
    """The implicit root of every pipeline; its id is ``"0"``.

    Example:
        >>> EmptyTask().task_id
        '0'
    """

    dataset_name: str = "empty"
    task_id: str = field(init=False, default="0")


@dataclass(repr=False)
class NoneTask(SentinelTask):
    """An intentionally filtered slot (a stage returned ``None``)."""

    dataset_name: str = "none"


@dataclass(repr=False)
class FailedTask(SentinelTask):
    """A failed slot: the source stays pending and is retried on resume.

    Example:
        >>> def process(self, task):
        ...     try:
        ...         return call_service(task)
        ...     except TimeoutError:
        ...         return FailedTask()
    """

    dataset_name: str = "failed"
