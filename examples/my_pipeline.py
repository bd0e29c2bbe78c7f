"""A pipeline given as a Python function, for the command line:

    python -m curator_dask run my_pipeline.py:build --no-progress   # from examples/

It reads the demo's input (``python generate_sample_data.py --if-missing`` makes it), keeps the
documents longer than 80 characters (``stages.py``) and writes them to ``output-long/``. Paths
are taken from this file's folder, so ``run examples/my_pipeline.py:build`` from the repository
root does the same.
"""

from __future__ import annotations

import os

from stages import KeepLongDocuments

from curator_dask import JsonlReader, JsonlWriter, Pipeline

HERE = os.path.dirname(os.path.abspath(__file__))


def build() -> Pipeline:
    """The pipeline ``run my_pipeline.py:build`` runs: JSONL in, long documents out (two
    input files per partition)."""
    return (
        Pipeline(name="my_pipeline", description="keep documents longer than 80 characters")
        .add_stage(JsonlReader(file_paths=os.path.join(HERE, "input"), files_per_partition=2,
                               fields=["id", "text"]))
        .add_stage(KeepLongDocuments(min_chars=80))
        .add_stage(JsonlWriter(path=os.path.join(HERE, "output-long")))
    )
