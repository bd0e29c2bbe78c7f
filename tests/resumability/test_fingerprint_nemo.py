"""Fingerprints of NeMo Curator's stages cover the parameters of the filters and modifiers they
hold (NeMo keeps them in ``_`` attributes: ``WordCountFilter._min_words``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nemo_curator.stages.text.filters import ScoreFilter
from nemo_curator.stages.text.filters.heuristic import NonAlphaNumericFilter, WordCountFilter
from nemo_curator.stages.text.modifiers import LineRemover, Modify, UrlRemover

from curator_dask.resumability.fingerprint import (
    config_fingerprint,
    diff_configs,
    stage_fingerprint,
)
from curator_dask.resumability.stage_checkpoints import chain_fingerprint

ROOT = Path(__file__).resolve().parents[2]


def test_word_count_parameters_are_seen():
    a = config_fingerprint([ScoreFilter(WordCountFilter(min_words=5))])
    b = config_fingerprint([ScoreFilter(WordCountFilter(min_words=6))])
    assert a["digest"] != b["digest"]
    assert diff_configs(a, b) == ["stages[0] (word_count).params.filter_obj[0]._min_words: 5 -> 6"]
    assert config_fingerprint([ScoreFilter(WordCountFilter(min_words=5))]) == a
    held = a["stages"][0]["params"]["filter_obj"][0]
    assert held["__class__"] == "nemo_curator.stages.text.filters.heuristic.string.WordCountFilter"
    assert (held["_min_words"], held["_max_words"]) == (5, 100000)


def test_non_alpha_numeric_ratio_is_seen():
    def fp(ratio: float) -> dict:
        return stage_fingerprint(ScoreFilter(NonAlphaNumericFilter(
            max_non_alpha_numeric_to_text_ratio=ratio)))

    assert fp(0.25) == fp(0.25)
    assert fp(0.25) != fp(0.3)
    assert fp(0.3)["params"]["filter_obj"][0]["_cutoff"] == 0.3


def test_modify_url_remover_is_stable_across_processes():
    here = stage_fingerprint(Modify(UrlRemover()))
    assert here == stage_fingerprint(Modify(UrlRemover()))
    assert here["params"]["modifier_fn"] == [
        {"__class__": "nemo_curator.stages.text.modifiers.string.url_remover.UrlRemover",
         "_name": "UrlRemover"}]
    code = ("import json; from nemo_curator.stages.text.modifiers import Modify, UrlRemover; "
            "from curator_dask.resumability.fingerprint import stage_fingerprint; "
            "print(json.dumps(stage_fingerprint(Modify(UrlRemover()))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONHASHSEED": "7"})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here


def test_per_document_scratch_is_not_configuration():
    used = WordCountFilter(min_words=5)
    used.score_document("a few words here")
    used.sentences, used.paragraphs, used.ngrams = ["a"], ["a few"], {"a": 1}
    assert stage_fingerprint(ScoreFilter(used)) == stage_fingerprint(
        ScoreFilter(WordCountFilter(min_words=5)))


def test_chain_fingerprint_follows_held_parameters():
    def chain(min_words: int, patterns: list[str]) -> list:
        return [ScoreFilter(WordCountFilter(min_words=min_words)),
                Modify(LineRemover(patterns=patterns))]

    base = chain(5, ["Share this"])
    assert chain_fingerprint(base, 1) == chain_fingerprint(chain(5, ["Share this"]), 1)
    assert chain_fingerprint(base, 0) != chain_fingerprint(chain(6, ["Share this"]), 0)
    assert chain_fingerprint(base, 1) != chain_fingerprint(chain(6, ["Share this"]), 1)
    # a change after the boundary leaves the checkpoints before it usable
    other_patterns = chain(5, ["Read more"])
    assert chain_fingerprint(base, 0) == chain_fingerprint(other_patterns, 0)
    assert chain_fingerprint(base, 1) != chain_fingerprint(other_patterns, 1)
