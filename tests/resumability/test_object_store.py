"""Checkpoint, input and output on a real S3-compatible server (moto's server on 127.0.0.1)."""

from __future__ import annotations

import pytest

from curator_dask import Pipeline
from curator_dask.resumability.store import METADATA_DIRNAME, read_completed
from curator_dask.stages.text.io.reader import JsonlReader
from curator_dask.stages.text.io.writer import JsonlWriter
from tests.helpers import moto_s3
from tests.resumability.resume_test_stages import FailSoftOn

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3():
    with moto_s3("curator") as found:
        yield found


def test_resume_with_everything_on_s3(executor, s3, tmp_path):
    fs, options = s3
    for i in range(5):
        fs.pipe(f"curator/in/part-{i}.jsonl", f'{{"id": "{i}-0", "text": "doc {i}"}}\n'.encode())

    def make(bad=()):
        return (Pipeline(name="s3")
                .add_stage(JsonlReader(file_paths="s3://curator/in",
                                       read_kwargs={"storage_options": options}))
                .add_stage(FailSoftOn(bad_ids=bad))
                .add_stage(JsonlWriter(path="s3://curator/out",
                                       write_kwargs={"storage_options": options})))

    first = make(bad=("3-0",)).run(executor=executor, checkpoint_path="s3://curator/ckpt",
                                   checkpoint_storage_options=options)
    assert len(first) == 4 and first.checkpoint["pending"] == 1
    assert all(t.data[0].startswith("s3://curator/out/") for t in first)
    writer_files = fs.glob(f"curator/ckpt/{METADATA_DIRNAME}/*.mdb")
    assert len(writer_files) == 1
    local = tmp_path / "w.mdb"
    fs.get_file(writer_files[0], str(local))
    assert len(read_completed(str(local))) == 4  # a snapshot in NeMo's layout
    second = make().run(executor=executor, checkpoint_path="s3://curator/ckpt",
                        checkpoint_storage_options=options)
    assert (second.skipped_sources, len(second)) == (4, 1)
    assert len(fs.ls("curator/out")) == 5
    assert not [p for p in fs.ls("curator/out") if p.rsplit("/", 1)[-1].startswith(".")]
