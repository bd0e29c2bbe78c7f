"""No credential in clear in a job's folder or the job index (issue 19, item 7), with real CLI
runs of a YAML pipeline whose stages hold ``storage_options`` secrets at several depths: a
failed attempt (its error quotes the secrets), ``status``, ``report``, a ``--resume`` with one
changed secret (refused, naming it) and one with the same secrets (accepted). One more secret
is a curator-dask setting, from the environment."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli

pytestmark = pytest.mark.slow

SECRETS = {
    "account_key": "AcctKeyQ7vX2m9Lp",
    "sas_token": "SasTokZ3k8Wq1Rt",
    "conn_key": "ConnKeyY6n4Hs0Ub",
    "bearer": "BearerJ5c7Fo2Ie",
    "passphrase": "PassPhrB9d3Ga6Kw",
    "aws_secret": "AwsSecM1x5Tn8Vy",
    "access_key_id": "AkIdP4r2Ls7Qe",
    "api_key": "ApiKeyN8w6Zc3Jh",
    "dask_config": "DaskCfgTokE2u9Rb",  # a setting (resolved_config.json's curator-dask)
}

STAGES = textwrap.dedent("""
    import os
    from dataclasses import dataclass, field

    from curator_dask import ProcessingStage


    @dataclass
    class Connect(ProcessingStage):
        '''Passes batches on; raises, quoting its options, while the file `fail_if` exists.'''

        name: str = "connect"
        storage_options: dict = field(default_factory=dict)
        api_key: str = ""
        fail_if: str = ""

        def process(self, task):
            if self.fail_if and os.path.exists(self.fail_if):
                key = self.storage_options["credentials"]["account_key"]
                raise PermissionError(
                    f"could not connect with {self.storage_options} (key {key})")
            return task
""")


def pipeline_yaml(root: Path, passphrase: str) -> str:
    s = SECRETS
    return textwrap.dedent(f"""
        name: secrets
        stages:
          - _target_: curator_dask.stages.text.io.reader.JsonlReader
            file_paths: {root / "input"}
            files_per_partition: 1
            read_kwargs:
              storage_options:
                account_key: {s["account_key"]}
                sas_token: {s["sas_token"]}
                connection_string: "AccountName=acct;AccountKey={s["conn_key"]};EndpointSuffix=x"
                client_kwargs:
                  headers:
                    Authorization: "Bearer {s["bearer"]}"
                  passphrase: {passphrase}
          - _target_: stages.Connect
            fail_if: {root / "fail-now"}
            api_key: {s["api_key"]}
            storage_options:
              anon: false
              credentials:
                account_key: {s["account_key"]}
                sas_token: {s["sas_token"]}
          - _target_: curator_dask.stages.text.io.writer.JsonlWriter
            path: {root / "output"}
            write_kwargs:
              storage_options:
                aws_secret_access_key: {s["aws_secret"]}
                AccessKeyId: {s["access_key_id"]}
    """)


def leaks(paths: list[Path], secrets: list[str]) -> list[str]:
    """``file: secret`` for every secret found in clear in any of the files."""
    found = []
    for path in paths:
        data = path.read_bytes()
        found += [f"{path}: {s}" for s in secrets if s.encode() in data]
    return found


def test_no_secret_reaches_the_job_folder_and_resume_compares_by_digest(tmp_path, job_index):
    (tmp_path / "stages.py").write_text(STAGES)
    generate_jsonl(str(tmp_path / "input"), files=3, docs_per_file=2, seed=19)
    (tmp_path / "p.yaml").write_text(pipeline_yaml(tmp_path, SECRETS["passphrase"]))
    changed = "PassPhrB9d3Ga6Kx"
    (tmp_path / "changed.yaml").write_text(pipeline_yaml(tmp_path, changed))
    (tmp_path / "fail-now").write_text("")
    job_dir = tmp_path / "curator-dask-jobs" / "leaky"
    secrets = [*SECRETS.values(), changed]

    def run(pipeline: str, *options: str):
        return cli("run", pipeline, "--workers", "1", "--no-progress", *options, cwd=tmp_path,
                   timeout=240, env={"DASK_CURATOR_DASK__EXTRA__API_TOKEN": SECRETS["dask_config"]})

    failed = run("p.yaml", "--job-id", "leaky")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert cli("status", "leaky", "--json", cwd=tmp_path).returncode == 0
    assert cli("status", cwd=tmp_path).returncode == 0
    report = cli("report", "leaky", cwd=tmp_path, timeout=120)
    assert report.returncode == 0, report.stderr
    files = [p for p in job_dir.rglob("*") if p.is_file()]
    assert {"config_fingerprint.json", "resolved_config.json", "dag_execution_plan.json",
            "events.jsonl", "job_summary.json", "report.html"} <= {p.name for p in files}
    found = leaks([*files, job_index], secrets)
    assert found == [], "\n".join(found)
    summary = json.loads((job_dir / "job_summary.json").read_text())
    assert summary["state"] == "failed"
    assert "could not connect with {'anon': False, 'credentials': {'account_key': '<redacted " \
           "sha256:" in summary["error"]  # the error is kept, its secrets as digests
    saved = json.loads((job_dir / "config_fingerprint.json").read_text())
    options = saved["stages"][1]["params"]["read_kwargs"]["storage_options"]
    assert options["account_key"].startswith("<redacted sha256:")  # redacted, not dropped
    assert options["client_kwargs"]["headers"]["Authorization"].startswith("<redacted sha256:")

    (tmp_path / "fail-now").unlink()
    refused = run("changed.yaml", "--resume", "leaky")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert ("stages[1] (jsonl_reader).params.read_kwargs.storage_options.client_kwargs."
            "passphrase: \"<redacted sha256:") in refused.stderr
    assert "account_key" not in refused.stderr  # only the changed setting is named
    assert not any(s in refused.stdout + refused.stderr for s in secrets)

    resumed = run("p.yaml", "--resume", "leaky")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert json.loads((job_dir / "job_summary.json").read_text())["state"] == "completed"
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 3
    assert cli("report", "leaky", cwd=tmp_path, timeout=120).returncode == 0
    files = [p for p in job_dir.rglob("*") if p.is_file()]
    assert len(list((job_dir / "logs").glob("driver-*.log"))) == 2  # both attempts that ran
    found = leaks([*files, job_index], secrets)
    assert found == [], "\n".join(found)
