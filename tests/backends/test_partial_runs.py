"""A run in which a stage returns ``FailedTask`` for some sources ends without an error, and
says so: ``RunResult.failed_sources``, one ``PartialRunWarning`` at the caller's line, the
driver's last INFO line and the notebook rendering (issue 20, item 1). With a checkpoint the
failed sources stay pending and a rerun retries exactly them; without one the driver still
names them, by the same ids.
"""

from __future__ import annotations

import logging
import os

import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from curator_dask.errors import PartialRunWarning
from curator_dask.sample_data import generate_jsonl
from tests.helpers import completed_ids
from tests.resumability.resume_test_stages import FailSoftOn, Rows

pytestmark = pytest.mark.slow

BAD = ("1-0", "3-0", "6-0")  # the first ids of three of the eight input files
WITH_CHECKPOINT = ("5 of 8 sources completed, 3 failed (a stage returned FailedTask) and stay "
                   "pending: run again with the same checkpoint to retry them")
WITHOUT = ("5 of 8 sources completed, 3 failed (a stage returned FailedTask): the run had no "
           "checkpoint, so nothing recorded them and a rerun processes every source again "
           "(give it a checkpoint to retry only them)")


def pipeline(tmp_path, *middle) -> Pipeline:
    p = Pipeline(name="partial").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
    for stage in middle:
        p.add_stage(stage)
    return p.add_stage(JsonlWriter(path=str(tmp_path / "out")))


def partial_warnings(recwarn) -> list:
    return [w for w in recwarn if issubclass(w.category, PartialRunWarning)]


def end_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "curator_dask.backends.dask.run" and r.getMessage().startswith(
                "Finished")]


def test_failed_sources_with_a_checkpoint_are_named_warned_once_and_retried(
        executor, tmp_path, caplog, recwarn):
    generate_jsonl(str(tmp_path / "in"), files=8, docs_per_file=2, seed=4)
    ckpt = str(tmp_path / "ckpt")
    caplog.set_level(logging.INFO, logger="curator_dask")

    first = pipeline(tmp_path, FailSoftOn(bad_ids=BAD)).run(executor=executor,
                                                            checkpoint_path=ckpt)

    assert first.num_failed_sources == 3 and first.completed_with_failures
    assert len(first) == 5 and first.failures_line() == WITH_CHECKPOINT
    done = completed_ids(ckpt)
    assert len(done) == 5 and not done & set(first.failed_sources)
    assert list(first.failed_sources) == sorted(first.checkpoint["failed_sources"])
    warned = partial_warnings(recwarn)
    assert [str(w.message) for w in warned] == [WITH_CHECKPOINT]
    assert warned[0].filename == __file__  # the caller's own line, not the library's
    lines = end_lines(caplog)
    assert len(lines) == 1 and lines[0].endswith(": " + WITH_CHECKPOINT), lines
    html = first._repr_html_()
    assert "<b>3 failed</b>" in html and first.failed_sources[0] in html
    assert "run again with the same checkpoint to retry them" in html

    # the same checkpoint, the stage fixed: exactly the failed sources run, and all is quiet
    caplog.clear()
    second = pipeline(tmp_path, FailSoftOn()).run(executor=executor, checkpoint_path=ckpt)
    assert second.skipped_sources == 5 and len(second) == 3
    assert completed_ids(ckpt) - done == set(first.failed_sources)
    assert second.failed_sources == () and second.failures_line() is None
    assert not second.completed_with_failures
    assert len(partial_warnings(recwarn)) == 1  # still only the first run's
    assert end_lines(caplog) == [
        f"Finished 3 sources in {second.wall_time:.2f} s: 3 output tasks"]
    assert "failed</b>" not in second._repr_html_()


def test_without_a_checkpoint_the_driver_names_the_same_sources(executor, tmp_path, recwarn):
    generate_jsonl(str(tmp_path / "in"), files=8, docs_per_file=2, seed=4)

    plain = pipeline(tmp_path, FailSoftOn(bad_ids=BAD)).run(executor=executor)

    assert [str(w.message) for w in partial_warnings(recwarn)] == [WITHOUT]
    assert plain.checkpoint is None and plain.num_failed_sources == 3
    assert len(os.listdir(tmp_path / "out")) == 5
    # the ids a checkpoint records for them: a checkpointed run of the same input fails them
    checked = pipeline(tmp_path, FailSoftOn(bad_ids=BAD)).run(
        executor=executor, checkpoint_path=str(tmp_path / "ckpt"))
    assert plain.failed_sources == checked.failed_sources and len(set(plain.failed_sources)) == 3


def test_a_failure_after_a_fan_out_names_its_source_once(executor, tmp_path, recwarn):
    """Rows splits each partition into one batch per row; one row's batch fails: its source
    (once, not once per batch) is named, the other rows of it still reach the writer."""
    generate_jsonl(str(tmp_path / "in"), files=4, docs_per_file=3, seed=5)

    plain = pipeline(tmp_path, Rows(), FailSoftOn(bad_ids=("2-1",))).run(executor=executor)
    checked = pipeline(tmp_path, Rows(), FailSoftOn(bad_ids=("2-1",))).run(
        executor=executor, checkpoint_path=str(tmp_path / "ckpt"))

    assert plain.num_failed_sources == checked.num_failed_sources == 1
    assert plain.failed_sources == checked.failed_sources
    assert dict(plain.stage_counts)["fail_soft_on"].failed == 1
    assert len(plain) == 11  # 12 rows, one failed
    assert str(partial_warnings(recwarn)[0].message).startswith(
        "3 of 4 sources completed, 1 failed (a stage returned FailedTask)")
