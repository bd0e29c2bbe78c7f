"""NeMo's readers on the Dask executor (issue 20, item 4): their file discovery runs on the
driver before the cluster starts, and a path that names no file keeps NeMo Curator's meaning
(a warning, nothing to do), since NeMo's own ``FilePartitioningStage`` runs unchanged."""

from __future__ import annotations

import pytest
from nemo_curator.pipeline import Pipeline as NemoPipeline
from nemo_curator.stages.text.io.reader import JsonlReader
from nemo_curator.stages.text.io.writer import JsonlWriter

from curator_dask.errors import StageError
from tests.backends.test_inputs_before_cluster import CountingExecutor


def _pipeline(file_paths, out) -> NemoPipeline:
    return (NemoPipeline(name="nemo-inputs").add_stage(JsonlReader(file_paths=file_paths))
            .add_stage(JsonlWriter(path=str(out))))


def test_nemo_discovery_error_ends_the_run_before_the_cluster_starts(tmp_path) -> None:
    executor = CountingExecutor(n_workers=1, progress=False)
    with pytest.raises(StageError, match="Invalid file paths: 5, must be a string or list"):
        _pipeline(5, tmp_path / "out").run(executor=executor)
    assert executor.starts == 0 and executor.cluster is None


def test_nemo_reader_on_a_missing_path_warns_and_does_nothing_as_in_nemo(tmp_path,
                                                                         executor) -> None:
    """Not a change of this issue: pinned because the head now runs before the cluster."""
    from loguru import logger

    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(m.record["message"]), level="WARNING")
    try:
        result = _pipeline(str(tmp_path / "typo"), tmp_path / "out").run(executor=executor)
    finally:
        logger.remove(sink)
    assert list(result) == [] and result.num_sources == 0
    assert f"No files found under {tmp_path / 'typo'}" in warnings
    assert not list((tmp_path / "out").iterdir())
