"""``from curator_dask.pipeline import Pipeline``."""

from curator_dask.pipeline.pipeline import Pipeline

__all__ = ["Pipeline"]
