"""Completion counters (docs/design/contract.md §3.1–§3.3) and the adapter's deltas (§8
``tests/backends/test_resumability_adapter.py`` and ``test_resumability_functional.py``).

Pure code plus real LMDB files in ``tmp_path``: no Dask cluster, no Ray.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator_dask.backends.dask.adapter import StageAdapter, run_stages
from curator_dask.resumability.counters import (
    CounterBook,
    DeltaLog,
    StageDeltas,
    source_deltas,
    stage_deltas,
)
from curator_dask.resumability.store import CompletionStore
from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import EmptyTask, FailedTask, NoneTask, Task

COUNTERS_LOGGER = "curator_dask.resumability.counters"


@dataclass(repr=False)
class Item(Task[Any]):
    """A minimal real task; ``key`` is its content id at a source stage."""

    dataset_name: str = "d"
    data: Any = 0
    key: str | None = None

    @property
    def num_items(self) -> int:
        return 1

    def validate(self) -> bool:
        return True

    def get_deterministic_id(self) -> str | None:
        return self.key


def node(task_id: str = "s_0", sid: str = "s", data: Any = 0) -> Item:
    task = Item(data=data)
    task.task_id = task_id
    task._source_id = sid
    return task


@dataclass
class Fn(ProcessingStage[Task, Task]):
    """A stage whose per-task behaviour is a function (default ``process_batch``)."""

    fn: Callable[[Task], Any] = lambda t: t
    name: str = "fn"

    def process(self, task: Task) -> Any:
        return self.fn(task)


@dataclass
class BatchFn(ProcessingStage[Task, Task]):
    """A stage whose whole-batch behaviour is a function."""

    fn: Callable[[list[Task]], list[Any]] = lambda ts: list(ts)
    name: str = "batch_fn"
    batch_size: int | None = 2
    calls: list[int] = field(default_factory=list)

    def process_batch(self, tasks: list[Task]) -> list[Any]:
        self.calls.append(len(tasks))
        return self.fn(tasks)


class DropStage(ProcessingStage[Task, Task]):
    """Upstream's ``_DropStage``: filters everything."""

    name = "drop"

    def process(self, task: Task) -> None:
        return None


def sink(stage: ProcessingStage) -> ProcessingStage:
    stage.is_sink_stage = True
    return stage


def source(stage: ProcessingStage) -> ProcessingStage:
    stage.is_source_stage = True
    return stage


def run_adapter(stage: ProcessingStage, inputs: list[Task]) -> tuple[list[Task], DeltaLog]:
    log = DeltaLog()
    out = StageAdapter(stage).process_batch(inputs, None, log)
    return out, log


def uncomplete_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records
        if r.name == COUNTERS_LOGGER and r.levelno == logging.WARNING
    ]


# --------------------------------------------------------------------------------------------
# §3.1 source stage
# --------------------------------------------------------------------------------------------


class TestSourceDeltas:
    def test_content_ids_give_plus_one_each(self) -> None:
        stage = source(Fn(fn=lambda _: [Item(key="aaa"), Item(key="bbb")], name="source"))
        out, log = run_adapter(stage, [EmptyTask()])
        assert [t.task_id for t in out] == ["0_aaa", "0_bbb"]
        # The adapter fires nothing for a source stage: the driver opens sources itself.
        assert log.deltas == []
        assert not log
        assert source_deltas(out) == [("0_aaa", "aaa", 1), ("0_bbb", "bbb", 1)]
        assert [t._source_id for t in out] == ["aaa", "bbb"]

    def test_positional_ids(self) -> None:
        stage = source(Fn(fn=lambda _: [Item(), Item(), Item()], name="source"))
        out, _ = run_adapter(stage, [EmptyTask()])
        assert source_deltas(out) == [("0_0", "0", 1), ("0_1", "1", 1), ("0_2", "2", 1)]

    def test_source_id_is_last_segment_of_a_deep_id(self) -> None:
        task = node("0_3_abc", "")
        assert source_deltas([task]) == [("0_3_abc", "abc", 1)]
        assert task._source_id == "abc"

    def test_sentinels_fire_nothing(self) -> None:
        none, failed, real = NoneTask(), FailedTask(), Item()
        none.task_id, failed.task_id, real.task_id = "0_0", "0_1", "0_2"
        assert source_deltas([none, failed, real]) == [("0_2", "2", 1)]
        assert none._source_id == ""
        assert failed._source_id == ""

    def test_completed_source_is_not_reopened(self) -> None:
        """§3.1 step 3 with completed {"b"}: only a and c are opened."""
        tasks = [node(f"0_{s}", "") for s in "abc"]
        opened = source_deltas(tasks)
        book = CounterBook(completed={"b"})
        todo = [d for d in opened if not book.is_completed(d[1])]
        assert todo == [("0_a", "a", 1), ("0_c", "c", 1)]
        assert book.apply(todo) == ([], [])
        assert book.pending == {"a": 1, "c": 1}
        assert book.completed == {"b"}


