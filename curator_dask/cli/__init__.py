"""Command line interface (``python -m curator_dask``). Heavy imports happen inside commands."""
