"""Fixtures of the deduplication tests."""

from __future__ import annotations

import pytest

from curator_dask.ids import generator as ids


@pytest.fixture(autouse=True)
def no_generator():
    """Each test starts and ends without an id generator in this process (there is one per
    driver process, as there is one named actor per Ray cluster)."""
    if ids.id_generator_exists():
        ids.kill_id_generator_actor()
    yield
    if ids.id_generator_exists():
        ids.kill_id_generator_actor()
