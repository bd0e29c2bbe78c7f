"""Phase 1 of the dedup workflows (curator_dask/dedup/phases.py): one signature file per file
group, ids given in plan order after the run, a resumed phase 1 keeping completed groups."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import pandas as pd
import pytest

from curator_dask.dedup.phases import SignatureSpec, group_key, run_phase1


@dataclass(frozen=True)
class Md5:
    text_field: str = "text"

    def __call__(self, df: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"_hashes": [hashlib.md5(t.encode()).hexdigest()
                                         for t in df[self.text_field]]})


def _corpus(root, sizes):
    root.mkdir(exist_ok=True)
    for i, n in enumerate(sizes):
        with open(root / f"f{i}.jsonl", "w") as f:
            for j in range(n):
                f.write(json.dumps({"text": f"doc {i}-{j}", "own": 1000 * i + j}) + "\n")
    return str(root)


def _phase1(executor, inp, out, **kw):
    opts = dict(input_path=inp, input_filetype="jsonl", input_blocksize=None,
                input_file_extensions=None, read_kwargs=None, id_field=None, assign_id=True,
                out_dir=out, checkpoint_path=None)
    opts.update(kw)
    return run_phase1(executor, SignatureSpec("exact", Md5()), **opts)


def test_ids_follow_plan_order_not_completion_order(executor, tmp_path):
    # the largest file first in size, so a worker finishes the small ones earlier
    inp = _corpus(tmp_path / "in", [40, 3, 7, 1, 12])
    result = _phase1(executor, inp, str(tmp_path / "out"))
    files = sorted(os.path.join(inp, f) for f in os.listdir(inp))
    assert [list(g.files) for g in result.groups] == [[f] for f in files]
    assert [g.first_id for g in result.groups] == [0, 40, 43, 50, 51]
    frame = result.frame().compute()
    assert sorted(frame["_curator_dedup_id"]) == list(range(63))
    # each group's rows are contiguous and in file order
    gen = result.id_generator()
    assert gen.get_batch_range([files[2]], None) == (43, 49)
    assert os.path.exists(tmp_path / "out" / f"{group_key([files[0]])}.parquet")


def test_a_second_run_gives_the_same_ids(executor, tmp_path):
    inp = _corpus(tmp_path / "in", [5, 9, 2])
    one = _phase1(executor, inp, str(tmp_path / "a")).frame().compute()
    two = _phase1(executor, inp, str(tmp_path / "b")).frame().compute()
    pd.testing.assert_frame_equal(one.reset_index(drop=True), two.reset_index(drop=True))


def test_own_ids_are_kept(executor, tmp_path):
    inp = _corpus(tmp_path / "in", [4, 4])
    result = _phase1(executor, inp, str(tmp_path / "out"), assign_id=False, id_field="own")
    frame = result.frame().compute()
    assert sorted(frame["_curator_dedup_id"]) == [0, 1, 2, 3, 1000, 1001, 1002, 1003]


def test_assign_id_false_without_an_id_field_is_refused(executor, tmp_path):
    inp = _corpus(tmp_path / "in", [1])
    with pytest.raises(ValueError, match="id_field"):
        _phase1(executor, inp, str(tmp_path / "out"), assign_id=False)


def test_a_checkpointed_rerun_keeps_the_completed_files(executor, tmp_path):
    inp = _corpus(tmp_path / "in", [3, 3])
    out, ckpt = tmp_path / "out", str(tmp_path / "ckpt")
    _phase1(executor, inp, str(out), checkpoint_path=ckpt)
    kept = sorted(out.iterdir())
    stamps = [p.stat().st_mtime_ns for p in kept]
    again = _phase1(executor, inp, str(out), checkpoint_path=ckpt)
    assert [p.stat().st_mtime_ns for p in sorted(out.iterdir())] == stamps  # not rewritten
    assert again.num_documents == 6
    kept[0].unlink()  # completed in the checkpoint, its file gone: named, not silently lost
    with pytest.raises(FileNotFoundError, match="fresh checkpoint"):
        _phase1(executor, inp, str(out), checkpoint_path=ckpt)


def test_an_empty_file_is_a_group_without_documents(executor, tmp_path):
    inp = _corpus(tmp_path / "in", [3, 2])
    (tmp_path / "in" / "f9.jsonl").write_text("")  # e.g. a removal that emptied a file
    result = _phase1(executor, inp, str(tmp_path / "out"))
    assert [g.rows for g in result.groups] == [3, 2, 0]
    assert sorted(result.frame().compute()["_curator_dedup_id"]) == [0, 1, 2, 3, 4]