# --------------------------------------------------------------------------------------------
# §3.2 non-source stages: every table row, through StageAdapter.process_batch
# --------------------------------------------------------------------------------------------

ROWS = [
    # (id, process fn, is_sink, expected deltas, expected failed, n real outputs)
    ("1to1-nonsink", lambda t: Item(), False, [("s_0_0", "s", 0)], [], 1),
    ("1to1-sink", lambda t: Item(), True, [("s_0_0", "s", -1)], [], 1),
    ("same-object-nonsink", lambda t: t, False, [("s_0_0", "s", 0)], [], 1),
    ("none-nonsink", lambda t: None, False, [("s_0_0", "s", -1)], [], 0),
    ("none-sink", lambda t: None, True, [("s_0_0", "s", -1)], [], 0),
    ("nonetask-nonsink", lambda t: NoneTask(), False, [("s_0_0", "s", -1)], [], 0),
    ("failed-nonsink", lambda t: FailedTask(), False, [("s_0_0", "s", 0)], ["s"], 0),
    ("failed-sink", lambda t: FailedTask(), True, [("s_0_0", "s", 0)], ["s"], 0),
    ("fanout3-nonsink", lambda t: [Item(), Item(), Item()], False, [("s_0_0", "s", 2)], [], 3),
    ("fanout3-sink", lambda t: [Item(), Item(), Item()], True, [("s_0_0", "s", -1)], [], 3),
    (
        "real-none-failed-nonsink",
        lambda t: [Item(), None, FailedTask()],
        False,
        [("s_0_0", "s", 1)],
        ["s"],
        1,
    ),
    (
        "real-real-failed-sink",
        lambda t: [Item(), Item(), FailedTask()],
        True,
        [("s_0_0", "s", 0)],
        ["s"],
        2,
    ),
    ("none-none-nonsink", lambda t: [None, None], False, [("s_0_0", "s", -1)], [], 0),
    (
        "failed-failed-nonsink",
        lambda t: [FailedTask(), FailedTask()],
        False,
        [("s_0_0", "s", 1)],
        ["s"],
        0,
    ),
    ("sentinel-first-fanout", lambda t: [None, Item()], False, [("s_0_0", "s", 0)], [], 1),
]


