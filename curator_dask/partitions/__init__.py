"""Row-range partitions ("partitions inside files"): ``partition=`` of the readers and of
``FilePartitioningStage``; see docs/partitions-inside-files.md.

- ``spec.py``: the ``partition=`` value (``PartitionSpec``); pure;
- ``jsonl.py``, ``parquet.py``: lines and byte ranges of JSONL files (a newline scan over
  chunks), row groups and row ranges of Parquet files, and the content digests;
- ``plan.py``: ``plan_partitions`` (manual and auto), ``Piece``, ``Partition``;
- ``record.py``: ``partitioning_info.json`` under the checkpoint;
- ``resume.py``: strict resume from that record (``settle``, ``verify``).
"""

from curator_dask.partitions.spec import PartitionSpec

__all__ = ["PartitionSpec"]
