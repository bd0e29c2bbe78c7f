"""NeMo Curator's stages on row ranges: curator_dask's ``JsonlReader(partition=...)`` followed by
NeMo's filter in curator_dask's ``Pipeline`` (docs/partitions-inside-files.md), on the NeMo
tests' shared cluster."""

from __future__ import annotations

import json

import pytest
from nemo_curator.stages.text.filters import ScoreFilter
from nemo_curator.stages.text.filters.heuristic import WordCountFilter

from curator_dask import Pipeline
from curator_dask.stages.text.io.reader import JsonlReader
from curator_dask.stages.text.io.writer import JsonlWriter
from tests.helpers import completed_ids
from tests.partitions.test_partition_runs import output_ids, write_input

pytestmark = pytest.mark.slow


def test_nemo_stages_after_a_row_range_reader(executor, tmp_path):
    """The page's example: curator_dask's reader cuts the files, NeMo's filter runs on the
    ranges, in curator_dask's Pipeline."""
    write_input(tmp_path / "in", lines=9)
    (tmp_path / "in" / "part-1.jsonl").write_text(
        "\n".join(json.dumps({"id": f"s-{i}", "text": "too short"}) for i in range(5)))
    result = (Pipeline(name="nemo-ranges")
              .add_stage(JsonlReader(str(tmp_path / "in"), partition={"mode": "auto",
                                                                       "max_rows": 4}))
              .add_stage(ScoreFilter(WordCountFilter(min_words=3), text_field="text"))
              .add_stage(JsonlWriter(str(tmp_path / "out")))
              ).run(executor=executor, checkpoint_path=str(tmp_path / "ckpt"))
    assert result.num_sources == 3 + 2  # part-0: 10 lines in 3 ranges; part-1: 5 in 2
    assert output_ids(tmp_path / "out") == sorted(f"0-{i}" for i in range(9))
    assert len(completed_ids(tmp_path / "ckpt")) == 5  # the filtered ranges complete too