class TestStageDeltaTable:
    @pytest.mark.parametrize(
        ("fn", "is_sink", "expected", "failed", "n_real"),
        [r[1:] for r in ROWS],
        ids=[r[0] for r in ROWS],
    )
    def test_row(
        self, fn: Callable, is_sink: bool, expected: list, failed: list, n_real: int
    ) -> None:
        stage = Fn(fn=fn)
        stage.is_sink_stage = is_sink
        out, log = run_adapter(stage, [node()])
        assert log.deltas == expected
        assert sorted(log.failed) == failed
        assert log.warnings == []
        assert len(out) == n_real
        # Sentinels are stripped; every real child inherits the parent's source id.
        assert all(not isinstance(t, NoneTask | FailedTask) for t in out)
        assert [t._source_id for t in out] == ["s"] * n_real

    def test_fanout_children_ids_and_inheritance(self) -> None:
        out, log = run_adapter(Fn(fn=lambda t: [Item(), Item(), Item()]), [node()])
        assert [t.task_id for t in out] == ["s_0_0", "s_0_1", "s_0_2"]
        assert [t._source_id for t in out] == ["s", "s", "s"]
        assert log.deltas == [("s_0_0", "s", 2)]

    def test_one_to_one_child_inherits(self) -> None:
        child = Item()
        out, _ = run_adapter(Fn(fn=lambda t: child), [node("s_0", "s")])
        assert out == [child]
        assert (child.task_id, child._source_id) == ("s_0_0", "s")

    def test_child_with_own_source_id_keeps_it_but_delta_uses_parent(self) -> None:
        child = Item()
        child._source_id = "other"
        _, log = run_adapter(sink(Fn(fn=lambda t: child)), [node()])
        assert child._source_id == "other"
        assert log.deltas == [("s_0_0", "s", -1)]

    def test_fanout_child_with_own_source_id_keeps_it(self) -> None:
        own = Item()
        own._source_id = "other"
        out, log = run_adapter(Fn(fn=lambda t: [own, Item()]), [node()])
        assert [t._source_id for t in out] == ["other", "s"]
        assert log.deltas == [("s_0_0", "s", 1)]

    def test_drop_stage_full_process_batch(self) -> None:
        out, log = run_adapter(DropStage(), [node()])
        assert out == []
        assert log.deltas == [("s_0_0", "s", -1)]
        assert log.message("r") == {
            "run": "r", "deltas": [("s_0_0", "s", -1)], "failed": [], "warnings": []
        }

    def test_pre_source_fires_nothing(self) -> None:
        task = Item()
        task.task_id = "0"
        out, log = run_adapter(sink(Fn(fn=lambda t: [Item(), None])), [task])
        assert len(out) == 1
        assert log.deltas == []
        assert not log
        assert out[0]._source_id == ""

    def test_empty_output_fires_nothing(self) -> None:
        out, log = run_adapter(sink(Fn(fn=lambda t: [])), [node()])
        assert out == []
        assert log.deltas == []
        assert log.warnings == []
        assert not log

    def test_n_to_n_sink_with_filtered_slot(self) -> None:
        stage = sink(BatchFn(fn=lambda ts: [Item(), None]))
        out, log = run_adapter(stage, [node("s_0", "s"), node("t_0", "t")])
        assert [t.task_id for t in out] == ["s_0_0"]
        assert log.deltas == [("s_0_0", "s", -1), ("t_0_0", "t", -1)]

    def test_n_to_n_nonsink_failed_and_real(self) -> None:
        stage = BatchFn(fn=lambda ts: [FailedTask(), Item()])
        out, log = run_adapter(stage, [node("s_0", "s"), node("t_0", "t")])
        assert [(t.task_id, t._source_id) for t in out] == [("t_0_0", "t")]
        assert log.deltas == [("s_0_0", "s", 0), ("t_0_0", "t", 0)]
        assert log.failed == {"s"}

    @pytest.mark.parametrize("n_out", [1, 3])
    def test_m_to_k_fires_nothing_and_warns(
        self, n_out: int, caplog: pytest.LogCaptureFixture
    ) -> None:
        class MergeStage(BatchFn):
            pass

        stage = sink(MergeStage(fn=lambda ts: [Item() for _ in range(n_out)]))
        with caplog.at_level(logging.WARNING, logger=COUNTERS_LOGGER):
            out, log = run_adapter(stage, [node("s_0", "s"), node("t_0", "t")])
        text = (
            f"resumability: MergeStage produced {n_out} outputs for 2 inputs; can't attribute "
            "sources, skipping counter update for this batch."
        )
        assert log.deltas == []
        assert log.warnings == [text]
        assert bool(log)
        assert uncomplete_warnings(caplog) == [text]
        assert len(out) == n_out
        for task in out:
            assert task.task_id.startswith("r")
            assert task._source_id == ""

    def test_stage_deltas_directly(self) -> None:
        parent = node("s_0", "s")
        outs = [Item(), NoneTask(), FailedTask()]
        for i, o in enumerate(outs):
            o.task_id = f"s_0_{i}"
        result = stage_deltas("X", [parent], outs, is_sink=False)
        assert result == StageDeltas(deltas=[("s_0_0", "s", 1)], failed_sources=["s"])
        assert stage_deltas("X", [parent], [], is_sink=True) == StageDeltas()


