"""Every NeMo stage class the migration page lists runs on ``DaskExecutor``.

The list is the page's table (docs/migrating-from-nemo-curator.md, "NeMo stages that run on
Dask"), read here so that the page and the test cannot drift apart: each class is imported from
the module the page names and run in a real NeMo ``Pipeline`` (NeMo's ``JsonlReader`` → the
stages → NeMo's ``JsonlWriter``) on the package's 2-worker cluster, one pipeline per way of use
(filters, modifiers, stages, readers and writers), and its output files are compared, byte for
byte, with NeMo's own ``BaseStageAdapter`` in process. Classes that need a model get one made
here (``page_stages.make_models``), and the page must say what they need.
"""

from __future__ import annotations

import importlib
import json
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from tests.nemo.nemo_pipelines import InProcessExecutor, files_of
from tests.nemo.page_stages import (
    FILTERS,
    MODIFIERS,
    NOTHING,
    PAGE,
    make_models,
    page_rows,
    write_corpus,
)

ROWS = page_rows()
# The stages the page lists, in the order of the chain that runs them all.
STAGE_CHAIN = ["Score", "Filter", "ScoreFilter", "Modify", "DocumentSplitter", "DocumentJoiner",
               "AddId"]
READ_WRITE = {"JsonlReader", "ParquetReader", "JsonlWriter", "ParquetWriter"}


def listed(used_as: str) -> dict[str, type]:
    """The page's classes used as ``used_as``, imported from the module the page names."""
    classes = {}
    for row in ROWS:
        if row.used_as == used_as:
            module = importlib.import_module(row.module)
            classes.update({name: getattr(module, name) for name in row.classes})
    return classes


