"""Data-Juicer recipes on Dask: a recipe's own operators, partitions, checkpoints and job
folder, run by curator_dask's cluster (docs/data-juicer.md).

Nothing here imports Data-Juicer until a recipe runs: ``import curator_dask.data_juicer`` is
cheap, and Data-Juicer is an optional extra (``pip install "curator_dask[data-juicer]"``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["DataJuicerDaskExecutor", "is_data_juicer_recipe", "load_recipe"]


def __getattr__(name: str) -> Any:
    if name == "DataJuicerDaskExecutor":
        from curator_dask.data_juicer.executor import DataJuicerDaskExecutor

        return DataJuicerDaskExecutor
    if name in ("is_data_juicer_recipe", "load_recipe"):
        from curator_dask.data_juicer import recipe

        return getattr(recipe, name)
    msg = f"module 'curator_dask.data_juicer' has no attribute {name!r}"
    raise AttributeError(msg)