class TestDeltaLog:
    def test_collects_several_stage_calls(self, caplog: pytest.LogCaptureFixture) -> None:
        log = DeltaLog()
        assert not log
        log.add(StageDeltas(deltas=[("a_0_0", "a", 2)]))
        log.add(StageDeltas(deltas=[("b_0_0", "b", 0)], failed_sources=["b"]))
        log.add(StageDeltas(failed_sources=["a", "b"]))
        with caplog.at_level(logging.WARNING, logger=COUNTERS_LOGGER):
            log.add(StageDeltas(warning="w1"))
        assert uncomplete_warnings(caplog) == ["w1"]
        msg = log.message("run7")
        assert msg == {
            "run": "run7",
            "deltas": [("a_0_0", "a", 2), ("b_0_0", "b", 0)],
            "failed": ["a", "b"],
            "warnings": ["w1"],
        }
        msg["deltas"].append(("x", "x", 1))
        assert len(log.deltas) == 2

    def test_failed_only_is_truthy(self) -> None:
        log = DeltaLog()
        log.add(StageDeltas(failed_sources=["s"]))
        assert bool(log)

    def test_run_stages_fills_one_log_across_fused_stages(self) -> None:
        split = Fn(fn=lambda t: [Item(data=i) for i in range(3)])
        keep_odd = Fn(fn=lambda t: t if t.data % 2 else None)
        last = sink(Fn(fn=lambda t: t))
        log = DeltaLog()
        batches, _ = run_stages(
            [StageAdapter(split), StageAdapter(keep_odd), StageAdapter(last)], [[node()]], log
        )
        assert [t.task_id for b in batches for t in b] == ["s_0_1_0_0"]
        assert log.deltas == [
            ("s_0_0", "s", 2),
            ("s_0_0_0", "s", -1),
            ("s_0_1_0", "s", 0),
            ("s_0_2_0", "s", -1),
            ("s_0_1_0_0", "s", -1),
        ]
        book = CounterBook()
        assert book.apply([("0_s", "s", 1)]) == ([], [])
        assert book.apply(log.deltas) == (["s"], [])


# --------------------------------------------------------------------------------------------
# §3.3 apply_deltas rules, on CounterBook
# --------------------------------------------------------------------------------------------


class TestCounterBookArithmetic:
    def test_source_opens_increment(self) -> None:
        book = CounterBook()
        assert book.apply([("h0", "0", 1), ("h1", "1", 1)]) == ([], [])
        assert book.pending == {"0": 1, "1": 1}
        assert book.completed == set()

    def test_counter_reaching_zero_completes(self) -> None:
        book = CounterBook()
        book.apply([("h0", "0", 1)])
        assert book.apply([("h_sink", "0", -1)]) == (["0"], [])
        assert book.completed == {"0"}
        assert "0" not in book.pending
        assert book.is_completed("0")
        assert not book.is_completed("1")

    def test_zero_delta_keeps_pending(self) -> None:
        book = CounterBook()
        book.apply([("h0", "0", 1)])
        assert book.apply([("h_pass", "0", 0)]) == ([], [])
        assert book.pending == {"0": 1}

    def test_fanout_grows_counter(self) -> None:
        book = CounterBook()
        book.apply([("h0", "0", 1)])
        book.apply([("h_fanout", "0", 2)])
        assert book.pending == {"0": 3}

    def test_newly_completed_in_order(self) -> None:
        book = CounterBook()
        deltas = [("a0", "a", 1), ("b0", "b", 1), ("b1", "b", -1), ("a1", "a", -1)]
        assert book.apply(deltas) == (["b", "a"], [])

    def test_negative_pending_tolerated(self) -> None:
        book = CounterBook()
        assert book.apply([("h1", "1", 1), ("h_t1", "1", -5)]) == ([], [])
        assert book.pending == {"1": -4}

    def test_loaded_completed(self) -> None:
        book = CounterBook(completed=["a", "b"])
        assert book.completed == {"a", "b"}
        assert book.pending == {}
        assert book.applied == {}


