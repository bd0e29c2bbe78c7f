"""Task identity rules (docs/design/contract.md §1.2-§1.8) and writer base names, on the pure
lineage module."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator_dask.lineage import (
    assign_root_task_ids,
    assign_task_ids,
    child_task_id,
    get_deterministic_hash,
    is_empty_task,
    is_failed_task,
    is_none_task,
    is_random_task_id,
    is_sentinel,
    output_basename,
    random_task_id,
    source_id_of,
)
from curator_dask.tasks import (
    DocumentBatch,
    EmptyTask,
    FailedTask,
    FileGroupTask,
    NoneTask,
    SentinelTask,
    Task,
)

HEX12 = re.compile(r"^[0-9a-f]{12}$")
R_ID = re.compile(r"^r[0-9a-f]{32}$")

FAST = settings(max_examples=60, deadline=None)

paths = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="|"),
    max_size=12,
)
path_lists = st.lists(paths, max_size=6)
# Ids as the framework makes them: digits, 12-hex content ids, joined by "_".
id_segments = st.one_of(
    st.integers(min_value=0, max_value=999).map(str),
    st.from_regex(r"[0-9a-f]{12}", fullmatch=True),
)
parent_ids = st.lists(id_segments, min_size=1, max_size=4).map(lambda s: "0_" + "_".join(s))


def doc(text: str = "x") -> DocumentBatch:
    return DocumentBatch(dataset_name="d", data=pd.DataFrame({"text": [text]}))


def with_id(task: Task, task_id: str) -> Task:
    task.task_id = task_id
    return task


def sha12(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:12]


# --------------------------------------------------------------------------------------------
# §1.5 get_deterministic_hash
# --------------------------------------------------------------------------------------------


class TestDeterministicHashVectors:
    @pytest.mark.parametrize(
        ("inputs", "seed", "expected"),
        [
            (["a.parquet"], "", "5ca81c9e2d3b"),
            (["b.parquet", "a.parquet"], "", "663c66c4fc54"),
            ([], "", "cbe5cfdf7c21"),
            (["/data/in/a.jsonl"], "0_x_0", "068938d1b0f7"),
        ],
    )
    def test_contract_vectors(self, inputs: list[str], seed: str, expected: str) -> None:
        assert get_deterministic_hash(inputs, seed) == expected

    def test_vectors_are_sha256_of_the_documented_string(self) -> None:
        assert get_deterministic_hash(["a.parquet"]) == sha12("a.parquet|")
        assert get_deterministic_hash(["b.parquet", "a.parquet"]) == sha12("a.parquet|b.parquet|")
        assert get_deterministic_hash([]) == sha12("|")
        assert get_deterministic_hash(["/data/in/a.jsonl"], "0_x_0") == sha12(
            "/data/in/a.jsonl|0_x_0"
        )

    def test_seed_defaults_to_empty(self) -> None:
        assert get_deterministic_hash(["a.parquet"]) == get_deterministic_hash(["a.parquet"], "")

    def test_hash_utils_behaviours(self) -> None:
        f1, f2 = "/data/f1.parquet", "/data/f2.parquet"
        assert get_deterministic_hash([f1, f2]) == get_deterministic_hash([f1, f2])
        assert get_deterministic_hash([f1]) != get_deterministic_hash([f2])
        assert get_deterministic_hash([f1], "s1") != get_deterministic_hash([f1], "s2")
        assert get_deterministic_hash([f2, f1]) == get_deterministic_hash([f1, f2])
        assert get_deterministic_hash([f1, f2, f1]) == get_deterministic_hash([f1, f1, f2])
        assert get_deterministic_hash([f1, f1, f2]) != get_deterministic_hash([f1, f2])
        assert HEX12.match(get_deterministic_hash([]))

    def test_accepts_any_iterable(self) -> None:
        assert get_deterministic_hash(("b.parquet", "a.parquet")) == "663c66c4fc54"


class TestDeterministicHashProperties:
    @FAST
    @given(inputs=path_lists, seed=paths, data=st.data())
    def test_order_insensitive(self, inputs: list[str], seed: str, data: st.DataObject) -> None:
        shuffled = data.draw(st.permutations(inputs))
        assert get_deterministic_hash(shuffled, seed) == get_deterministic_hash(inputs, seed)

    @FAST
    @given(inputs=path_lists, seed=paths)
    def test_twelve_lowercase_hex(self, inputs: list[str], seed: str) -> None:
        assert HEX12.match(get_deterministic_hash(inputs, seed))

    @FAST
    @given(inputs=path_lists, seed=paths)
    def test_equals_documented_formula(self, inputs: list[str], seed: str) -> None:
        assert get_deterministic_hash(inputs, seed) == sha12("|".join(sorted(inputs)) + "|" + seed)

    @FAST
    @given(inputs=st.lists(paths, min_size=1, max_size=5), seed=paths, data=st.data())
    def test_duplicates_count(self, inputs: list[str], seed: str, data: st.DataObject) -> None:
        dup = data.draw(st.sampled_from(inputs))
        assert get_deterministic_hash([*inputs, dup], seed) != get_deterministic_hash(inputs, seed)


# --------------------------------------------------------------------------------------------
# §1.2 / §1.3 helpers
# --------------------------------------------------------------------------------------------


class TestIdHelpers:
    @pytest.mark.parametrize(
        ("parent", "suffix", "expected"),
        [("", 3, "3"), ("0", 7, "0_7"), ("root", "abc123", "root_abc123"), ("0_1", 0, "0_1_0")],
    )
    def test_child_task_id(self, parent: str, suffix: str | int, expected: str) -> None:
        assert child_task_id(parent, suffix) == expected

    @pytest.mark.parametrize(
        ("task_id", "expected"),
        [("3", "3"), ("0_5ca81c9e2d3b", "5ca81c9e2d3b"), ("0_0_1_2", "2"), ("", "")],
    )
    def test_source_id_of(self, task_id: str, expected: str) -> None:
        assert source_id_of(task_id) == expected

    def test_random_task_id_shape(self) -> None:
        ids = {random_task_id() for _ in range(50)}
        assert len(ids) == 50
        for rid in ids:
            assert R_ID.match(rid)
            assert is_random_task_id(rid)

    @pytest.mark.parametrize("task_id", ["0", "0_1", "0_5ca81c9e2d3b_0", "3"])
    def test_deterministic_ids_are_not_random(self, task_id: str) -> None:
        assert not is_random_task_id(task_id)

    def test_sentinel_predicates(self) -> None:
        for t in (SentinelTask(), EmptyTask(), NoneTask(), FailedTask()):
            assert is_sentinel(t)
        assert is_none_task(NoneTask()) and not is_none_task(FailedTask())
        assert is_failed_task(FailedTask()) and not is_failed_task(NoneTask())
        assert is_empty_task(EmptyTask()) and not is_empty_task(NoneTask())
        for real in (FileGroupTask(dataset_name="d", data=["a"]), doc()):
            assert not is_sentinel(real)
            assert not is_none_task(real)
            assert not is_failed_task(real)
            assert not is_empty_task(real)

    def test_sentinel_predicates_match_foreign_classes_by_name(self) -> None:
        # NeMo Curator's own sentinel classes are recognised by class name.
        @dataclass(repr=False)
        class NoneTask(Task[None]):  # same name as NeMo's class
            dataset_name: str = "none"
            data: None = None

            @property
            def num_items(self) -> int:
                return 0

            def validate(self) -> bool:
                return True

        foreign = NoneTask()
        assert is_none_task(foreign)
        assert is_sentinel(foreign)
        assert not is_failed_task(foreign)


# --------------------------------------------------------------------------------------------
# §1.7 root ids
# --------------------------------------------------------------------------------------------


class TestAssignRootTaskIds:
    def test_three_tasks(self) -> None:
        tasks = [doc("a"), doc("b"), doc("c")]
        assign_root_task_ids(tasks)
        assert [t.task_id for t in tasks] == ["0_0", "0_1", "0_2"]

    def test_empty_task_is_skipped_but_counted(self) -> None:
        tasks = [EmptyTask(), doc()]
        assign_root_task_ids(tasks)
        assert [t.task_id for t in tasks] == ["0", "0_1"]

    def test_empty_tasks_between_real_ones(self) -> None:
        tasks = [doc(), EmptyTask(), EmptyTask(), FileGroupTask(dataset_name="d", data=["a"])]
        assign_root_task_ids(tasks)
        assert [t.task_id for t in tasks] == ["0_0", "0", "0", "0_3"]

    def test_content_hash_is_not_used(self) -> None:
        task = FileGroupTask(dataset_name="d", data=["a.parquet"])
        assign_root_task_ids([task])
        assert task.task_id == "0_0"

    def test_empty_list_does_not_raise(self) -> None:
        assert assign_root_task_ids([]) is None


# --------------------------------------------------------------------------------------------
# §1.8 assign_task_ids
# --------------------------------------------------------------------------------------------


class TestAssignTaskIdsVectors:
    def test_source_fan_out_from_empty_task_uses_content_ids(self) -> None:
        a = FileGroupTask(dataset_name="d", data=["a.parquet"])
        b = FileGroupTask(dataset_name="d", data=["b.parquet"])
        assign_task_ids([EmptyTask()], [a, b], is_source=True)
        assert a.task_id == "0_5ca81c9e2d3b" == f"0_{a.get_deterministic_id()}"
        assert b.task_id == "0_1b4e54d3c0fa" == f"0_{b.get_deterministic_id()}"

    def test_source_fan_out_without_content_id_uses_position(self) -> None:
        outs = [doc(), doc(), doc()]
        assign_task_ids([EmptyTask()], outs, is_source=True)
        assert [t.task_id for t in outs] == ["0_0", "0_1", "0_2"]

    def test_source_fan_out_sentinel_takes_its_positional_slot(self) -> None:
        a = FileGroupTask(dataset_name="d", data=["a.parquet"])
        none = NoneTask()
        b = FileGroupTask(dataset_name="d", data=["b.parquet"])
        assign_task_ids([EmptyTask()], [a, none, b], is_source=True)
        assert [t.task_id for t in (a, none, b)] == ["0_5ca81c9e2d3b", "0_1", "0_1b4e54d3c0fa"]

    def test_source_falsy_content_id_uses_position(self) -> None:
        @dataclass(repr=False)
        class Blank(FileGroupTask):
            def get_deterministic_id(self) -> str:
                return ""

        outs = [Blank(dataset_name="d", data=["a"]), Blank(dataset_name="d", data=["b"])]
        assign_task_ids([EmptyTask()], outs, is_source=True)
        assert [t.task_id for t in outs] == ["0_0", "0_1"]

    def test_one_to_one(self) -> None:
        parent = with_id(doc(), "0_7")
        out = doc()
        assign_task_ids([parent], [out], is_source=False)
        assert out.task_id == "0_7_0"

    def test_one_to_zero(self) -> None:
        parent = with_id(doc(), "0_7")
        assign_task_ids([parent], [], is_source=False)
        assert parent.task_id == "0_7"  # nothing to name; the parent is left alone

    def test_fan_out_of_one_input_with_sentinels(self) -> None:
        parent = with_id(doc(), "0_3")
        outs = [doc(), NoneTask(), doc(), FailedTask()]
        assign_task_ids([parent], outs, is_source=False)
        assert [t.task_id for t in outs] == ["0_3_0", "0_3_1", "0_3_2", "0_3_3"]

    def test_non_source_fan_out_ignores_content_id(self) -> None:
        parent = with_id(doc(), "0_2")
        outs = [FileGroupTask(dataset_name="d", data=["a.parquet"])]
        assign_task_ids([parent], outs, is_source=False)
        assert outs[0].task_id == "0_2_0"

    def test_n_to_n_positional_with_none_slot(self) -> None:
        parents = [with_id(doc(), f"0_{i}") for i in range(3)]
        c0, none, c2 = doc(), NoneTask(), doc()
        outs = [c0, none, c2]
        assign_task_ids(parents, outs, is_source=False)
        assert [t.task_id for t in outs] == ["0_0_0", "0_1_0", "0_2_0"]
        assert outs == [c0, none, c2]
        assert outs[1] is none

    def test_source_n_to_n_uses_content_ids(self) -> None:
        parents = [with_id(doc(), "0_0"), with_id(doc(), "0_1")]
        a = FileGroupTask(dataset_name="d", data=["a.parquet"])
        b = FileGroupTask(dataset_name="d", data=["b.parquet"])
        assign_task_ids(parents, [a, b], is_source=True)
        assert a.task_id == "0_0_5ca81c9e2d3b"
        assert b.task_id == "0_1_1b4e54d3c0fa"

    def test_source_n_to_n_without_content_id_uses_zero(self) -> None:
        parents = [with_id(doc(), "0_0"), with_id(doc(), "0_1")]
        outs = [doc(), NoneTask()]
        assign_task_ids(parents, outs, is_source=True)
        assert [t.task_id for t in outs] == ["0_0_0", "0_1_0"]

    def test_m_to_k_gives_r_ids(self) -> None:
        parents = [with_id(doc(), "0_0"), with_id(doc(), "0_1")]
        outs = [doc(), doc(), doc()]
        assign_task_ids(parents, outs, is_source=False)
        ids = [t.task_id for t in outs]
        assert len(set(ids)) == 3
        for task_id in ids:
            assert task_id
            assert task_id.startswith("r")
            assert "_" not in task_id
            assert R_ID.match(task_id)

    def test_m_to_k_filter_and_fan_out_in_one_batch(self) -> None:
        parents = [with_id(doc(), f"0_{i}") for i in range(3)]
        outs = [doc(), doc(), doc(), NoneTask()]
        assign_task_ids(parents, outs, is_source=False)
        assert all(R_ID.match(t.task_id) for t in outs)

    def test_m_to_zero_is_m_to_k(self) -> None:
        parents = [with_id(doc(), "0_0"), with_id(doc(), "0_1")]
        assign_task_ids(parents, [], is_source=False)
        assert [p.task_id for p in parents] == ["0_0", "0_1"]

    def test_same_object_still_appends_a_segment(self) -> None:
        task = with_id(doc(), "0_5")
        assign_task_ids([task], [task], is_source=False)
        assert task.task_id == "0_5_0"

    def test_ids_are_overwritten_not_kept(self) -> None:
        out = doc()
        out.task_id = "stale_9"
        assign_task_ids([with_id(doc(), "0_1")], [out], is_source=False)
        assert out.task_id == "0_1_0"

    def test_empty_parent_id_gives_bare_suffix(self) -> None:
        outs = [doc(), doc()]
        assign_task_ids([doc()], outs, is_source=False)
        assert [t.task_id for t in outs] == ["0", "1"]

    def test_observed_reader_writer_chain(self) -> None:
        group = FileGroupTask(dataset_name="in", data=["/data/in/a.jsonl"])
        assign_task_ids([EmptyTask()], [group], is_source=True)
        h = get_deterministic_hash(["/data/in/a.jsonl"])
        assert group.task_id == f"0_{h}"
        batch = doc()
        assign_task_ids([group], [batch], is_source=False)
        assert batch.task_id == f"0_{h}_0"
        written = FileGroupTask(dataset_name="in", data=["/out/x.jsonl"])
        assign_task_ids([batch], [written], is_source=False)
        assert written.task_id == f"0_{h}_0_0"
        assert written.get_source_id() == "0"
        assert group.get_source_id() == h


class TestAssignTaskIdsProperties:
    @FAST
    @given(parent=parent_ids, n=st.integers(min_value=0, max_value=8), source=st.booleans())
    def test_one_input_fan_out(self, parent: str, n: int, source: bool) -> None:
        outs = [doc() for _ in range(n)]
        assign_task_ids([with_id(doc(), parent)], outs, is_source=source)
        assert [t.task_id for t in outs] == [f"{parent}_{i}" for i in range(n)]

    @FAST
    @given(parents=st.lists(parent_ids, min_size=2, max_size=6))
    def test_n_to_n_positional(self, parents: list[str]) -> None:
        ins = [with_id(doc(), p) for p in parents]
        outs = [doc() if i % 2 else NoneTask() for i in range(len(parents))]
        assign_task_ids(ins, outs, is_source=False)
        assert [t.task_id for t in outs] == [f"{p}_0" for p in parents]

    @FAST
    @given(
        m=st.integers(min_value=2, max_value=6),
        k=st.integers(min_value=0, max_value=9),
        source=st.booleans(),
    )
    def test_m_to_k_r_ids(self, m: int, k: int, source: bool) -> None:
        if k == m:
            k += 1
        ins = [with_id(doc(), f"0_{i}") for i in range(m)]
        outs = [FileGroupTask(dataset_name="d", data=[f"f{i}"]) for i in range(k)]
        assign_task_ids(ins, outs, is_source=source)
        ids = [t.task_id for t in outs]
        assert len(set(ids)) == k
        for task_id in ids:
            assert task_id.startswith("r")
            assert "_" not in task_id
            assert R_ID.match(task_id)

    @FAST
    @given(groups=st.lists(st.lists(paths, min_size=1, max_size=4), min_size=1, max_size=5))
    def test_source_content_ids(self, groups: list[list[str]]) -> None:
        outs = [FileGroupTask(dataset_name="d", data=list(g)) for g in groups]
        assign_task_ids([EmptyTask()], outs, is_source=True)
        for task, g in zip(outs, groups, strict=True):
            assert task.task_id == "0_" + sha12("|".join(sorted(g)) + "|")
            assert task.get_source_id() == get_deterministic_hash(g)


# --------------------------------------------------------------------------------------------
# output_basename (§6.2, replay-safe)
# --------------------------------------------------------------------------------------------


class TestOutputBasename:
    def test_with_source_files_vector(self) -> None:
        assert output_basename(["/data/in/a.jsonl"], "0_1f82e4a37355_0") == "24834f8afda2"

    def test_with_source_files_matches_contract_seeded_vector(self) -> None:
        assert output_basename(["/data/in/a.jsonl"], "0_x_0") == "068938d1b0f7"

    @FAST
    @given(files=st.lists(paths, min_size=1, max_size=4), task_id=parent_ids)
    def test_with_source_files_is_seeded_hash(self, files: list[str], task_id: str) -> None:
        assert output_basename(files, task_id) == get_deterministic_hash(files, task_id)

    def test_source_files_order_does_not_matter(self) -> None:
        assert output_basename(["b", "a"], "0_1_0") == output_basename(["a", "b"], "0_1_0")

    def test_accepts_tuple(self) -> None:
        assert output_basename(("/data/in/a.jsonl",), "0_x_0") == "068938d1b0f7"

    def test_without_source_files_is_stable_hash_of_lineage(self) -> None:
        first = output_basename(None, "0_1")
        assert first is not None
        assert HEX12.match(first)
        assert first == output_basename(None, "0_1") == output_basename([], "0_1")
        assert first != output_basename(None, "0_2")
        # No collision with the source-files form for the same id.
        assert first != get_deterministic_hash([], "0_1")

    def test_without_source_files_exact_value(self) -> None:
        assert output_basename(None, "0_1") == get_deterministic_hash([], "lineage:0_1")
        assert output_basename(None, "0_1") == "31784966917d"

    @pytest.mark.parametrize("task_id", ["", "r" + "0" * 32, random_task_id()],
                             ids=["empty", "r-zeros", "r-random"])
    def test_none_for_random_and_empty_ids(self, task_id: str) -> None:
        assert output_basename(None, task_id) is None
        assert output_basename([], task_id) is None
