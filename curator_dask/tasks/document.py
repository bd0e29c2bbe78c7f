"""``DocumentBatch``: a table of documents, as a pyarrow Table or a pandas DataFrame."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from curator_dask.tasks.tasks import Task

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


@dataclass(repr=False)
class DocumentBatch(Task[Any]):
    """A batch of documents. ``data`` is a ``pyarrow.Table`` or a ``pandas.DataFrame``.

    Conversions are lazy and cheap where Arrow allows (``to_pyarrow`` on a Table is free).

    Example:
        >>> import pyarrow as pa
        >>> b = DocumentBatch(dataset_name="d", data=pa.table({"text": ["a", "bb"]}))
        >>> b.num_items, list(b.to_pandas()["text"])
        (2, ['a', 'bb'])
    """

    def to_pyarrow(self) -> pa.Table:
        """The data as a ``pyarrow.Table``."""
        import pyarrow as pa

        if isinstance(self.data, pa.Table):
            return self.data
        return pa.Table.from_pandas(self.data, preserve_index=False)

    def to_pandas(self) -> pd.DataFrame:
        """The data as a ``pandas.DataFrame``."""
        import pyarrow as pa

        if isinstance(self.data, pa.Table):
            return self.data.to_pandas()
        return self.data

    @property
    def num_items(self) -> int:
        return len(self.data)

    @property
    def columns(self) -> list[str]:
        import pyarrow as pa

        if isinstance(self.data, pa.Table):
            return list(self.data.column_names)
        return [str(c) for c in self.data.columns]

    def validate(self) -> bool:
        import sys

        import pyarrow as pa

        if isinstance(self.data, pa.Table):
            return True
        pd = sys.modules.get("pandas")  # a DataFrame implies pandas is already imported
        if pd is None or not isinstance(self.data, pd.DataFrame):
            msg = (
                "DocumentBatch.data must be a pyarrow.Table or pandas.DataFrame, "
                f"got {type(self.data).__name__}"
            )
            raise TypeError(msg)
        return True
