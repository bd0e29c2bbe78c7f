"""The head that discovers files (from ``EmptyTask``) runs on the driver before the cluster
starts (issue 20, item 4): a wrong input path ends ``Pipeline.run`` with the
``NoInputFilesError`` itself, and no cluster was started or reached for it.

``CountingExecutor`` is a real ``DaskExecutor`` that counts its ``start()`` calls (the one way
a run gets its cluster); the run that follows with a real input proves the count moves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.sample_data import generate_jsonl
from curator_dask.stages.file_partitioning import NoInputFilesError


class CountingExecutor(DaskExecutor):
    """A real ``DaskExecutor`` that counts how often a run asked for its cluster."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.starts = 0

    def start(self):
        self.starts += 1
        return super().start()


def _pipeline(file_paths: str | list[str], out: Path) -> Pipeline:
    return (Pipeline(name="inputs-first").add_stage(JsonlReader(file_paths=file_paths))
            .add_stage(JsonlWriter(path=str(out))))


@pytest.mark.parametrize(
    ("entry", "reason"),
    [("does-not-exist", "does not exist"), ("in/nothing-*.jsonl", "matches no file"),
     (["in/part-00000.jsonl", "in/typo.jsonl"], "typo.jsonl does not exist")],
    ids=["missing", "empty-glob", "missing-entry-of-a-list"])
def test_missing_input_raises_no_input_files_error_before_the_cluster(tmp_path: Path, entry,
                                                                      reason: str) -> None:
    generate_jsonl(str(tmp_path / "in"), files=1, docs_per_file=2)
    paths = ([str(tmp_path / e) for e in entry] if isinstance(entry, list)
             else str(tmp_path / entry))
    executor = CountingExecutor(n_workers=1, progress=False)
    with pytest.raises(NoInputFilesError, match=reason) as info:
        _pipeline(paths, tmp_path / "out").run(executor=executor,
                                               checkpoint_path=str(tmp_path / "ckpt"))
    assert type(info.value) is NoInputFilesError  # itself, not a StageError around it
    # a path that is not there is a typo: the fix is the path (issue 32, item 3), while a
    # glob that matches nothing may be an empty input to accept
    fix = "allow_no_files=True" if "*" in str(entry) else "check the path"
    assert fix in str(info.value) and "Traceback" not in str(info.value)
    assert executor.starts == 0 and executor.cluster is None
    assert not (tmp_path / "out").exists()  # nothing made for a run that never started


@pytest.mark.slow
def test_the_same_executor_starts_its_cluster_once_the_input_exists(tmp_path: Path) -> None:
    executor = CountingExecutor(n_workers=1, progress=False)
    with pytest.raises(NoInputFilesError):
        _pipeline(str(tmp_path / "in"), tmp_path / "out").run(executor=executor)
    assert executor.starts == 0
    generate_jsonl(str(tmp_path / "in"), files=2, docs_per_file=3)
    result = _pipeline(str(tmp_path / "in"), tmp_path / "out").run(executor=executor)
    assert executor.starts == 1 and result.num_sources == 2
    assert len(list((tmp_path / "out").iterdir())) == 2
    # the head ran on the driver before the cluster was connected
    assert result.timings["head"] < result.timings["cluster"]
