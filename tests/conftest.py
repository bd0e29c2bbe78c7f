from __future__ import annotations

# Imported up front: CPython 3.11.7 can raise "AST constructor recursion depth mismatch" when
# a module is compiled while other threads are importing (gh-106905), which happened when
# hypothesis was first imported at session end while cluster threads were shutting down.
import hypothesis  # noqa: F401
import pytest

from curator_dask.sample_data import generate_jsonl


@pytest.fixture
def jsonl_input(tmp_path):
    """Six JSONL files of 5 documents each (about 10 % shorter than 50 characters)."""
    return generate_jsonl(str(tmp_path / "input"), files=6, docs_per_file=5, short_fraction=0.3,
                          seed=7)
