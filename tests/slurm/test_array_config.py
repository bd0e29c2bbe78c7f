"""SLURM array configuration, shard formula, source filtering and driver rule.

See docs/design/contract.md §5.1-5.6. Mirrors upstream ``tests/backends/test_slurm_array.py``
(config, filter, driver parts) plus every vector and error message of §5.2-5.4 and §5.6.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator_dask.slurm import array as slurm_array
from curator_dask.slurm.array import (
    ENABLED_ENV,
    MINIMUM_SHARD_INDEX_ENV,
    SHARD_INDEX_ENV,
    TOTAL_SHARDS_ENV,
    SlurmArrayConfig,
    filter_slurm_array_source_tasks,
    is_slurm_array_driver_process,
    shard_for_task,
)
from curator_dask.tasks import FileGroupTask

LOGGER_NAME = "curator_dask.slurm.array"
ALL_ENV = (
    ENABLED_ENV,
    SHARD_INDEX_ENV,
    TOTAL_SHARDS_ENV,
    MINIMUM_SHARD_INDEX_ENV,
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_NODEID",
)


def make_task(suffix: str, parent: str = "0", files: list[str] | None = None) -> FileGroupTask:
    task = FileGroupTask(dataset_name="d", data=files or [f"/data/in/{suffix}.jsonl"])
    task._set_task_id(parent, suffix)
    return task


@pytest.fixture
def clean_os_environ(monkeypatch):
    """Remove every SLURM array variable from os.environ for the test (restored afterwards)."""
    for name in ALL_ENV:
        monkeypatch.setenv(name, "placeholder")  # records the original value for undo
        monkeypatch.delenv(name)
    return monkeypatch


# -- §5.1 constants ------------------------------------------------------------------------------
def test_constants():
    assert ENABLED_ENV == "NEMO_CURATOR_SLURM_ARRAY_ENABLED"
    assert SHARD_INDEX_ENV == "NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX"
    assert TOTAL_SHARDS_ENV == "NEMO_CURATOR_SLURM_ARRAY_TOTAL_SHARDS"
    assert MINIMUM_SHARD_INDEX_ENV == "NEMO_CURATOR_SLURM_ARRAY_MINIMUM_SHARD_INDEX"
    true_values, false_values = slurm_array._TRUE_ENV_VALUES, slurm_array._FALSE_ENV_VALUES
    assert true_values == {"1", "true", "yes", "on"}
    assert false_values == {"0", "false", "no", "off"}


# -- §5.2 from_env -------------------------------------------------------------------------------
def test_from_env_none_without_any_variables():
    assert SlurmArrayConfig.from_env({}) is None
    assert SlurmArrayConfig.from_env({"SLURM_JOB_ID": "5", "SLURM_NODEID": "0"}) is None


def test_from_env_reads_slurm_fallbacks():
    env = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "11"}
    config = SlurmArrayConfig.from_env(env)
    assert config == SlurmArrayConfig(shard_index=7, total_shards=11, minimum_shard_index=0)
    assert (config.shard_index, config.total_shards, config.minimum_shard_index) == (7, 11, 0)


def test_minimum_shard_index_defaults_to_zero():
    config = SlurmArrayConfig(3, 8)
    assert (config.shard_index, config.total_shards, config.minimum_shard_index) == (3, 8, 0)


def test_from_env_nemo_variables_take_precedence_over_slurm():
    env = {
        SHARD_INDEX_ENV: "2",
        TOTAL_SHARDS_ENV: "5",
        MINIMUM_SHARD_INDEX_ENV: "1",
        "SLURM_ARRAY_TASK_ID": "9",
        "SLURM_ARRAY_TASK_COUNT": "99",
    }
    assert SlurmArrayConfig.from_env(env) == SlurmArrayConfig(2, 5, 1)


def test_from_env_minimum_has_no_slurm_fallback():
    # SLURM_ARRAY_TASK_MIN is not a fallback for the minimum shard index: default 0.
    env = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1"}
    assert SlurmArrayConfig.from_env(env) == SlurmArrayConfig(3, 4, 0)


@pytest.mark.parametrize("value", ["0", "false", "no", "off", " OFF ", "False", "NO\n"])
def test_from_env_disabled_values(value):
    env = {ENABLED_ENV: value, "SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "11"}
    assert SlurmArrayConfig.from_env(env) is None


@pytest.mark.parametrize("value", ["1", "true", "yes", "on", " TRUE ", "On"])
def test_from_env_enabled_values(value):
    env = {ENABLED_ENV: value, SHARD_INDEX_ENV: "1", TOTAL_SHARDS_ENV: "2"}
    assert SlurmArrayConfig.from_env(env) == SlurmArrayConfig(1, 2, 0)


@pytest.mark.parametrize(("raw", "shown"), [("maybe", "'maybe'"), (" Enabled ", "'enabled'"),
                                            ("", "''")])
def test_from_env_invalid_enabled_value(raw, shown):
    with pytest.raises(ValueError) as exc_info:
        SlurmArrayConfig.from_env({ENABLED_ENV: raw})
    assert str(exc_info.value) == (
        "Environment variable NEMO_CURATOR_SLURM_ARRAY_ENABLED must be one of "
        f"['0', '1', 'false', 'no', 'off', 'on', 'true', 'yes'], got {shown}"
    )


def test_from_env_reads_os_environ_by_default(clean_os_environ):
    clean_os_environ.setenv("SLURM_ARRAY_TASK_ID", "4")
    clean_os_environ.setenv("SLURM_ARRAY_TASK_COUNT", "6")
    assert SlurmArrayConfig.from_env() == SlurmArrayConfig(4, 6, 0)
    clean_os_environ.setenv(ENABLED_ENV, "off")
    assert SlurmArrayConfig.from_env() is None


def test_from_env_enabled_without_variables_raises():
    with pytest.raises(ValueError, match="SLURM_ARRAY_TASK_ID") as exc_info:
        SlurmArrayConfig.from_env({ENABLED_ENV: "1"})
    assert str(exc_info.value) == (
        "Environment variable NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX (or SLURM_ARRAY_TASK_ID) "
        "is not set"
    )


def test_from_env_missing_total_shards_raises():
    # Only a shard index present: filtering is on, and the total is missing.
    with pytest.raises(ValueError) as exc_info:
        SlurmArrayConfig.from_env({"SLURM_ARRAY_TASK_ID": "2"})
    assert str(exc_info.value) == (
        "Environment variable NEMO_CURATOR_SLURM_ARRAY_TOTAL_SHARDS (or SLURM_ARRAY_TASK_COUNT) "
        "is not set"
    )


def test_from_env_missing_shard_index_when_only_count_present():
    with pytest.raises(ValueError) as exc_info:
        SlurmArrayConfig.from_env({"SLURM_ARRAY_TASK_COUNT": "2"})
    assert str(exc_info.value) == (
        "Environment variable NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX (or SLURM_ARRAY_TASK_ID) "
        "is not set"
    )


def test_read_int_without_fallback_message():
    # from_env gives the minimum a default of 0, so the no-fallback message is only reachable
    # through the (private) integer reader; the contract still fixes its text.
    with pytest.raises(ValueError) as exc_info:
        slurm_array._read_int({}, MINIMUM_SHARD_INDEX_ENV, None)
    assert str(exc_info.value) == (
        "Environment variable NEMO_CURATOR_SLURM_ARRAY_MINIMUM_SHARD_INDEX is not set"
    )


def test_from_env_shard_not_an_int():
    env = {SHARD_INDEX_ENV: "not-an-int", TOTAL_SHARDS_ENV: "2"}
    with pytest.raises(ValueError, match=r"NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX.*not-an-int") as e:
        SlurmArrayConfig.from_env(env)
    assert str(e.value) == (
        "Environment variable NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX must contain an integer, "
        "got 'not-an-int'"
    )


def test_from_env_not_an_int_names_the_variable_actually_read():
    env = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "eleven"}
    with pytest.raises(ValueError) as exc_info:
        SlurmArrayConfig.from_env(env)
    assert str(exc_info.value) == (
        "Environment variable SLURM_ARRAY_TASK_COUNT must contain an integer, got 'eleven'"
    )


def test_from_env_minimum_not_an_int():
    env = {SHARD_INDEX_ENV: "1", TOTAL_SHARDS_ENV: "2", MINIMUM_SHARD_INDEX_ENV: "1.5"}
    with pytest.raises(ValueError) as exc_info:
        SlurmArrayConfig.from_env(env)
    assert str(exc_info.value) == (
        "Environment variable NEMO_CURATOR_SLURM_ARRAY_MINIMUM_SHARD_INDEX must contain an "
        "integer, got '1.5'"
    )


def test_from_env_parses_with_int():
    # int() accepts surrounding whitespace, a sign and underscores; the values are not validated.
    env = {SHARD_INDEX_ENV: " 12 ", TOTAL_SHARDS_ENV: "1_000", MINIMUM_SHARD_INDEX_ENV: "-3"}
    assert SlurmArrayConfig.from_env(env) == SlurmArrayConfig(12, 1000, -3)


# -- §5.3 validate ----------------------------------------------------------------------------
def test_validate_errors_directly():
    with pytest.raises(ValueError, match=r"^total_shards must be greater than 0, got 0$"):
        SlurmArrayConfig(0, 0, 0).validate()
    with pytest.raises(ValueError, match=r"^minimum_shard_index must be non-negative, got -4$"):
        SlurmArrayConfig(0, 1, -4).validate()
    with pytest.raises(ValueError, match=r"^shard_index must be non-negative, got -7$"):
        SlurmArrayConfig(-7, 1, 0).validate()


def test_validate_out_of_range_above_maximum_warns(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        config = SlurmArrayConfig(11, 10, 1).validate()
    assert config == SlurmArrayConfig(11, 10, 1)
    assert [r.getMessage() for r in caplog.records] == [
        "shard_index=11 is outside the assignable shard range [1, 10]. "
        "This task will not receive any source tasks."
    ]


@pytest.mark.parametrize(("shard", "minimum"), [(1, 1), (10, 1), (0, 0), (9, 0)])
def test_validate_in_range_does_not_warn(caplog, shard, minimum):
    with caplog.at_level(logging.DEBUG, logger=LOGGER_NAME):
        assert SlurmArrayConfig(shard, 10, minimum).validate() == SlurmArrayConfig(
            shard, 10, minimum
        )
    assert caplog.records == []


# -- §5.4 shard formula ------------------------------------------------------------------------
def test_shard_vectors_total_3_min_0():
    assert [shard_for_task(f"0_{k}", 3) for k in range(8)] == [0, 2, 1, 0, 2, 2, 2, 1]


def test_shard_vectors_total_3_min_1():
    assert [shard_for_task(f"0_{k}", 3, 1) for k in range(8)] == [1, 3, 2, 1, 3, 3, 3, 2]


def test_shard_vectors_total_10():
    assert [shard_for_task(f"0_{k}", 10) for k in range(8)] == [1, 9, 3, 9, 4, 9, 7, 3]


def test_shard_vector_single_id():
    assert shard_for_task("0_5ca81c9e2d3b", 4) == 3


def test_shard_vectors_for_file_group_sources():
    a = make_task("", files=["/data/in/a.jsonl"])
    a._set_task_id("0", a.get_deterministic_id())
    b = make_task("", files=["/data/in/b.jsonl"])
    b._set_task_id("0", b.get_deterministic_id())
    assert a.task_id == "0_1f82e4a37355"
    assert b.task_id == "0_f3dd507a5499"
    # The full task id is hashed, not the source id (the last segment).
    assert shard_for_task(a.task_id, 2) == 0
    assert shard_for_task(a.task_id, 4, 1) == 1
    assert shard_for_task(b.task_id, 2) == 1
    assert shard_for_task(b.task_id, 4, 1) == 4
    only_a = filter_slurm_array_source_tasks([a, b], SlurmArrayConfig(0, 2, 0), "reader")
    only_b = filter_slurm_array_source_tasks([a, b], SlurmArrayConfig(4, 4, 1), "reader")
    assert only_a == [a]
    assert only_b == [b]


# -- §5.4 filtering ----------------------------------------------------------------------------
def test_filter_none_config_returns_tasks_unchanged():
    tasks = [make_task(str(k)) for k in range(3)]
    tasks.append(make_task("r123", parent=""))  # even ambiguous ids pass when filtering is off
    kept = filter_slurm_array_source_tasks(tasks, None, "reader")
    assert len(kept) == len(tasks)
    assert all(k is t for k, t in zip(kept, tasks, strict=True))


def test_filter_empty_input(caplog):
    with caplog.at_level(logging.DEBUG, logger=LOGGER_NAME):
        assert filter_slurm_array_source_tasks([], SlurmArrayConfig(0, 3, 0), "reader") == []
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "Slurm array shard 0/3: assigned 0 of 0 source tasks for stage reader")
    ]


def test_filter_keeps_this_shard_in_order(caplog):
    tasks = [make_task(str(k)) for k in range(8)]
    config = SlurmArrayConfig(shard_index=2, total_shards=3, minimum_shard_index=0)
    with caplog.at_level(logging.DEBUG, logger=LOGGER_NAME):
        kept = filter_slurm_array_source_tasks(tasks, config, "file_partitioning")
    assert [t.task_id for t in kept] == ["0_1", "0_4", "0_5", "0_6"]
    assert all(any(k is t for t in tasks) for k in kept)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        (LOGGER_NAME, logging.INFO,
         "Slurm array shard 2/3: assigned 4 of 8 source tasks for stage file_partitioning")
    ]


def test_filter_logs_warning_when_nothing_assigned(caplog):
    tasks = [make_task(str(k)) for k in range(8)]
    with caplog.at_level(logging.DEBUG, logger=LOGGER_NAME):
        kept = filter_slurm_array_source_tasks(tasks, SlurmArrayConfig(0, 3, 1), "reader")
    assert kept == []
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "Slurm array shard 0/3: assigned 0 of 8 source tasks for stage reader")
    ]


def test_filter_ids_over_three_shards_are_a_partition():
    tasks = [make_task(str(k)) for k in range(8)]
    parts = [
        filter_slurm_array_source_tasks(tasks, SlurmArrayConfig(i, 3, 0), "reader")
        for i in range(3)
    ]
    assert [[t.task_id for t in p] for p in parts] == [
        ["0_0", "0_3"],
        ["0_2", "0_7"],
        ["0_1", "0_4", "0_5", "0_6"],
    ]
    seen = [id(t) for p in parts for t in p]
    assert sorted(seen) == sorted(id(t) for t in tasks)


def test_filter_minimum_one_matches_minimum_zero_shifted():
    tasks = [make_task(str(k)) for k in range(8)]
    for k in range(3):
        zero = filter_slurm_array_source_tasks(tasks, SlurmArrayConfig(k, 3, 0), "reader")
        one = filter_slurm_array_source_tasks(tasks, SlurmArrayConfig(k + 1, 3, 1), "reader")
        assert [t.task_id for t in one] == [t.task_id for t in zero]


def test_filter_rejects_ambiguous_ids():
    tasks = [make_task("0"), make_task("r123", parent="")]
    with pytest.raises(ValueError, match="requires deterministic task IDs") as exc_info:
        filter_slurm_array_source_tasks(tasks, SlurmArrayConfig(0, 3, 0), "reader")
    assert str(exc_info.value) == (
        "Slurm array source filtering requires deterministic task IDs, but stage reader "
        "emitted ambiguous source task IDs: ['r123']"
    )


def test_filter_ambiguous_message_lists_first_five():
    tasks = [make_task(f"r{k}", parent="") for k in range(7)]
    tasks.insert(2, make_task("3"))
    with pytest.raises(ValueError) as exc_info:
        filter_slurm_array_source_tasks(tasks, SlurmArrayConfig(0, 2, 0), "my_stage")
    assert str(exc_info.value) == (
        "Slurm array source filtering requires deterministic task IDs, but stage my_stage "
        "emitted ambiguous source task IDs: ['r0', 'r1', 'r2', 'r3', 'r4']"
    )


deterministic_ids = st.lists(
    st.from_regex(r"[0-9]{1,3}(_[0-9a-f]{1,12}){1,3}", fullmatch=True), max_size=30
)


@settings(max_examples=60, deadline=None)
@given(ids=deterministic_ids)
def test_property_three_shards_partition_any_deterministic_ids(ids):
    tasks = [make_task(i.split("_", 1)[1], parent=i.split("_", 1)[0]) for i in ids]
    assert [t.task_id for t in tasks] == ids
    parts = [
        filter_slurm_array_source_tasks(tasks, SlurmArrayConfig(k, 3, 0), "reader")
        for k in range(3)
    ]
    positions = [[next(n for n, t in enumerate(tasks) if t is k) for k in p] for p in parts]
    assert sorted(n for p in positions for n in p) == list(range(len(tasks)))
    for p in positions:
        assert p == sorted(p)  # order preserved within each shard


@settings(max_examples=60, deadline=None)
@given(ids=deterministic_ids, k=st.integers(min_value=0, max_value=4))
def test_property_minimum_one_shard_k_plus_one_equals_minimum_zero_shard_k(ids, k):
    tasks = [make_task(i.split("_", 1)[1], parent=i.split("_", 1)[0]) for i in ids]
    zero = filter_slurm_array_source_tasks(tasks, SlurmArrayConfig(k, 5, 0), "reader")
    one = filter_slurm_array_source_tasks(tasks, SlurmArrayConfig(k + 1, 5, 1), "reader")
    assert len(one) == len(zero)
    assert all(a is b for a, b in zip(one, zero, strict=True))
    for task_id in ids:
        assert shard_for_task(task_id, 5, 1) == shard_for_task(task_id, 5, 0) + 1


# -- §5.6 driver rule --------------------------------------------------------------------------
def test_driver_without_node_id():
    assert is_slurm_array_driver_process({}) is True


def test_driver_node_zero():
    assert is_slurm_array_driver_process({"SLURM_NODEID": "0"}) is True


@pytest.mark.parametrize("node", ["1", "00", " 0", "7"])
def test_non_driver_nodes(node):
    # A plain string comparison: "00" is not "0".
    assert is_slurm_array_driver_process({"SLURM_NODEID": node}) is False


def test_driver_reads_os_environ_by_default(clean_os_environ):
    assert is_slurm_array_driver_process() is True
    clean_os_environ.setenv("SLURM_NODEID", "1")
    assert is_slurm_array_driver_process() is False
