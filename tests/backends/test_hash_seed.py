"""Every embedded worker process hashes strings alike (issue 19, item 12).

``hash()`` of a ``str`` is salted per interpreter unless ``PYTHONHASHSEED`` is set when it
starts. Forked workers have the forkserver's salt, so the server is started with the workers'
seed (``cluster.python-hash-seed``, 6640 by default, the value Dask's Nanny gives the workers
it spawns); the driver's own ``PYTHONHASHSEED`` wins.

Each driver here is a fresh interpreter started without ``PYTHONHASHSEED``: within one process
Dask's Nanny writes its seed into the driver's environment when it starts a worker, so a second
cluster of a process could not show what the first one of every driver does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import REPO_ROOT, cli_env

pytestmark = pytest.mark.slow

SEED_VARIABLES = ("PYTHONHASHSEED", "DASK_CURATOR_DASK__CLUSTER__PYTHON_HASH_SEED")

DRIVER = """
import sys
from curator_dask import DaskExecutor

kind, out = sys.argv[1], sys.argv[2]
if kind == "curator":
    from curator_dask import JsonlReader, JsonlWriter, Pipeline
    from tests.backends.process_stages import HashOfText

    p = (Pipeline(name="hash").add_stage(JsonlReader(file_paths="input"))
         .add_stage(HashOfText()).add_stage(JsonlWriter(path=out)))
else:
    from nemo_curator.pipeline import Pipeline
    from nemo_curator.stages.text.filters import ScoreFilter
    from nemo_curator.stages.text.filters.heuristic.repetition import RepeatingTopNGramsFilter
    from nemo_curator.stages.text.io.reader import JsonlReader
    from nemo_curator.stages.text.io.writer import JsonlWriter

    p = Pipeline(name="hash")
    p.add_stage(JsonlReader(file_paths="input"))
    # every document kept (ratio 1.0), with its score: the score is what differed
    p.add_stage(ScoreFilter(RepeatingTopNGramsFilter(max_repeating_ngram_ratio=1.0),
                            text_field="text", score_field="top_2gram_ratio"))
    p.add_stage(JsonlWriter(path=out))
p.run(executor=DaskExecutor(n_workers=2, progress=False))
"""

PROBE = """
import json, os, signal, time
from curator_dask import DaskExecutor

def probe():
    import os
    return [os.getpid(), os.getppid(), hash("curator_dask")]

with DaskExecutor(n_workers=2, progress=False) as executor:
    client = executor.start()
    first = sorted(client.run(probe).values())
    after = first
    if os.environ.get("KILL_A_WORKER"):
        os.kill(first[0][0], signal.SIGKILL)  # its Nanny starts another one (spawned)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                after = sorted(client.run(probe).values())
            except Exception:
                after = []
            if len(after) == 2 and first[0][0] not in [p[0] for p in after]:
                break
            time.sleep(0.1)
print(json.dumps({"driver": [os.getpid(), hash("curator_dask")], "first": first,
                  "after": after}))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in cli_env(pythonpath=[REPO_ROOT]).items() if k not in SEED_VARIABLES}
    return {**env, **extra}


def _python(code: str, *args: str, cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def hash_with_seed(seed: str, texts: list[str]) -> list[int]:
    """``hash(text)`` in a fresh interpreter started with ``PYTHONHASHSEED=seed``."""
    code = "import json, sys; print(json.dumps([hash(t) for t in json.load(sys.stdin)]))"
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(texts), text=True,
                          capture_output=True, env={**os.environ, "PYTHONHASHSEED": seed},
                          check=True)
    return json.loads(proc.stdout)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.jsonl"))}


@pytest.mark.parametrize("kind", ["curator", "nemo"])
def test_one_partition_is_byte_identical_from_two_worker_processes(tmp_path, kind):
    """The same partitions, run by the workers of two drivers (other processes, forked from
    other forkservers), give the same bytes: with a stage of our own that writes ``hash()``
    and set order, and with NeMo's ``ScoreFilter(RepeatingTopNGramsFilter())``, whose score
    picks the most frequent n-gram from a set (ties broken by hash order)."""
    if kind == "nemo":
        pytest.importorskip("nemo_curator")
    generate_jsonl(str(tmp_path / "input"), files=4, docs_per_file=6, seed=3)
    for out in ("first", "second"):
        _python(DRIVER, kind, out, cwd=tmp_path, env=_env())
    first, second = _files(tmp_path / "first"), _files(tmp_path / "second")
    assert len(first) == 4 and first.keys() == second.keys()
    assert first == second, [name for name in first if first[name] != second[name]]
    if kind == "curator":  # and the hashes are those of the documented seed
        rows = [json.loads(line) for data in first.values() for line in data.splitlines()]
        assert [r["text_hash"] for r in rows] == hash_with_seed("6640", [r["text"] for r in rows])


def test_forked_and_respawned_workers_hash_alike(tmp_path):
    """Workers forked by the forkserver and the one a Nanny spawns after a worker was killed
    (a replay runs there) hash like an interpreter started with PYTHONHASHSEED=6640."""
    out = json.loads(_python(PROBE, cwd=tmp_path, env=_env(KILL_A_WORKER="1")))
    (expected,) = hash_with_seed("6640", ["curator_dask"])
    driver = out["driver"][0]
    assert {ppid for _, ppid, _ in out["first"]} - {driver}, out  # forked, not spawned by us
    assert len(out["after"]) == 2, out
    respawned = [p for p in out["after"] if p[0] not in {q[0] for q in out["first"]}]
    assert [ppid for _, ppid, _ in respawned] == [driver], out  # the Nanny spawned it
    assert {h for _, _, h in out["first"] + out["after"]} == {expected}, out


def test_the_driver_environment_or_the_config_chooses_the_seed(tmp_path):
    cases = [
        ({"PYTHONHASHSEED": "77"}, "77"),  # the driver's own: the driver agrees with them
        ({"DASK_CURATOR_DASK__CLUSTER__PYTHON_HASH_SEED": "123"}, "123"),  # the config key
        ({"PYTHONHASHSEED": "0"}, "6640"),  # Dask's Nanny never starts a worker with 0
    ]
    for env, seed in cases:
        out = json.loads(_python(PROBE, cwd=tmp_path, env=_env(**env)))
        (expected,) = hash_with_seed(seed, ["curator_dask"])
        assert [h for _, _, h in out["first"]] == [expected, expected], (env, out)
        if env.get("PYTHONHASHSEED") == seed:
            assert out["driver"][1] == expected, (env, out)


def test_a_seed_python_would_refuse_is_an_error_naming_the_key(monkeypatch):
    import dask.config

    from curator_dask import DaskExecutor

    monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # set by Dask's Nanny in this process
    with (dask.config.set({"curator-dask.cluster.python-hash-seed": "forty-two"}),
          pytest.raises(ValueError, match=r"cluster.python-hash-seed='forty-two' is not a "
                                          r"PYTHONHASHSEED; use an integer from 0 to 4294967295")):
        DaskExecutor(n_workers=1, progress=False).start()