class TestCounterBookDedupRewrite:
    def test_same_task_same_delta_is_noop(self, caplog: pytest.LogCaptureFixture) -> None:
        book = CounterBook()
        book.apply([("h0", "0", 1), ("h_t", "0", -1)])
        with caplog.at_level(logging.WARNING, logger=COUNTERS_LOGGER):
            assert book.apply([("h_t", "0", -1)]) == ([], [])
            assert book.apply([("h0", "0", 1)]) == ([], [])
        assert book.completed == {"0"}
        assert uncomplete_warnings(caplog) == []

    def test_rewrite_newest_wins(self) -> None:
        book = CounterBook()
        book.apply([("h0", "0", 1)])
        book.apply([("h_t", "0", 0)])
        assert book.pending == {"0": 1}
        assert book.apply([("h_t", "0", -1)]) == (["0"], [])
        assert book.completed == {"0"}
        assert book.applied_delta("h_t") == -1
        assert book.applied == {}  # a completed source's entries are retired (compact)

    def test_repeated_conflicting_rewrites(self) -> None:
        book = CounterBook()
        book.apply([("h0", "0", 1)])
        book.apply([("h_t", "0", 0)])
        book.apply([("h_t", "0", 5)])
        assert book.pending == {"0": 6}
        assert book.applied["h_t"] == 5
        assert book.apply([("h_t", "0", -1)]) == (["0"], [])
        assert book.applied_delta("h_t") == -1


class TestCounterBookUncomplete:
    def _assert_one_removing_warning(self, caplog: pytest.LogCaptureFixture) -> None:
        warnings = uncomplete_warnings(caplog)
        assert len(warnings) == 1
        assert "Removing" in warnings[0]
        assert "completed set" in warnings[0]

    def test_new_task_after_completion(self, caplog: pytest.LogCaptureFixture) -> None:
        book = CounterBook()
        book.apply([("h0", "0", 1), ("h_t", "0", -1)])
        with caplog.at_level(logging.WARNING, logger=COUNTERS_LOGGER):
            assert book.apply([("h_late", "0", -1)]) == ([], ["0"])
        self._assert_one_removing_warning(caplog)
        assert book.completed == set()
        assert book.applied_delta("h_late") is None
        assert "0" not in book.pending

    def test_rewrite_after_completion(self, caplog: pytest.LogCaptureFixture) -> None:
        book = CounterBook()
        book.apply([("h0", "0", 1)])
        book.apply([("h_t", "0", -1)])
        with caplog.at_level(logging.WARNING, logger=COUNTERS_LOGGER):
            assert book.apply([("h_t", "0", 0)]) == ([], ["0"])
        self._assert_one_removing_warning(caplog)
        assert book.completed == set()
        assert book.applied_delta("h_t") == -1  # the dropped rewrite is not recorded

    def test_delta_for_loaded_completion(self, caplog: pytest.LogCaptureFixture) -> None:
        book = CounterBook(completed={"x"})
        with caplog.at_level(logging.WARNING, logger=COUNTERS_LOGGER):
            assert book.apply([("0_x", "x", 1)]) == ([], ["x"])
        self._assert_one_removing_warning(caplog)
        assert book.completed == set()
        assert book.pending == {}

    def test_same_batch_late_delta_uncompletes(self, caplog: pytest.LogCaptureFixture) -> None:
        """Deliberate difference from NeMo's actor: the source is complete the moment its count
        hits 0, so a later delta for it in the *same* batch un-completes it (NeMo would persist
        it complete with the count at -1). Safe: the source is replayed. It was never reported
        newly complete, so there is nothing to delete either: the two lists stay disjoint."""
        book = CounterBook()
        with caplog.at_level(logging.WARNING, logger=COUNTERS_LOGGER):
            result = book.apply([("t0", "a", 1), ("t1", "a", -1), ("t2", "a", -1)])
        assert result == ([], [])
        self._assert_one_removing_warning(caplog)
        assert book.completed == set()
        assert book.pending == {}
        assert [book.applied_delta(t) for t in ("t0", "t1", "t2")] == [1, -1, None]

    def test_same_batch_other_sources_unaffected(self) -> None:
        book = CounterBook()
        deltas = [("a0", "a", 1), ("b0", "b", 1), ("a1", "a", -1), ("a2", "a", 0),
                  ("b1", "b", -1)]
        assert book.apply(deltas) == (["b"], [])
        assert book.completed == {"b"}

    def test_never_raises(self) -> None:
        book = CounterBook()
        book.apply([("h0", "0", 1)])
        book.apply([("h_t", "0", -1)])
        book.apply([("h_t", "0", 5)])
        assert book.apply([("h_new", "0", -1)]) == ([], [])
        assert book.pending == {"0": -1}
        book.apply([("h1", "1", 1), ("h_t1", "1", -5)])
        assert book.pending == {"0": -1, "1": -4}


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


