"""Default storage options for object stores: config ``io.storage-options``, set by
``run --storage-option KEY=VALUE``, used by readers, writers and the checkpoint given none;
end to end against a real S3-compatible server (moto's, on 127.0.0.1), credentials kept out of
the job folder."""

from __future__ import annotations

import json

import dask.config
import pytest

import curator_dask.config  # noqa: F401 (the defaults, before any dask.config.set below)
from tests.helpers import cli, moto_s3

KEY = "io.storage-options"
DEFAULT = {"anon": False, "client_kwargs": {"region_name": "us-east-1"}}


@pytest.mark.parametrize("items, expected", [
    (["anon=true"], {"anon": True}),
    (["client_kwargs.endpoint_url=http://127.0.0.1:5555"],
     {"client_kwargs": {"endpoint_url": "http://127.0.0.1:5555"}}),
    (["a.b.c=1", "a.b.d=x y", "a.e=null"], {"a": {"b": {"c": 1, "d": "x y"}, "e": None}}),
    # JSON when it parses (0123 is no JSON number), else the string
    (['key="123"', "secret=0123", "n=123", "x=1.5e3"],
     {"key": "123", "secret": "0123", "n": 123, "x": 1500.0}),
    (['config_kwargs={"s3": {"addressing_style": "path"}}', "config_kwargs.retries=3"],
     {"config_kwargs": {"s3": {"addressing_style": "path"}, "retries": 3}}),
    (["profile=dev", "profile=prod"], {"profile": "prod"}),  # the last one given wins
])
def test_parse_values_as_json_else_strings_and_nest_dotted_keys(items, expected):
    from curator_dask.utils.storage_options import parse_storage_options

    assert parse_storage_options(items) == expected


@pytest.mark.parametrize("items, expected", [
    (["secret"], "--storage-option secret: expected KEY=VALUE"),
    (["=hunter22"], "--storage-option =...: expected KEY=VALUE"),
    (["client_kwargs..x=hunter22"], "--storage-option client_kwargs..x=...: expected"),
    (["a=hunter22", "a.b=1"], "--storage-option a.b=...: a is already set to a value"),
    (["a.b=1", "a=hunter22"], "--storage-option a=...: a already holds nested options"),
])
def test_parse_errors_name_the_key_never_the_value(items, expected):
    from curator_dask.utils.storage_options import parse_storage_options

    with pytest.raises(ValueError, match="^" + expected.replace(".", r"\.")) as info:
        parse_storage_options(items)
    assert "hunter22" not in str(info.value)


def test_readers_writers_and_checkpoint_given_none_take_the_default_when_remote(tmp_path):
    from curator_dask.backends.base import RunOptions
    from curator_dask.stages.text.io.reader import JsonlReader
    from curator_dask.stages.text.io.writer import JsonlWriter

    with dask.config.set({f"curator-dask.{KEY}": DEFAULT}):
        reader = JsonlReader(file_paths="memory://so-test/in")
        partitioning, read = reader.decompose()
        writer = JsonlWriter(path="memory://so-test/out")
        remote = RunOptions(checkpoint_path="memory://so-test/ckpt").checked([])
        # local paths, and options given explicitly (even {}), are left as they are
        local_reader = JsonlReader(file_paths=str(tmp_path))
        own = JsonlReader(file_paths="memory://so-test/in",
                          read_kwargs={"storage_options": {}})
        local_writer = JsonlWriter(path=str(tmp_path / "out"))
        given = RunOptions(checkpoint_path="memory://so-test/ckpt",
                           checkpoint_storage_options={"profile": "x"}).checked([])
        local = RunOptions(checkpoint_path=str(tmp_path / "ckpt")).checked([])
    assert reader.read_kwargs["storage_options"] == DEFAULT
    assert partitioning.storage_options == read.read_kwargs["storage_options"] == DEFAULT
    assert writer.write_kwargs["storage_options"] == writer.storage_options == DEFAULT
    assert remote.checkpoint_storage_options == DEFAULT
    assert "storage_options" not in local_reader.read_kwargs
    assert own.read_kwargs["storage_options"] == {}
    assert local_writer.storage_options == {} and "storage_options" not in local_writer.write_kwargs
    assert given.checkpoint_storage_options == {"profile": "x"}
    assert local.checkpoint_storage_options is None
    # a copy each: one stage changing its options changes no other stage's
    reader.read_kwargs["storage_options"]["client_kwargs"]["region_name"] = "changed"
    assert writer.storage_options == DEFAULT


