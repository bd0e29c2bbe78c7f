"""Committed records (curator_dask/utils/records.py): written atomically with their kind and
version, read with one policy: a newer version or another kind refused (the file kept), a
record of an earlier curator_dask without kind or version read as version 1, a torn one redone
or refused as its class declares. Real files on ``tmp_path`` and on ``memory://``."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from curator_dask.errors import CommittedRecordError, CuratorDaskError
from curator_dask.utils.records import CommittedRecord


class Redone(CommittedRecord):
    kind, version, on_unreadable, what = "redone", 2, "redo", "test record"


class Refused(CommittedRecord):
    kind, version, on_unreadable, what = "refused", 1, "refuse", "test record"

    def problem(self, data: dict[str, Any]) -> str | None:
        return None if isinstance(data.get("items"), list) else "it has no items"


@pytest.fixture(params=["local", "memory"])
def where(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "records")
    return f"memory://records-{tmp_path.name}"


def _put(record: CommittedRecord, text: str) -> None:
    record.fs.makedirs(record.path.rsplit("/", 1)[0], exist_ok=True)
    record.fs.pipe_file(record.path, text.encode())


def test_a_record_is_written_whole_with_its_kind_and_version(where):
    record = Redone(f"{where}/a/x.json")
    assert record.read() is None and not record.exists()
    record.write({"key": "k", "kind": "ignored", "version": 7})  # the record's own win
    on_disk = json.loads(record.fs.cat_file(record.path))
    assert on_disk == {"key": "k", "kind": "redone", "version": 2}
    assert record.read() == on_disk
    assert [p for p in record.fs.ls(record.path.rsplit("/", 1)[0], detail=False)
            if p.endswith(".tmp")] == []  # no temp file left beside it
    record.remove()
    assert record.read() is None
    record.remove()  # none is fine


def test_a_newer_version_is_refused_and_kept(where):
    record = Redone(f"{where}/x.json")
    _put(record, json.dumps({"kind": "redone", "version": 3, "key": "k"}))
    with pytest.raises(CommittedRecordError) as err:
        record.read()
    assert isinstance(err.value, (ValueError, CuratorDaskError))
    text = str(err.value)
    assert f"the test record {record.url} is of version 3, newer than this curator_dask " \
           "reads (up to 2)" in text
    assert "run that newer curator_dask, or use a new checkpoint path" in text
    assert json.loads(record.fs.cat_file(record.path))["version"] == 3  # kept


def test_another_kind_is_refused_whatever_the_policy(where):
    record = Redone(f"{where}/x.json")
    _put(record, json.dumps({"kind": "something_else", "version": 1}))
    with pytest.raises(CommittedRecordError, match=r"is a record of kind 'something_else', "
                       r"not the test record \('redone'\) expected there; it is kept"):
        record.read()


def test_a_record_of_an_earlier_version_without_kind_or_version_is_read_as_version_1(where):
    record = Redone(f"{where}/x.json")
    _put(record, json.dumps({"key": "k", "counts": {"n": 1}}))  # as curator_dask wrote it
    assert record.read() == {"key": "k", "counts": {"n": 1}, "kind": "redone", "version": 1}
    _put(record, json.dumps({"version": 1, "key": "k"}))
    assert record.read()["version"] == 1  # older than 2: returned, for the class to migrate


@pytest.mark.parametrize("text", ['{"key": "k", "cou', "[1, 2]", '{"version": "two"}'])
def test_a_torn_record_with_the_redo_policy_reads_as_absent_with_a_warning(where, text,
                                                                           caplog):
    record = Redone(f"{where}/x.json")
    _put(record, text)
    with caplog.at_level(logging.WARNING, logger="curator_dask.utils.records"):
        assert record.read() is None
    assert f"the test record {record.url} is unreadable" in caplog.text
    assert "the step runs again" in caplog.text
    record.write({"key": "k"})  # the step, run again, writes it anew
    assert record.read()["key"] == "k"


@pytest.mark.parametrize(("text", "why"), [
    ('{"items": [1, ', "it is not valid JSON"),
    ('"items"', "it is not a JSON object but str"),
    ('{"kind": "refused"}', "it has no items"),
])
def test_a_torn_record_with_the_refuse_policy_is_refused_and_kept(where, text, why):
    record = Refused(f"{where}/x.json")
    _put(record, text)
    with pytest.raises(CommittedRecordError, match=f"cannot be used: {why}") as err:
        record.read()
    assert "It is kept, and nothing was done; restore it" in str(err.value)
    assert record.fs.cat_file(record.path) == text.encode()
