from __future__ import annotations

import pytest


@pytest.fixture(scope="package")
def executor():
    """One embedded cluster (2 worker processes) for every NeMo test module: none of them
    changes its workers, and each saves a cluster start of its own."""
    from curator_dask import DaskExecutor

    with DaskExecutor(n_workers=2, progress=False) as ex:
        yield ex
