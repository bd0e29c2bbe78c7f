"""The test suite, a package: helpers are imported as ``tests.helpers`` (the repo root is on
``sys.path`` under pytest, and Dask's spawned workers inherit it)."""
