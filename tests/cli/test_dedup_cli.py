"""``python -m curator_dask dedup exact|fuzzy``: a real run in a subprocess (one line per phase,
NeMo's layout, the deduplicated corpus), and the usage errors that end it before any cluster."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from tests.helpers import REPO_ROOT, cli


def _corpus(root):
    root.mkdir()
    texts = ["the cat sat on the mat", "The  cat sat on the mat ", "a dog barked",
             "the cat sat on the mat", "something else entirely"]
    for f in range(2):
        with open(root / f"part-{f}.jsonl", "w") as out:
            for i, text in enumerate(texts):
                out.write(json.dumps({"doc": f"{f}-{i}", "text": text}) + "\n")
    return root


def test_dedup_exact_writes_nemos_layout_and_the_deduplicated_corpus(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    out = tmp_path / "out"
    done = cli("dedup", "exact", str(corpus), "--output", str(out), "--normalize-text",
               "--remove", "--workers", "2", timeout=300)
    assert done.returncode == 0, done.stderr
    # 10 documents, 3 distinct normalised texts
    assert "exact_deduplication: 7 duplicates found" in done.stdout, done.stdout
    assert "exact dedup: hashed 10 documents" in done.stderr, done.stderr  # a line per phase
    assert sorted(p.name for p in out.iterdir()) == [
        "ExactDuplicateIds", "deduplicated", "exact_id_generator.json"]
    kept = pd.concat(pd.read_json(p, lines=True) for p in (out / "deduplicated").iterdir())
    assert sorted(kept["doc"]) == ["0-0", "0-2", "0-4"]  # the smallest id of each text
    assert kept["text"].str.lower().str.split().str.join(" ").is_unique
    # how to map the ids to documents (issue 32, item 13a)
    assert "which documents:" in done.stdout and "--id-field" in done.stdout, done.stdout


def test_a_group_over_the_blocksize_is_warned_of_once(tmp_path):
    """Issue 32, item 13b: the plan, the hash pipeline and the removal each plan the groups."""
    corpus = _corpus(tmp_path / "corpus")
    done = cli("dedup", "exact", str(corpus), "--output", str(tmp_path / "out"),
               "--blocksize", "100B", "--remove", "--workers", "1", timeout=300)
    assert done.returncode == 0, done.stderr
    for name in ("part-0.jsonl", "part-1.jsonl"):
        lines = [line for line in done.stderr.splitlines()
                 if "exceeded the storage limit" in line and name in line]
        assert len(lines) == 1, done.stderr


def test_row_ranges_split_the_files_of_phase_1(tmp_path):
    """Issue 35, item 2: --partition-mode manual --num-partitions N gives N tasks, ranges of
    the two files, with the same duplicates as whole files."""
    corpus = _corpus(tmp_path / "corpus")
    done = cli("dedup", "exact", str(corpus), "--output", str(tmp_path / "out"),
               "--normalize-text", "--partition-mode", "manual", "--num-partitions", "3",
               "--remove", "--workers", "2", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "exact_deduplication: 7 duplicates found" in done.stdout, done.stdout
    assert "hashed 10 documents in 3 file groups" in done.stderr, done.stderr
    kept = pd.concat(pd.read_json(p, lines=True)
                     for p in (tmp_path / "out" / "deduplicated").iterdir())
    assert sorted(kept["doc"]) == ["0-0", "0-2", "0-4"]


def test_a_dedup_run_as_a_job_shows_its_phases_in_status(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    jobs = str(tmp_path / "jobs")
    done = cli("dedup", "exact", str(corpus), "--output", str(tmp_path / "out"),
               "--job-id", "dd1", "--work-dir", jobs, "--workers", "1", timeout=300)
    assert done.returncode == 0, done.stderr
    status = cli("status", "dd1", "--work-dir", jobs, timeout=120)
    assert status.returncode == 0, status.stderr
    assert "phase hash" in status.stdout and "phase duplicate_ids" in status.stdout, (
        status.stdout)


@pytest.mark.parametrize(("extra", "says"), [
    (["--num-partitions", "3"], "--num-partitions needs --partition-mode manual"),
    (["--partition-mode", "manual"], "--partition-mode manual needs --num-partitions N"),
    (["--partition-mode", "auto", "--num-partitions", "2"], "drop --num-partitions"),
])
def test_partition_options_are_checked_before_any_cluster(tmp_path, extra, says):
    done = cli("dedup", "exact", str(tmp_path), "--output", str(tmp_path / "out"), *extra,
               timeout=120)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_the_readmes_dedup_outputs_are_ignored_by_git():
    """Issue 32, item 13c: the README's dedup commands run in examples/ and write dedup/."""
    for path in ("examples/dedup/exact/ExactDuplicateIds/part.0.parquet",
                 "examples/dedup/cache/LSHStage/x.parquet"):
        found = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO_ROOT)
        assert found.returncode == 0, f"{path} is not ignored by .gitignore"


@pytest.mark.parametrize(("args", "message"), [
    (["fuzzy", "{corpus}", "--output", "{out}"], "dedup fuzzy needs --cache DIR"),
    (["fuzzy", "{corpus}", "--output", "{out}", "--cache", "{out}/c", "--jaccard-threshold",
      "1.5"], "--jaccard-threshold must be in (0, 1]"),
    (["exact", "{missing}", "--output", "{out}"], "missing"),
])
def test_dedup_usage_errors_exit_2_in_one_line(tmp_path, args, message):
    corpus = _corpus(tmp_path / "corpus")
    fill = {"corpus": str(corpus), "out": str(tmp_path / "out"),
            "missing": str(tmp_path / "missing")}
    done = cli("dedup", *[a.format(**fill) for a in args], timeout=300)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out" / "ExactDuplicateIds").exists()