def _state(book: CounterBook, deltas: list[tuple[str, str, int]]) -> tuple[dict, set, dict]:
    """Counts, completed set, and the delta recorded for each task id of ``deltas`` (pending
    or retired)."""
    applied = {t: book.applied_delta(t) for t, _, _ in deltas}
    return copy.deepcopy(book.pending), set(book.completed), applied


@st.composite
def delta_lists(draw: st.DrawFn) -> list[tuple[str, str, int]]:
    """Delta lists where each task id always fires the same (source, delta), like a retry."""
    ids = [f"t{i}" for i in range(draw(st.integers(1, 8)))]
    fired = {
        t: (draw(st.sampled_from(["a", "b", "c"])), draw(st.integers(-2, 3))) for t in ids
    }
    order = draw(st.lists(st.sampled_from(ids), max_size=24))
    return [(t, *fired[t]) for t in order]


@settings(max_examples=200, deadline=None)
@given(deltas=delta_lists())
def test_property_applying_twice_changes_nothing(deltas: list[tuple[str, str, int]]) -> None:
    book = CounterBook()
    book.apply(deltas)
    if any(book.applied_delta(t) is None for t, _, _ in deltas):
        # A dropped (anomalous) delta is not recorded, so it counts when re-sent: §3.3.
        return
    before = _state(book, deltas)
    assert book.apply(deltas) == ([], [])
    assert _state(book, deltas) == before


@settings(max_examples=200, deadline=None)
@given(deltas=delta_lists(), data=st.data())
def test_property_batch_boundaries_do_not_matter(
    deltas: list[tuple[str, str, int]], data: st.DataObject
) -> None:
    """Completion is decided per delta, not per batch (the deliberate difference from NeMo)."""
    whole = CounterBook()
    whole.apply(deltas)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(deltas)))))
    split = CounterBook()
    start = 0
    for cut in [*cuts, len(deltas)]:
        split.apply(deltas[start:cut])
        start = max(start, cut)
    assert _state(split, deltas) == _state(whole, deltas)