def test_a_default_that_is_no_mapping_is_refused_without_showing_it():
    from curator_dask.stages.text.io.reader import JsonlReader

    with dask.config.set({f"curator-dask.{KEY}": "{'key': 'hunter22', 'anon': false}"}), \
            pytest.raises(TypeError, match="io.storage-options must be a mapping") as info:
        JsonlReader(file_paths="memory://so-test/in")
    assert "hunter22" not in str(info.value)


def test_a_bad_storage_option_is_a_usage_error_naming_it(tmp_path):
    out = cli("run", "p.yaml", "--storage-option", "client_kwargs", cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "--storage-option client_kwargs: expected KEY=VALUE" in out.stderr


# -- end to end: the CLI against moto's S3 server -------------------------------------------

ACCESS_KEY = "AKIDCURATORTEST0001"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYcuratorSECRET"
BUCKET = "curator-cli"
PIPELINE = f"""\
stages:
  - _target_: curator_dask.JsonlReader
    file_paths: s3://{BUCKET}/in
  - _target_: curator_dask.JsonlWriter
    path: s3://{BUCKET}/out
"""


@pytest.fixture(scope="module")
def s3():
    with moto_s3(BUCKET, ACCESS_KEY, SECRET) as (fs, options):
        yield fs, options["client_kwargs"]["endpoint_url"]


@pytest.mark.slow
def test_cli_run_on_s3_with_storage_options_then_resume_skips_all(s3, tmp_path):
    fs, endpoint = s3
    for i in range(3):
        fs.pipe(f"{BUCKET}/in/part-{i}.jsonl",
                f'{{"id": "{i}", "text": "document {i}"}}\n'.encode())
    (tmp_path / "p.yaml").write_text(PIPELINE)
    options = ["--storage-option", f"key={ACCESS_KEY}", "--storage-option", f"secret={SECRET}",
               "--storage-option", f"client_kwargs.endpoint_url={endpoint}",
               "--storage-option", "client_kwargs.region_name=us-west-2"]
    common = ["--checkpoint-path", f"s3://{BUCKET}/ckpt", "--work-dir", "jobs", "--workers", "1",
              "--no-progress", *options]
    # the job id is given so that the resume can name it
    first = cli("run", "p.yaml", "--job-id", "s3job", *common, cwd=tmp_path, timeout=180)
    assert first.returncode == 0, first.stderr
    outputs = sorted(fs.ls(f"{BUCKET}/out"))
    assert len(outputs) == 3
    assert sorted(json.loads(fs.cat(p))["id"] for p in outputs) == ["0", "1", "2"]
    assert fs.glob(f"{BUCKET}/ckpt/.nemo_curator_metadata/*.mdb")  # the checkpoint is on S3

    again = cli("run", "p.yaml", "--resume", "s3job", *common, cwd=tmp_path, timeout=180)
    assert again.returncode == 0, again.stderr
    job = tmp_path / "jobs" / "s3job"
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    planned = [(e["total"], e["skipped"]) for e in events if e["type"] == "sources_planned"]
    assert planned == [(3, 0), (3, 3)]
    assert sorted(fs.ls(f"{BUCKET}/out")) == outputs

    # the credentials are nowhere in the job folder: settings, events (the command line is
    # stored in them), summary, plan, logs; the endpoint (no secret) is
    texts = {p.name: p.read_text(errors="replace") for p in job.rglob("*") if p.is_file()}
    assert {"resolved_config.json", "events.jsonl", "job_summary.json"} <= set(texts)
    assert [name for name, text in texts.items() if SECRET in text or ACCESS_KEY in text] == []
    assert "--storage-option secret=<redacted sha256:" in texts["job_summary.json"]
    resolved = json.loads(texts["resolved_config.json"])
    stored = resolved["curator-dask"]["io"]["storage-options"]
    assert stored["client_kwargs"]["endpoint_url"] == endpoint
    assert stored["secret"].startswith("<redacted sha256:")