def rows_of(directory: Path) -> list[dict]:
    return [json.loads(line) for data in files_of(directory).values()
            for line in data.decode().splitlines()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("page_stages")
    return root, write_corpus(root / "input"), make_models(root / "models")


def run_both(executor, root: Path, name: str, middle, columns=(), *, read=None) -> list[dict]:
    """``JsonlReader`` (or ``read()``) → ``middle()`` → ``JsonlWriter`` under Dask and under
    NeMo's adapter in process; checks each of ``columns`` (``{class name: column}``, so that a
    difference names its class), then the files, and returns the rows written under Dask."""
    from nemo_curator.pipeline import Pipeline
    from nemo_curator.stages.text.io.reader import JsonlReader
    from nemo_curator.stages.text.io.writer import JsonlWriter

    outputs = {}
    for label, run_on in (("dask", executor), ("reference", InProcessExecutor())):
        pipeline = Pipeline(name=f"page-{name}")
        pipeline.add_stage(read() if read else JsonlReader(file_paths=str(root / "input"),
                                                           files_per_partition=1))
        for stage in middle():
            pipeline.add_stage(stage)
        outputs[label] = root / f"{name}-{label}"
        pipeline.add_stage(JsonlWriter(path=str(outputs[label])))
        pipeline.run(executor=run_on)
    got, ref = rows_of(outputs["dask"]), rows_of(outputs["reference"])
    assert got, f"the {name} pipeline wrote no rows"
    assert [r["id"] for r in got] == [r["id"] for r in ref], f"{name}: other rows than NeMo's"
    for cls, column in dict(columns).items():
        assert all(column in r for r in got), f"{cls} wrote no {column!r}"
        assert [r[column] for r in got] == [r[column] for r in ref], f"{cls}: not NeMo's values"
    assert files_of(outputs["dask"]) == files_of(outputs["reference"]), name
    return got


def test_the_page_lists_what_the_test_runs():
    """A class on the page that the test cannot build, or one the test builds that the page
    does not list, fails here by name."""
    on_page = {name for row in ROWS for name in row.classes}
    known = set(FILTERS) | set(MODIFIERS) | set(STAGE_CHAIN) | READ_WRITE
    assert on_page - known == set(), "listed on the page; add a construction to page_stages.py"
    assert known - on_page == set(), "built by the test; list it on the page or drop it"
    assert {row.used_as for row in ROWS} == {"filter", "modifier", "stage", "reader", "writer"}


@pytest.mark.parametrize("name", sorted(set(FILTERS) | set(MODIFIERS)))
def test_the_page_says_what_each_class_needs(name):
    """What a class needs beyond its arguments (a model, a tokenizer, a file) is on the page;
    a class the test builds from its arguments alone is marked as needing nothing."""
    build = FILTERS.get(name) or MODIFIERS[name]
    (needs,) = [row.needs for row in ROWS if name in row.classes]
    if build.needs:
        missing = [word for word in build.needs if word not in needs]
        assert missing == [], f"{name}: the page's needs cell {needs!r} lacks {missing}"
    else:
        assert needs == NOTHING, f"{name} needs nothing here, the page says {needs!r}"


@pytest.mark.slow
def test_filters(executor, corpus):
    from nemo_curator.stages.text.filters import ScoreFilter

    root, _, models = corpus
    filters = listed("filter")

    def middle():
        return [ScoreFilter(cls(**FILTERS[name].kwargs(models)), text_field=FILTERS[name].field,
                            score_field=f"score_{name}") for name, cls in filters.items()]

    # Every row written was scored by every filter, with NeMo's values. RepeatingTopNGramsFilter
    # agrees only where no two n-grams tie for the top (page_stages.LEAD): check the corpus.
    from nemo_curator.stages.text.utils.text_utils import get_ngrams, get_word_splitter

    split = get_word_splitter("en")
    for row in rows_of(root / "input"):
        top = Counter(get_ngrams(split(row["text"].strip()), 2)).most_common(2)
        assert row["id"].endswith("-7") or top[0][1] > top[1][1], (row["id"], top)
    got = run_both(executor, root, "filters", middle, {n: f"score_{n}" for n in filters})
    written = {row["id"] for row in got}
    french = {f"{f}-7" for f in range(3)}
    assert written.isdisjoint(french) and len(written) > len(french)  # the fastText model ran


@pytest.mark.slow
def test_modifiers(executor, corpus):
    from nemo_curator.stages.text.modifiers import Modify

    root, _, models = corpus
    modifiers = listed("modifier")

    def middle():
        return [Modify(cls(**MODIFIERS[name].kwargs(models)), input_fields=MODIFIERS[name].field,
                       output_fields=f"modified_{name}") for name, cls in modifiers.items()]

    got = run_both(executor, root, "modifiers", middle, {n: f"modified_{n}" for n in modifiers})
    for name in modifiers:  # the corpus has a document for each to change (page_stages)
        column = f"modified_{name}"
        assert any(r[column] != r[MODIFIERS[name].field] for r in got), f"{name} changed nothing"
    fixed = [r["modified_UnicodeReformatter"] for r in got if "cafÃ©" in r["text"]]
    assert fixed and all("café" in text for text in fixed)  # ftfy ran


@pytest.mark.slow
def test_stages(executor, corpus):
    from nemo_curator.stages.text.filters.heuristic import NumbersFilter, WordCountFilter
    from nemo_curator.stages.text.modifiers import UrlRemover

    root, _, _ = corpus
    stages = listed("stage")
    assert set(stages) == set(STAGE_CHAIN)
    arguments = {
        "Score": {"score_fn": WordCountFilter(min_words=30), "score_field": "words"},
        "Filter": {"filter_fn": WordCountFilter(min_words=30), "filter_field": "words"},
        "ScoreFilter": {"filter_obj": NumbersFilter(), "score_field": "numbers"},
        "Modify": {"modifier_fn": UrlRemover()},
        "DocumentSplitter": {"separator": "\n\n"},
        "DocumentJoiner": {"separator": "\n\n"},
        "AddId": {"id_field": "doc_id"},
    }

    def middle():
        return [stages[name](**arguments[name]) for name in STAGE_CHAIN]

    got = run_both(executor, root, "stages", middle, {"ScoreFilter": "numbers", "Score": "words"})
    inputs = {r["id"]: r for r in rows_of(root / "input")}
    assert 0 < len(got) < len(inputs)  # Filter dropped the short (French) documents
    assert all(r["words"] >= 30 and "numbers" in r and r["doc_id"].startswith("0_") for r in got)
    for row in got:  # split on paragraphs and joined again: the text UrlRemover left
        assert row["text"] == UrlRemover().modify_document(inputs[row["id"]]["text"])
        assert "segment_id" not in row


@pytest.mark.slow
def test_readers_and_writers(executor, corpus):
    """NeMo's ParquetWriter under Dask, read back with its ParquetReader (under Dask and in
    process), gives the corpus."""
    from nemo_curator.pipeline import Pipeline

    root, _, _ = corpus
    readers, writers = listed("reader"), listed("writer")
    assert set(readers) | set(writers) == READ_WRITE
    to_parquet = Pipeline(name="page-parquet")
    to_parquet.add_stage(readers["JsonlReader"](file_paths=str(root / "input"),
                                                files_per_partition=1))
    to_parquet.add_stage(writers["ParquetWriter"](path=str(root / "parquet")))
    to_parquet.run(executor=executor)
    assert sorted(p.suffix for p in (root / "parquet").iterdir()) == [".parquet"] * 3

    got = run_both(executor, root, "from-parquet", lambda: [],
                   read=lambda: readers["ParquetReader"](file_paths=str(root / "parquet")))
    by_id = sorted(rows_of(root / "input"), key=lambda r: r["id"])
    assert sorted(got, key=lambda r: r["id"]) == by_id


def test_the_nemo_and_test_extras_bring_nemos_text_cpu_extra():
    """``Modify(UnicodeReformatter())`` failed at import (no ftfy) with the documented install:
    NeMo's CPU text stages import the packages of its ``text-cpu`` extra."""
    project = tomllib.loads((PAGE.parents[1] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for extra in ("nemo", "test"):
        assert "nemo-curator[text-cpu]==1.4.*" in extras[extra], extra