@st.composite
def fanout_runs(draw: st.DrawFn) -> tuple[list[str], list[list[tuple]], dict[str, int]]:
    """Deltas of a random multi-source fan-out tree, every branch ending at the sink (or
    filtered), produced by the real StageAdapter; delivered in a random order where each
    parent's deltas come before its children's, in random batches, with retried duplicates.

    Returns (source ids, batches of deltas, index of the batch holding each source's last
    original delta)."""
    n_sources = draw(st.integers(1, 3))
    depth = draw(st.integers(0, 3))  # non-sink stages after the source
    kinds = st.lists(st.sampled_from(["real", "real", "none"]), min_size=1, max_size=3)
    events: list[tuple[int | None, tuple, str]] = []  # (parent event, delta, sid)
    frontier: list[tuple[Task, int, int]] = []  # (task, level, event that created it)
    sids = []
    for i in range(n_sources):
        root = Item()
        root.task_id = f"0_{i}"
        (delta,) = source_deltas([root])
        sids.append(root._source_id)
        events.append((None, delta, root._source_id))
        frontier.append((root, 0, len(events) - 1))
    while frontier:
        task, level, created_by = frontier.pop(0)
        outs = draw(kinds)
        stage = Fn(fn=lambda _t, outs=outs: [Item() if k == "real" else None for k in outs])
        stage.is_sink_stage = level == depth
        log = DeltaLog()
        children = StageAdapter(stage).process_batch([task], None, log)
        assert len(log.deltas) == 1
        events.append((created_by, log.deltas[0], task._source_id))
        if level < depth:
            frontier.extend((c, level + 1, len(events) - 1) for c in children)
    # A random linear extension of "parent event before child events".
    placed: set[int] = set()
    order: list[int] = []
    while len(order) < len(events):
        ready = [
            e for e, (parent, _, _) in enumerate(events)
            if e not in placed and (parent is None or parent in placed)
        ]
        pick = draw(st.sampled_from(ready))
        placed.add(pick)
        order.append(pick)
    stream: list[tuple[tuple, int | None]] = [(events[e][1], e) for e in order]
    for _ in range(draw(st.integers(0, 4))):  # retried tasks re-send identical deltas later
        pos = draw(st.integers(0, len(stream) - 1))
        at = draw(st.integers(pos + 1, len(stream)))
        stream.insert(at, (stream[pos][0], None))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=6)))
    batches, last_batch, start = [], {}, 0
    for cut in [*cuts, len(stream)]:
        chunk = stream[start:cut]
        if chunk:
            for delta, event in chunk:
                if event is not None:
                    last_batch[delta[1]] = len(batches)
            batches.append([delta for delta, _ in chunk])
        start = max(start, cut)
    return sids, batches, last_batch


@settings(max_examples=150, deadline=None)
@given(run=fanout_runs())
def test_property_fanout_tree_completes_each_source_exactly_once(
    run: tuple[list[str], list[list[tuple]], dict[str, int]],
) -> None:
    sids, batches, last_batch = run
    book = CounterBook()
    completed_at: dict[str, list[int]] = {s: [] for s in sids}
    for i, batch in enumerate(batches):
        done, undone = book.apply(batch)
        assert undone == []
        for sid in done:
            completed_at[sid].append(i)
    # Exactly once, and only in the batch holding the source's last delta.
    assert completed_at == {s: [last_batch[s]] for s in sids}
    assert book.completed == set(sids)
    assert book.pending == {}
    # Replaying everything (a retry storm) is a no-op.
    for batch in batches:
        assert book.apply(batch) == ([], [])


# --------------------------------------------------------------------------------------------
# §8 test_resumability_functional: adapter + CounterBook + real CompletionStore files
# --------------------------------------------------------------------------------------------


def checkpointed_run(
    ckpt: Path, writer_id: str, stages: list[ProcessingStage]
) -> tuple[list[str], list[Task]]:
    """One run as the executor does it: source on the driver, union of every writer's file,
    completed sources dropped, the rest opened with +1, then each source through the
    remaining stages with its own DeltaLog. Returns (emitted source ids, sink outputs)."""
    store = CompletionStore(str(ckpt), writer_id=writer_id)
    try:
        book = CounterBook(store.load_union())
        head, *rest = stages
        sources = StageAdapter(head).process_batch([EmptyTask()])
        opened = source_deltas(sources)
        todo = [t for t in sources if not book.is_completed(t._source_id)]
        assert book.apply([d for d in opened if not book.is_completed(d[1])]) == ([], [])
        outputs: list[Task] = []
        for task in todo:
            log = DeltaLog()
            batches, _ = run_stages([StageAdapter(s) for s in rest], [[task]], log)
            outputs += [t for b in batches for t in b]
            done, undone = book.apply(log.deltas)
            store.remove(undone)
            store.add(done)
        return [t._source_id for t in todo], outputs
    finally:
        store.close()


