"""Configuration and input fingerprints for strict resume (pure)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage, Resources
from curator_dask.resumability.fingerprint import (
    config_fingerprint,
    diff_configs,
    diff_inputs,
    input_fingerprints,
    stage_fingerprint,
)


@dataclass
class Threshold(ProcessingStage):
    min_chars: int = 50
    languages: tuple[str, ...] = ("en",)
    name: str = "threshold"

    def process(self, task):
        return task


def built(**kw) -> list:
    p = Pipeline(name="fp").add_stage(JsonlReader(file_paths="/data/in", files_per_partition=2))
    p.add_stage(Threshold(**kw)).add_stage(JsonlWriter(path="memory://fp-test-out"))
    p.build()
    return p.stages


def test_same_pipeline_same_digest_and_no_diff():
    a, b = config_fingerprint(built(), checkpoint="/c"), config_fingerprint(built(),
                                                                            checkpoint="/c")
    assert a["digest"] == b["digest"] and len(a["digest"]) == 64
    assert diff_configs(a, b) == []


def test_changed_parameter_is_named():
    a = config_fingerprint(built(min_chars=50))
    b = config_fingerprint(built(min_chars=60))
    assert a["digest"] != b["digest"]
    assert diff_configs(a, b) == ["stages[2] (threshold).params.min_chars: 50 -> 60"]
    c = config_fingerprint(built(languages=("en", "de")))
    assert diff_configs(a, c) == ['stages[2] (threshold).params.languages: ["en"] -> ["en", "de"]']


def test_roles_resources_settings_and_stage_count_are_compared():
    stages = built()
    changed = built()
    changed[2].resources = Resources(gpus=1)
    diffs = diff_configs(config_fingerprint(stages), config_fingerprint(changed))
    assert diffs == ["stages[2] (threshold).resources.gpus: 0.0 -> 1"]
    a = config_fingerprint(stages, checkpoint="/c1")
    b = config_fingerprint(stages, checkpoint="/c2")
    assert diff_configs(a, b) == ['settings.checkpoint: "/c1" -> "/c2"']
    shorter = config_fingerprint(stages[:3])
    assert diff_configs(a, shorter)[0].startswith("stages: 4 stages -> 3 stages")


def test_stage_fingerprint_fields():
    fp = stage_fingerprint(built()[1])
    assert fp["class"] == "curator_dask.stages.text.io.reader.jsonl.JsonlReaderStage"
    assert (fp["name"], fp["source"], fp["sink"], fp["batch_size"]) == ("jsonl_reader", False,
                                                                        False, 1)
    source = stage_fingerprint(built()[0])
    assert source["source"] and source["params"]["files_per_partition"] == 2
    assert "fs" not in stage_fingerprint(built()[3])["params"]  # runtime objects are not config


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 1000), st.integers(0, 1000))
def test_digest_differs_exactly_when_diff_is_nonempty(x, y):
    a, b = config_fingerprint(built(min_chars=x)), config_fingerprint(built(min_chars=y))
    assert (a["digest"] == b["digest"]) == (diff_configs(a, b) == [])


def test_input_fingerprints_and_diff(tmp_path):
    files = []
    for i in range(3):
        path = tmp_path / f"f{i}.jsonl"
        path.write_text(f'{{"text": "{i}"}}\n')
        files.append(str(path))
    cheap = input_fingerprints(files)
    assert set(cheap) == set(files) and all("mtime" in v and v["size"] == 14
                                             for v in cheap.values())
    full = input_fingerprints(files, content=True)
    assert len({v["sha256"] for v in full.values()}) == 3
    assert diff_inputs(full, input_fingerprints(files, content=True)) == []
    # same size and mtime, different bytes: only the content hash sees it
    stat = os.stat(files[1])
    with open(files[1], "w") as f:
        f.write('{"text": "X"}\n')
    os.utime(files[1], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert diff_inputs(cheap, input_fingerprints(files)) == []
    changed = diff_inputs(full, input_fingerprints(files, content=True))
    assert len(changed) == 1 and changed[0].startswith(f"modified: {files[1]} (sha256 ")
    os.remove(files[2])
    (tmp_path / "f3.jsonl").write_text("{}\n")
    now = input_fingerprints([*files[:2], str(tmp_path / "f3.jsonl")])
    # f1 kept its size and mtime, so only the removed and the added file are named
    assert diff_inputs(cheap, now) == [f"removed: {files[2]}",
                                       f"added: {tmp_path / 'f3.jsonl'}"]


def test_memory_inputs_have_a_fingerprint():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/fp-mem/a.jsonl", b"{}\n")
    try:
        fp = input_fingerprints(["memory://fp-mem/a.jsonl"], content=True)
        assert fp["memory://fp-mem/a.jsonl"]["size"] == 3
        assert len(fp["memory://fp-mem/a.jsonl"]["sha256"]) == 64
    finally:
        fs.rm("/fp-mem", recursive=True)
