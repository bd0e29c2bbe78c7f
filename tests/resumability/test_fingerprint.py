"""Configuration and input fingerprints for strict resume (pure)."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from curator_dask.resumability.stage_checkpoints import chain_fingerprint

ROOT = Path(__file__).resolve().parents[2]


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


class MinChars:
    """A helper object a stage holds, keeping its parameters the way NeMo's filters do: in
    ``_`` attributes, next to run-time state that is not configuration."""

    def __init__(self, min_chars: int = 5, words: tuple[str, ...] = ("a", "b")) -> None:
        self._min_chars = min_chars
        self.words = set(words)
        self._pattern = re.compile(r"\w+", re.IGNORECASE)
        self._split = str.split
        self._clean = functools.partial(re.sub, r"\s+", " ")
        self._lock = threading.Lock()
        self._log = logging.getLogger("tests.fingerprint")
        self._thread = threading.Thread(target=print)

    def __call__(self, text: str) -> bool:
        return len(text) >= self._min_chars


@dataclass
class HoldsRule(ProcessingStage):
    rule: Any = None
    name: str = "holds_rule"

    def process(self, task):
        return task


def held(**kw) -> list:
    return [HoldsRule(rule=MinChars(**kw)), HoldsRule(rule=[MinChars()], name="second")]


def test_held_object_parameters_change_the_fingerprint():
    a, b = config_fingerprint(held(min_chars=5)), config_fingerprint(held(min_chars=6))
    assert a["digest"] != b["digest"]
    assert diff_configs(a, b) == ["stages[0] (holds_rule).params.rule._min_chars: 5 -> 6"]
    assert config_fingerprint(held(min_chars=5))["digest"] == a["digest"]  # rebuilt: equal
    c = config_fingerprint(held(words=("a", "c")))
    assert diff_configs(a, c) == ['stages[0] (holds_rule).params.rule.words[1]: "b" -> "c"']
    assert chain_fingerprint(held(min_chars=5), 1) != chain_fingerprint(held(min_chars=6), 1)
    rule = a["stages"][0]["params"]["rule"]
    assert rule["__class__"] == "tests.resumability.test_fingerprint.MinChars"
    assert rule["_pattern"] == {"__class__": "re.Pattern", "pattern": "\\w+", "flags": 34}
    assert rule["_split"] == "<callable builtins.str.split>"
    assert rule["_clean"]["args"] == ["\\s+", " "]
    assert (rule["_lock"], rule["_log"], rule["_thread"]) == (
        "<_thread.lock>", "<logging.Logger>", "<threading.Thread>")


def test_held_object_fingerprint_is_the_same_in_another_process():
    code = ("import json; from tests.resumability.test_fingerprint import held; "
            "from curator_dask.resumability.fingerprint import config_fingerprint; "
            "print(json.dumps(config_fingerprint(held(words=tuple('abcdefghij')))))")
    here = config_fingerprint(held(words=tuple("abcdefghij")))
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                             text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed})
        assert json.loads(out.stdout) == here
    assert " at 0x" not in json.dumps(here)


class Credentials:
    def __init__(self, token: str) -> None:
        self._hf_token = token
        self.storage_options = {"key": "AKIA", "secret": token, "anon": False}


class Node:
    def __init__(self, size: int) -> None:
        self.me = self
        self.values = list(range(size))


def test_secrets_cycles_and_large_containers():
    a = stage_fingerprint(HoldsRule(rule=Credentials("hf_sekrit")))
    b = stage_fingerprint(HoldsRule(rule=Credentials("hf_other")))
    assert "sekrit" not in json.dumps(a) and "AKIA" not in json.dumps(a)
    assert a["params"]["rule"]["_hf_token"].startswith("<redacted sha256:")
    assert a["params"]["rule"]["storage_options"]["anon"] is False
    assert a != b  # a changed credential is still seen
    node = stage_fingerprint(HoldsRule(rule=Node(1000)))["params"]["rule"]
    assert node["me"] == "<cycle tests.resumability.test_fingerprint.Node>"
    assert set(node["values"]) == {"__len__", "__sha256__"} and node["values"]["__len__"] == 1000
    other = stage_fingerprint(HoldsRule(rule=Node(1001)))["params"]["rule"]
    assert other["values"] != node["values"]
    # a stage's own fields keep their full form, however long
    assert stage_fingerprint(HoldsRule(rule=list(range(1000))))["params"]["rule"] == list(
        range(1000))


def test_fingerprints_import_no_nemo_curator_and_no_ray():
    code = ("import sys; from tests.resumability.test_fingerprint import built, held; "
            "from curator_dask.resumability.fingerprint import config_fingerprint; "
            "config_fingerprint(built() + held()); "
            "print(sorted(m for m in ('nemo_curator', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"


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
