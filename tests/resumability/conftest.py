"""Fixtures shared by the resumability tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import fsspec
import pytest


@pytest.fixture
def mem_ckpt() -> Iterator[str]:
    """A checkpoint URL in a fresh ``memory://`` bucket, removed afterwards."""
    bucket = f"curator-dask-test-{uuid.uuid4().hex}"
    yield f"memory://{bucket}/ckpt"
    fs = fsspec.filesystem("memory")
    if fs.exists(f"/{bucket}"):
        fs.rm(f"/{bucket}", recursive=True)
