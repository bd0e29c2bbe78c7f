"""The credential rule of the job folder (issue 19, item 7): which names are secret, what a
redacted value looks like, text scrubbing, and the writers of the job folder using it (a real
JobRun: its saved configuration, events, summary and driver log)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from curator_dask.jobs.run import JobRun
from curator_dask.resumability.fingerprint import config_fingerprint, stage_fingerprint
from curator_dask.stages.base import ProcessingStage
from curator_dask.utils.redact import (
    FREE_TEXT,
    collect_secrets,
    is_secret_name,
    redact,
    redacted,
    scrub_text,
)

SECRET_NAMES = [
    "account_key", "aws_secret_access_key", "key", "api_key", "apiKey", "x-api-key",
    "AccessKeyId", "AccountKey", "sas_token", "SASToken", "hf_token", "HF_TOKEN", "_hf_token",
    "token", "secret", "client_secret", "secretAccessKey", "password", "db_password", "passwd",
    "Pwd", "passphrase", "credentials", "service_account_credential", "creds",
    "connection_string", "connectionString", "ConnectionString", "conn_str", "Authorization",
    "auth", "Cookie", "sig", "SharedAccessSignature", "private_key", "session.token",
    "sort_key", "pad_token", "monkey",  # not credentials: redacted all the same (by design)
    "secret_name", "password_file",  # about a secret, but a strong word: redacted
]
PLAIN_NAMES = [
    "keep_outputs", "keys", "tokens", "max_tokens", "min_tokens", "tokenizer", "keyword",
    "bypass_whitespace", "anon", "account_name", "client_id", "endpoint_url", "path",
    "reconn_strategy", "author", "text_field", "storage_options", "headers", "id",
    "key_prefix", "key_field", "token_count", "key_file", "KeyName",  # about a key, not one
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_names(name):
    assert not is_secret_name(name)


def test_non_string_names_are_not_secret():
    assert not any(is_secret_name(n) for n in (1, None, 2.5, ("key",)))


def test_a_redacted_value_is_a_stable_short_digest():
    token = redacted("hunter22")
    assert token.startswith("<redacted sha256:") and len(token) == len("<redacted sha256:>") + 12
    assert redacted("hunter22") == token != redacted("hunter23")
    assert redacted(123) != redacted("123")  # typed: a number is not its text
    assert redacted(b"hunter22") == token


def test_redact_walks_every_depth_and_keeps_none_and_booleans():
    data = {"stages": [{"params": {"read_kwargs": {"storage_options": {
        "anon": False, "account_key": "AK1", "client_kwargs": {
            "headers": {"Authorization": "Bearer B1"}, "passphrase": "P1"},
        "credentials": {"user": "u", "password": "P2", "port": 1, "sso": None}}}}}],
        "keep_outputs": True}
    out = redact(data)
    options = out["stages"][0]["params"]["read_kwargs"]["storage_options"]
    assert options["anon"] is False and out["keep_outputs"] is True
    assert options["account_key"] == redacted("AK1")
    assert options["client_kwargs"] == {"headers": {"Authorization": redacted("Bearer B1")},
                                        "passphrase": redacted("P1")}
    # every value under a secret name, its keys kept
    assert options["credentials"] == {"user": redacted("u"), "password": redacted("P2"),
                                      "port": redacted(1), "sso": None}
    assert redact(out) == out  # redacting twice changes nothing
    assert not any(s in json.dumps(out) for s in ("AK1", "B1", "P1", "P2"))


def test_text_loses_secret_pairs_and_in_free_text_the_jobs_secret_values():
    assert scrub_text("open failed: {'account_key': 'AK1', 'anon': False}") == (
        f"open failed: {{'account_key': '{redacted('AK1')}', 'anon': False}}")
    assert scrub_text("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=AK2==;"
                      "EndpointSuffix=core.windows.net") == (
        f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={redacted('AK2==')};"
        "EndpointSuffix=core.windows.net")
    assert scrub_text("https://a.blob.core.windows.net/c/x.jsonl?sv=2020&sig=S1%2B&sp=r") == (
        f"https://a.blob.core.windows.net/c/x.jsonl?sv=2020&sig={redacted('S1%2B')}&sp=r")
    assert scrub_text("headers: Authorization: Bearer B2 sent") == (
        f"headers: Authorization: {redacted('Bearer B2')} sent")
    assert scrub_text('{"message": "token=T1 and pwd=\\"P 3\\""}') == (
        f'{{"message": "token={redacted("T1")} and pwd=\\"{redacted("P 3")}\\""}}')
    assert scrub_text("http://127.0.0.1:8787/status, key_size: 3, api_key: 4") == (
        f"http://127.0.0.1:8787/status, key_size: 3, api_key: {redacted('4')}")
    already = f"account_key: {redacted('AK1')}"
    assert scrub_text(already) == already
    # a bare value in prose is found only as one of the job's secret values
    assert scrub_text("denied (key AK1)") == "denied (key AK1)"
    assert scrub_text("denied (key AK1X)", {"AK1X"}) == f"denied (key {redacted('AK1X')})"
    assert scrub_text("a ab abc", {"ab"}) == "a ab abc"  # shorter than 4: not searched for


def test_free_text_fields_alone_lose_the_values_structured_ones_keep_them():
    secrets = {"document_score"}  # e.g. a `sort_key: document_score` (a false positive)
    record = {"stage": "document_score_filter", "error": "failed at document_score"}
    out = redact(record, secrets)
    assert out["stage"] == "document_score_filter"  # names the report joins on stay intact
    assert out["error"] == f"failed at {redacted('document_score')}"
    assert {"error", "message", "command"} <= FREE_TEXT


def test_long_text_costs_linear_time():
    """No catastrophic backtracking: these would take minutes with a naive pattern."""
    for text in ("a" * 200_000 + ":" + "a" * 200_000, ("k" * 60 + "=") * 5000,
                 "key=" + "x" * 100_000, ('password: "' + "x" * 5000) * 20):
        scrub_text(text)  # the test's own timeout is the bound; no wall-clock assertion


def test_collect_secrets_gathers_the_redacted_values():
    with collect_secrets() as found:
        redact({"password": "hunter22", "user": "bob", "key": "ab"})
    assert found == {"hunter22"}  # "ab" is too short to scrub text for
    redact({"password": "outside"})
    assert found == {"hunter22"}


@dataclass
class Holder(ProcessingStage):
    name: str = "holder"
    storage_options: dict = field(default_factory=dict)
    api_key: str = ""


def test_the_fingerprint_redacts_new_names_at_any_depth_and_still_sees_a_change():
    options = {"account_key": "AK1", "sas_token": "SAS1", "anon": False,
               "connection_string": "AccountName=a;AccountKey=CK1",
               "client_kwargs": {"passphrase": "PP1", "headers": {"Authorization": "B1"}}}
    a = stage_fingerprint(Holder(storage_options=options, api_key="API1"))
    text = json.dumps(a)
    assert not any(s in text for s in ("AK1", "SAS1", "CK1", "PP1", "B1", "API1")), text
    assert a["params"]["storage_options"]["anon"] is False
    changed = {**options, "client_kwargs": {**options["client_kwargs"], "passphrase": "PP2"}}
    b = stage_fingerprint(Holder(storage_options=changed, api_key="API1"))
    assert a != b and a["params"]["storage_options"]["account_key"] == (
        b["params"]["storage_options"]["account_key"])
    assert config_fingerprint([Holder(storage_options=options)])["digest"] == (
        config_fingerprint([Holder(storage_options=dict(options))])["digest"])


class Source(ProcessingStage):
    name = "source"
    is_source_stage = True


def test_a_jobrun_writes_no_secret_in_its_folder(tmp_path):
    """A real JobRun: its saved configuration, its events (a warning and the failure), its
    summary (the error) and its driver log (a warning line) hold the job's secret values only
    as digests."""
    secrets = ["AKsecret111", "PPsecret222"]
    stage = Holder(storage_options={"account_key": secrets[0],
                                    "client_kwargs": {"passphrase": secrets[1]}})
    job = JobRun([Source(), stage], work_dir=str(tmp_path / "jobs"), job_id="redacting",
                 heartbeat=3600)
    job.event("warning", message=f"retrying with {secrets[1]}")
    logging.getLogger("curator_dask.tests").warning("opened with options %s",
                                                    stage.storage_options)
    job.finish("failed", error=PermissionError(f"denied for key {secrets[0]}"))
    folder = Path(job.directory.path)
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"config_fingerprint.json", "events.jsonl",
                                       "job_summary.json", f"driver-{job.run_id}.log"}
    for path in files:
        data = path.read_bytes()
        assert not any(s.encode() in data for s in secrets), path
    assert redacted(secrets[0]).encode() in (folder / "job_summary.json").read_bytes()
    assert job.secrets == set(secrets)  # what free text is scrubbed of
    log = (folder / "logs" / f"driver-{job.run_id}.log").read_text()
    assert f"'account_key': '{redacted(secrets[0])}'" in log