def union(ckpt: Path) -> set[str]:
    reader = CompletionStore(str(ckpt), writer_id="reader")
    try:
        return reader.load_union()
    finally:
        reader.close()


def three_sources() -> ProcessingStage:
    return source(Fn(fn=lambda _: [Item(data=i) for i in range(3)], name="source"))


class TestFunctional:
    def test_failure_is_replayed_by_a_new_writer(self, tmp_path: Path) -> None:
        failing = {1}
        last = sink(Fn(fn=lambda t: FailedTask() if t.data in failing else t, name="sink"))
        emitted, outputs = checkpointed_run(tmp_path, "run1", [three_sources(), last])
        assert emitted == ["0", "1", "2"]
        assert [t.data for t in outputs] == [0, 2]
        assert union(tmp_path) == {"0", "2"}

        failing.clear()
        emitted, outputs = checkpointed_run(tmp_path, "run2", [three_sources(), last])
        assert emitted == ["1"]
        assert [(t.task_id, t._source_id, t.data) for t in outputs] == [("0_1_0", "1", 1)]
        assert union(tmp_path) == {"0", "1", "2"}
        names = sorted(p.name for p in (tmp_path / ".nemo_curator_metadata").iterdir())
        assert names == ["reader.mdb", "run1.mdb", "run2.mdb"]

        emitted, outputs = checkpointed_run(tmp_path, "run3", [three_sources(), last])
        assert (emitted, outputs) == ([], [])

    def test_sink_returning_a_new_object_completes(self, tmp_path: Path) -> None:
        last = sink(Fn(fn=lambda t: Item(data=t.data), name="sink"))
        emitted, outputs = checkpointed_run(tmp_path, "run1", [three_sources(), last])
        assert emitted == ["0", "1", "2"]
        assert [t._source_id for t in outputs] == ["0", "1", "2"]
        assert union(tmp_path) == {"0", "1", "2"}
        assert checkpointed_run(tmp_path, "run2", [three_sources(), last]) == ([], [])

    def test_sink_filtering_completes(self, tmp_path: Path) -> None:
        last = sink(Fn(fn=lambda t: None if t.data == 1 else t, name="sink"))
        emitted, outputs = checkpointed_run(tmp_path, "run1", [three_sources(), last])
        assert [t.data for t in outputs] == [0, 2]
        assert union(tmp_path) == {"0", "1", "2"}
        assert checkpointed_run(tmp_path, "run2", [three_sources(), last]) == ([], [])

    def test_fanout_filter_sink_chain(self, tmp_path: Path) -> None:
        split = Fn(fn=lambda t: [Item(data=(t.data, j)) for j in range(3)], name="split")
        # Source 2 loses a branch to a FailedTask: it must stay pending and be replayed.
        keep = Fn(
            fn=lambda t: FailedTask() if t.data == (2, 1) else (None if t.data[1] == 0 else t),
            name="keep",
        )
        last = sink(Fn(name="sink"))
        stages = [three_sources(), split, keep, last]
        emitted, outputs = checkpointed_run(tmp_path, "w1", stages)
        assert emitted == ["0", "1", "2"]
        assert sorted(t.data for t in outputs) == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
        assert union(tmp_path) == {"0", "1"}

    def test_m_to_k_stage_never_completes(self, tmp_path: Path) -> None:
        split = Fn(fn=lambda t: [Item(), Item(), Item()], name="split")
        merge = sink(BatchFn(fn=lambda ts: [Item()], batch_size=3, name="merge"))
        emitted, outputs = checkpointed_run(tmp_path, "w1", [three_sources(), split, merge])
        assert emitted == ["0", "1", "2"]
        assert len(outputs) == 3
        assert union(tmp_path) == set()


def test_recompleted_in_one_call_is_neither_done_nor_undone():
    """A source recorded complete earlier, un-completed and completed again in one call stays
    recorded: both lists are empty, so store and memory agree whatever order they apply in."""
    book = CounterBook(completed={"a"})
    assert book.apply([("late", "a", 1), ("x0", "a", 1), ("x1", "a", -1)]) == ([], [])
    assert book.completed == {"a"}
