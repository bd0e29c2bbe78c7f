"""NeMo Curator's backend integration suite (``tests/backends/test_integration.py``), with the
Dask executor as the backend: 15 files in 8 partitions, a fan-out to 100 rows, stages that
override ``process_batch``, log custom metrics and need ``setup_on_node`` before ``setup``.
NeMo's Ray call-counter actor becomes a file with one line per ``process_batch`` call."""

from __future__ import annotations

import collections
import contextlib
import json

import numpy as np
import pytest
from nemo_curator.tasks import FileGroupTask
from nemo_curator.tasks.utils import TaskPerfUtils

from curator_dask import DaskExecutor
from tests.nemo.nemo_pipelines import integration_pipeline, write_integration_input

TOTAL = 100
STAGE_NAMES = ["jsonl_reader", "add_length", "split_into_rows", "add_length",
               "stage_with_setup", "jsonl_writer"]


# Two executor shapes: the default (sources packed into Dask tasks when they are small), the
# process's shared one (tests/conftest.py), and one source per Dask task with a narrow window,
# on a cluster of its own (its settings differ); neither may change a call, an id or a record.
@pytest.fixture(scope="module", params=[{}, {"max_sources_per_task": 1, "max_in_flight": 1}],
                ids=["default", "one-source-per-task"])
def run(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("integration")
    write_integration_input(root / "input")
    counter = root / "call_counters.txt"
    shape = (DaskExecutor(n_workers=2, progress=False, **request.param) if request.param
             else contextlib.nullcontext(request.getfixturevalue("executor")))
    with shape as executor:
        tasks = integration_pipeline(root / "input", root / "output", counter).run(
            executor=executor)
    return root, tasks, counter


def test_output_files(run):
    root, _, _ = run
    files = sorted((root / "output").glob("*.jsonl"))
    assert len(files) == TOTAL
    for path in files:
        lines = path.read_text().splitlines()
        assert len(lines) == 1
        assert set(json.loads(lines[0])) == {"id", "text", "doc_length_1", "doc_length_2",
                                             "node_id", "random_string"}


def test_output_tasks(run):
    _, tasks, _ = run
    assert len(tasks) == TOTAL
    assert all(isinstance(t, FileGroupTask) for t in tasks)
    assert len({t.task_id for t in tasks}) == TOTAL
    assert {t.dataset_name for t in tasks} == {"input"}


def test_task_id_lineage(run):
    _, tasks, _ = run
    from curator_dask.lineage import get_deterministic_hash

    rows_per_partition = collections.Counter()
    for t in tasks:
        parts = t.task_id.split("_")
        assert all(parts), t.task_id  # no empty segment
        assert len(parts) == 8 and parts[0] == "0" and parts[2:4] == ["0", "0"]
        assert parts[5:] == ["0", "0", "0"]
        rows_per_partition[parts[1]] += 1
    sizes = sorted(rows_per_partition.values())
    assert sizes == [6, 12, 12, 12, 12, 12, 12, 22]  # 8 partitions of the 15 files
    # the partition segment is the hash of its files, as NeMo's FileGroupTask computes it
    first = next(iter(rows_per_partition))
    assert len(first) == 12 and first != get_deterministic_hash([])


def test_perf_stats(run):
    _, tasks, _ = run
    for t in tasks:
        assert [p.stage_name for p in t._stage_perf] == STAGE_NAMES
        assert all(p.process_time > 0 for p in t._stage_perf)
        assert t._stage_perf[1].num_items_processed == t._stage_perf[2].num_items_processed
        assert {p.num_items_processed for p in t._stage_perf[3:]} == {1}


def test_perf_stats_combined(run):
    _, tasks, _ = run
    metrics = TaskPerfUtils.collect_stage_metrics(tasks)
    assert set(metrics) == set(STAGE_NAMES)
    for values in metrics.values():
        assert isinstance(values["process_time"], np.ndarray)
        assert (values["process_time"] > 0).all()
        assert (values["num_items_processed"] > 0).all()
    assert len(metrics["add_length"]["process_time"]) == 8 + TOTAL
    assert (metrics["add_length"]["custom.counter_increment_s"] > 0).all()
    assert (metrics["add_length"]["custom.compute_len_s"] > 0).all()
    assert (metrics["split_into_rows"]["custom.split_into_rows_time_s"] > 0).all()


def test_stage_call_counts(run):
    _, _, counter = run
    calls = collections.Counter(counter.read_text().split())
    assert calls == {"add_length_doc_length_1": 8, "add_length_doc_length_2": TOTAL}
