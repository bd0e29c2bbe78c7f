"""Rows dropped per stage (issue 13, item 3) and the printable counts table (item 7), counted
by the real StageAdapter on real tasks."""

from __future__ import annotations

import json

import pyarrow as pa

from curator_dask.backends.counts import StageCount
from curator_dask.backends.dask.adapter import StageAdapter
from curator_dask.backends.dask.result import CountsTable, RunResult
from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import DocumentBatch, FailedTask, FileGroupTask
from tests.backends.dask_test_stages import DropShortRows


def batch(*texts: str, task_id: str = "0_a") -> DocumentBatch:
    task = DocumentBatch(dataset_name="d", data=pa.table({"text": list(texts)}))
    task.task_id = task_id
    return task


class ToFiles(ProcessingStage):
    """A writer's shape: document batches in, one file group out."""

    name = "to_files"

    def process(self, task):
        return FileGroupTask(dataset_name="d", data=["out.jsonl"])


class FailSecond(ProcessingStage):
    """Fails the second batch of every call, passes the others through."""

    name = "fail_second"
    batch_size = 2

    def process_batch(self, tasks):
        return [tasks[0], FailedTask()]


def run(stage: ProcessingStage, tasks: list) -> StageCount:
    count = StageCount()
    StageAdapter(stage).process_batch(tasks, count)
    return count


def test_a_row_filter_counts_the_rows_it_drops_and_no_filtered_tasks():
    count = run(DropShortRows(min_chars=3), [batch("a", "bbb", "cc", "dddd")])
    assert (count.items_in, count.items_out, count.rows_dropped, count.filtered) == (4, 2, 2, 0)


def test_a_batch_returned_as_none_is_one_filtered_task_and_all_its_rows_dropped():
    count = run(DropShortRows(min_chars=10), [batch("a", "bb")])
    assert (count.tasks_out, count.filtered, count.rows_dropped) == (0, 1, 2)


def test_a_stage_whose_items_change_meaning_drops_nothing():
    count = run(ToFiles(), [batch("a", "bb", "ccc")])
    assert (count.items_in, count.items_out, count.rows_dropped) == (3, 1, 0)


def test_the_rows_of_a_failed_task_are_failed_not_dropped():
    count = run(FailSecond(), [batch("a", "b", task_id="0_a"), batch("c", "d", "e",
                                                                     task_id="0_b")])
    assert (count.failed, count.rows_dropped, count.items_out) == (1, 0, 2)


def test_counts_table_prints_aligned_and_stays_a_list_of_dicts():
    result = RunResult([])
    result.stage_counts = [("reader", StageCount(tasks_in=1, items_in=1, items_out=3200)),
                           ("keep_long_documents", StageCount(items_in=3200, items_out=2908,
                                                              rows_dropped=292, seconds=1.5))]
    table = result.counts_table()
    assert isinstance(table, CountsTable) and isinstance(table, list)
    assert table[1] == {"stage": "keep_long_documents", **StageCount(
        items_in=3200, items_out=2908, rows_dropped=292, seconds=1.5).__dict__}
    lines = str(table).splitlines()
    assert lines[0].split("  ")[0] == "stage" and "rows dropped" in lines[0]
    assert repr(table) == str(table) and "{" not in str(table)
    # every column ends where its heading ends (numbers right-aligned under it)
    end = lines[0].index("rows dropped") + len("rows dropped")
    assert lines[2][:end].endswith(" 292") and lines[1][:end].endswith(" 0")
    assert lines[2].split() == ["keep_long_documents", "0", "0", "3200", "2908", "292", "0",
                                "0", "1.50"]
    assert json.loads(json.dumps(table))[1]["rows_dropped"] == 292
    import pandas as pd

    assert pd.DataFrame(table).set_index("stage").loc["keep_long_documents",
                                                       "rows_dropped"] == 292
    html = result._repr_html_()
    assert "<th>rows dropped</th>" in html and "<td>292</td>" in html
