"""verify_inputs: completed sources whose input files changed are reprocessed or refused.

Real LocalCluster, real files and LMDB checkpoints. NeMo Curator would skip these sources
silently (its ids hash paths only).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from curator_dask.resumability.input_check import InputChangedError, InputCheck
from curator_dask.sample_data import generate_jsonl

pytestmark = pytest.mark.slow


def pipeline(tmp_path: Path) -> Pipeline:
    p = Pipeline(name="v").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
    return p.add_stage(JsonlWriter(path=str(tmp_path / "out")))


def output_text(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in sorted((tmp_path / "out").iterdir()))


def rewrite(path: Path, text: str, *, keep_stat: bool = False) -> None:
    st = path.stat()
    path.write_text(text)
    if keep_stat:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_fingerprint_reprocesses_a_changed_source(executor, tmp_path):
    generate_jsonl(str(tmp_path / "in"), files=3, docs_per_file=2, seed=11)
    ckpt = str(tmp_path / "ckpt")
    first = pipeline(tmp_path).run(executor=executor, checkpoint_path=ckpt,
                                   verify_inputs="fingerprint")
    assert len(first) == 3
    changed = tmp_path / "in" / "part-00001.jsonl"
    rewrite(changed, '{"id": "new-0", "text": "rewritten input"}\n')
    again = pipeline(tmp_path).run(executor=executor, checkpoint_path=ckpt,
                                   verify_inputs="fingerprint")
    assert again.skipped_sources == 2 and len(again) == 1
    assert "rewritten input" in output_text(tmp_path)
    # the new fingerprint was recorded once the source completed: a third run skips it
    third = pipeline(tmp_path).run(executor=executor, checkpoint_path=ckpt,
                                   verify_inputs="fingerprint")
    assert third.skipped_sources == 3 and len(third) == 0


def test_error_mode_names_the_file_and_processes_nothing(executor, tmp_path):
    generate_jsonl(str(tmp_path / "in"), files=2, docs_per_file=2, seed=12)
    ckpt = str(tmp_path / "ckpt")
    pipeline(tmp_path).run(executor=executor, checkpoint_path=ckpt, verify_inputs="fingerprint")
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    rewrite(tmp_path / "in" / "part-00000.jsonl", '{"id": "z", "text": "other"}\n')
    changed = r"modified: \S+part-00000\.jsonl \(.*size \d+ -> \d+"
    with pytest.raises(InputChangedError, match=changed) as err:
        pipeline(tmp_path).run(executor=executor, checkpoint_path=ckpt,
                               verify_inputs="fingerprint", on_input_change="error")
    assert "Nothing was processed or deleted" in str(err.value)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


def test_content_mode_sees_a_same_size_same_mtime_edit(executor, tmp_path):
    generate_jsonl(str(tmp_path / "in"), files=2, docs_per_file=2, seed=13)
    ckpt = str(tmp_path / "ckpt")
    pipeline(tmp_path).run(executor=executor, checkpoint_path=ckpt, verify_inputs="content")
    path = tmp_path / "in" / "part-00000.jsonl"
    text = path.read_text()
    rewrite(path, text.replace("a", "b", 1), keep_stat=True)  # same size, same mtime
    missed = pipeline(tmp_path).run(executor=executor, checkpoint_path=ckpt,
                                    verify_inputs="fingerprint")
    assert missed.skipped_sources == 2  # metadata cannot see it...
    caught = pipeline(tmp_path).run(executor=executor, checkpoint_path=ckpt,
                                    verify_inputs="content")
    assert caught.skipped_sources == 1 and len(caught) == 1  # ...the sha256 does


def test_sources_completed_without_verification_get_a_baseline(executor, tmp_path, caplog):
    generate_jsonl(str(tmp_path / "in"), files=2, docs_per_file=1, seed=14)
    ckpt = tmp_path / "ckpt"
    pipeline(tmp_path).run(executor=executor, checkpoint_path=str(ckpt))
    # off: no fingerprints (the partitioning record is the only addition to NeMo's layout)
    assert not (ckpt / ".curator_dask" / "input_fingerprints").exists()
    with caplog.at_level("WARNING", logger="curator_dask"):
        result = pipeline(tmp_path).run(executor=executor, checkpoint_path=str(ckpt),
                                        verify_inputs="fingerprint")
    assert result.skipped_sources == 2
    assert "2 completed sources have no recorded input fingerprint" in caplog.text
    records = list((ckpt / ".curator_dask" / "input_fingerprints").glob("*.json"))
    assert len(records) == 1
    assert len(json.loads(records[0].read_text())["sources"]) == 2


def test_settings_are_checked(tmp_path):
    with pytest.raises(ValueError, match="verify_inputs must be one of off, fingerprint, "
                                         "content"):
        InputCheck("always", "reprocess", str(tmp_path))
    with pytest.raises(ValueError, match="on_input_change must be one of reprocess, error"):
        InputCheck("content", "skip", str(tmp_path))
    generate_jsonl(str(tmp_path / "in"), files=1, docs_per_file=1, seed=15)
    with pytest.raises(ValueError, match="verify_inputs='content' needs checkpoint_path"):
        pipeline(tmp_path).run(verify_inputs="content")
