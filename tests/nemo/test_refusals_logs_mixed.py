"""What cannot run without Ray is refused before anything runs; NeMo stages' loguru records
from the workers reach the driver; NeMo stages in a curator_dask ``Pipeline`` get jobs, strict
resume, stage checkpoints and input verification."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from nemo_curator.backends.utils import RayStageSpecKeys
from nemo_curator.pipeline import Pipeline as NemoPipeline
from nemo_curator.stages.base import ProcessingStage
from nemo_curator.stages.text.filters import ScoreFilter
from nemo_curator.stages.text.filters.heuristic import WordCountFilter
from nemo_curator.stages.text.io.reader import JsonlReader
from nemo_curator.stages.text.io.writer import JsonlWriter
from nemo_curator.tasks import DocumentBatch

from curator_dask import Pipeline
from curator_dask.jobs.job import ResumeMismatchError
from curator_dask.nemo.checks import RayOnlyStageError
from tests.nemo.nemo_pipelines import CountRows, curation_pipeline, write_input


@dataclass
class ShuffleLike(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Declares itself a shuffle between Ray actors, as NeMo's deduplication shuffles do."""

    name: str = "shuffle_like"

    def process(self, task):
        return task

    def ray_stage_spec(self):
        return {RayStageSpecKeys.IS_SHUFFLE_STAGE: True}


# NeMo's readers with _generate_ids / _assign_ids are no longer refused: they run on Dask
# (tests/nemo/test_nemo_ids.py), and are refused only on another NeMo version.
def test_ray_only_stages_are_refused_before_anything_runs(tmp_path):
    from curator_dask import DaskExecutor

    executor = DaskExecutor(n_workers=1, progress=False)
    pipeline = NemoPipeline(name="ray-only")
    pipeline.add_stage(JsonlReader(file_paths=str(write_input(tmp_path / "in", 2, 3))))
    pipeline.add_stage(ShuffleLike()).add_stage(JsonlWriter(path=str(tmp_path / "out")))
    with pytest.raises(RayOnlyStageError) as info:
        pipeline.run(executor=executor)
    message = str(info.value)
    assert "shuffle between Ray actors" in message
    assert "cannot run on the Dask executor" in message
    assert "\n" not in message
    assert executor.cluster is None and not list((tmp_path / "out").glob("*"))  # nothing ran


def test_loguru_records_from_workers_reach_the_driver(tmp_path, executor):
    from loguru import logger

    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(str(m)), format="{name} | {message}", level="INFO")
    try:
        data = write_input(tmp_path / "input", files=2, docs=5)
        curation_pipeline(data, tmp_path / "out", extra=[CountRows()]).run(executor=executor)
    finally:
        logger.remove(sink)
    lines = [s for s in seen if "count_rows saw" in s]
    assert len(lines) == 1  # one partition of 2 files
    assert lines[0].startswith("tests.nemo.nemo_pipelines | [worker tcp://127.0.0.1:")


def _import_data_juicer() -> None:
    import data_juicer  # noqa: F401 (its import removes every loguru sink of the process)


def test_loguru_records_reach_the_driver_after_a_library_removed_the_workers_sinks(
        tmp_path, executor):
    # Data-Juicer's operators import ``data_juicer`` on the shared workers, which removes the
    # bridge of an earlier NeMo run: the next run installs it again.
    curation_pipeline(write_input(tmp_path / "first", files=2, docs=5), tmp_path / "out1",
                      extra=[CountRows()]).run(executor=executor)
    executor.client.run(_import_data_juicer)
    test_loguru_records_from_workers_reach_the_driver(tmp_path, executor)


def _mixed(data, out, min_words: int = 6) -> Pipeline:
    p = Pipeline(name="mixed")
    p.add_stage(JsonlReader(file_paths=str(data), files_per_partition=2))
    p.add_stage(ScoreFilter(WordCountFilter(min_words=min_words), text_field="text"))
    p.add_stage(CountRows())
    return p.add_stage(JsonlWriter(path=str(out)))


def test_nemo_stages_in_a_curator_dask_pipeline_get_jobs_and_stage_checkpoints(tmp_path,
                                                                            executor):
    data = write_input(tmp_path / "input", files=4, docs=10)
    jobs = tmp_path / "jobs"
    first = _mixed(data, tmp_path / "out").run(
        executor=executor, work_dir=str(jobs), job_id="mixed", verify_inputs="fingerprint",
        stage_checkpoints={"strategy": "every_stage", "retention": "keep_all"})
    assert len(first) == 2 and first.job_id == "mixed"
    saved = first.stage_checkpoints["saved"]
    assert set(saved) == {"jsonl_reader", "word_count", "count_rows"}
    log = next((jobs / "mixed" / "logs").glob("driver-*.log")).read_text()
    assert "count_rows saw" in log  # a NeMo stage's record from a worker, in the job's log
    # strict resume sees the filter's parameter (not only its class name)
    with pytest.raises(ResumeMismatchError, match="min_words"):
        _mixed(data, tmp_path / "out", min_words=7).run(
            executor=executor, work_dir=str(jobs), resume="mixed", verify_inputs="fingerprint",
            stage_checkpoints={"strategy": "every_stage", "retention": "keep_all"})
    again = _mixed(data, tmp_path / "out").run(
        executor=executor, work_dir=str(jobs), resume="mixed", verify_inputs="fingerprint",
        stage_checkpoints={"strategy": "every_stage", "retention": "keep_all"})
    assert list(again) == [] and again.skipped_sources == 2
