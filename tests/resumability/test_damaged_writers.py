"""Damaged writer files: runs and ``checkpoint inspect`` survive them (contract.md §4.3).

A file truncated to a page boundary or with a scrambled data page kills a process that maps it
(``SIGBUS``), so writer files are read in a child process, a damaged one is skipped with the
warning, and a writer never reopens a damaged file of its own name. Real LMDB files written by
the store's own writer. Everything that reads a damaged file with the code under test runs in a
subprocess, so a regression shows as a negative return code instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from curator_dask.resumability.store import METADATA_DIRNAME, CompletionStore
from tests.helpers import REPO_ROOT
from tests.helpers import cli as run_cli

CRASHES = (-signal.SIGBUS, -signal.SIGSEGV)
KINDS = ("truncated", "scrambled", "empty", "random")
PIPELINE = """\
name: damaged
stages:
  - _target_: curator_dask.stages.text.io.reader.JsonlReader
    file_paths: ./input
    files_per_partition: 1
  - _target_: curator_dask.stages.text.io.writer.JsonlWriter
    path: ./out
"""


def write_ids(ckpt: Path, writer_id: str, ids: list[str]) -> Path:
    store = CompletionStore(str(ckpt), writer_id=writer_id)
    store.add(ids)
    store.close()
    return ckpt / METADATA_DIRNAME / f"{writer_id}.mdb"


def named_db_root(path: Path) -> int:
    """The root page of the ``completed_sources`` database (64-bit LMDB 0.9 layout): the newest
    meta page names the main database's root leaf, whose one node holds the named one's record.
    """
    data = path.read_bytes()
    psize = struct.unpack_from("<I", data, 40)[0]
    meta = max((0, psize), key=lambda off: struct.unpack_from("<Q", data, off + 144)[0])
    main = struct.unpack_from("<Q", data, meta + 128)[0] * psize
    node = main + struct.unpack_from("<H", data, main + 16)[0]
    ksize = struct.unpack_from("<H", data, node + 6)[0]
    assert data[node + 8:node + 8 + ksize] == b"completed_sources"
    return struct.unpack_from("<Q", data, node + 8 + ksize + 40)[0]


def damage(path: Path, kind: str) -> None:
    """(a) truncate to 8192 bytes; (b) scramble the body of the named database's data page,
    keeping its 16-byte header, so its node offsets point past the end of the file; (c) empty;
    (d) random bytes."""
    if kind == "truncated":
        os.truncate(path, 8192)
    elif kind == "scrambled":
        page = named_db_root(path)
        with open(path, "r+b") as f:
            f.seek(page * 4096 + 16)
            f.write(b"\xff" * (4096 - 16))
    elif kind == "empty":
        os.truncate(path, 0)
    else:
        path.write_bytes(os.urandom(9000))


def isolated(body: str, **values: object) -> dict:
    """Run ``body`` in a fresh interpreter (``values`` bound as names, logging to stderr); it
    sets ``result``, returned parsed. Fails on a non-zero exit, naming a signal."""
    code = "\n".join([
        "import json, logging, sys",
        "logging.basicConfig(level=logging.WARNING, format='%(message)s')",
        *(f"{name} = {value!r}" for name, value in values.items()),
        textwrap.dedent(body),
        "print(json.dumps(result))",
    ])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=120, check=False)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr}"
    return {**json.loads(out.stdout), "stderr": out.stderr}


@pytest.mark.parametrize("kind", ["truncated", "scrambled"])
def test_the_damage_kills_a_process_that_maps_the_file(tmp_path: Path, kind: str) -> None:
    """The defect itself: reading the file in-process dies of a signal, with no message."""
    bad = write_ids(tmp_path, "w-1", [f"s{i:05d}" for i in range(2000)])
    damage(bad, kind)
    code = ("from curator_dask.resumability.store import read_completed; "
            f"read_completed({str(bad)!r})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=REPO_ROOT,
                         timeout=60, check=False)
    assert out.returncode in CRASHES


@pytest.mark.parametrize("kind", KINDS)
def test_union_skips_a_damaged_file_with_the_warning(tmp_path: Path, kind: str) -> None:
    write_ids(tmp_path, "a-1", ["a", "b"])
    bad = write_ids(tmp_path, "b-2", [f"s{i:05d}" for i in range(2000)])
    write_ids(tmp_path, "c-3", ["c"])
    damage(bad, kind)
    out = isolated("""
        from curator_dask.resumability.store import CompletionStore
        store = CompletionStore(ckpt, writer_id="reader-9")
        result = {"union": sorted(store.load_union()), "unreadable": store.unreadable}
        store.close()
    """, ckpt=str(tmp_path))
    assert out["union"] == ["a", "b", "c"]
    assert out["unreadable"] == [str(bad)]
    assert f"resumability: skipping unreadable checkpoint {bad}: " in out["stderr"]
    if kind in ("truncated", "scrambled"):
        assert "reading it killed the reader process (SIG" in out["stderr"]


def test_one_reader_process_restarted_after_each_crash(tmp_path: Path) -> None:
    """Files are answered in order; a crash costs one more child, the files after it are read."""
    paths = [write_ids(tmp_path, f"w-{i}", [f"{i}-x", f"{i}-y"]) for i in range(10)]
    for i in (2, 3, 7):
        damage(paths[i], "truncated")
    out = isolated("""
        from curator_dask.resumability.safe_read import SafeReader
        with SafeReader() as reader:
            outcomes = list(reader.read_all(paths + [OSError("download failed")]))
        result = {"ids": [sorted(ids) if ids is not None else None for ids, _ in outcomes],
                  "errors": [type(e).__name__ if e else None for _, e in outcomes],
                  "starts": reader.starts}
    """, paths=[str(p) for p in paths])
    assert out["starts"] == 4
    assert out["errors"] == [None, None, "ReaderCrashedError", "ReaderCrashedError", None, None,
                             None, "ReaderCrashedError", None, None, "OSError"]
    assert out["ids"][:2] == [["0-x", "0-y"], ["1-x", "1-y"]]
    assert out["ids"][9] == ["9-x", "9-y"] and out["ids"][10] is None


@pytest.mark.parametrize("kind", ["truncated", "scrambled", "random"])
@pytest.mark.parametrize("staged", [False, True], ids=["local", "staged"])
def test_own_damaged_file_is_never_reopened(tmp_path: Path, kind: str, staged: bool) -> None:
    """A recycled pid finds a damaged file of its own name: it is set aside, not opened."""
    write_ids(tmp_path, "other-1", ["o"])
    own = write_ids(tmp_path, "host-7", [f"s{i:05d}" for i in range(2000)])
    damage(own, kind)
    out = isolated("""
        from curator_dask.resumability.store import CompletionStore, read_completed
        store = CompletionStore(ckpt, writer_id="host-7", staged=staged)
        union = sorted(store.load_union())
        store.add(["new"])
        store.close()
        result = {"union": union, "unreadable": store.unreadable,
                  "own": sorted(read_completed(own)), "set_aside": store.set_aside}
    """, ckpt=str(tmp_path), own=str(own), staged=staged)
    assert out["union"] == ["o"]
    assert out["own"] == ["new"]  # a sound file again, with this run's completions
    assert out["unreadable"] == [str(own)] and out["set_aside"] == str(own)
    assert f"resumability: own writer file {own} is damaged" in out["stderr"]
    aside = own.with_name("host-7.mdb.damaged")
    assert aside.exists() is not staged


def test_sound_own_file_is_resumed(tmp_path: Path) -> None:
    own = write_ids(tmp_path, "host-7", ["a"])
    store = CompletionStore(str(tmp_path), writer_id="host-7")
    assert store.set_aside is None and store.load_union() == {"a"}
    store.close()
    assert not own.with_name("host-7.mdb.damaged").exists()


def test_no_reader_process_falls_back_to_this_one(tmp_path: Path) -> None:
    write_ids(tmp_path, "a-1", ["a"])
    write_ids(tmp_path, "b-2", ["b"])
    out = isolated("""
        from curator_dask.resumability import safe_read
        from curator_dask.resumability.store import CompletionStore
        safe_read._CHILD = "import sys; sys.exit(3)"
        store = CompletionStore(ckpt, writer_id="reader-9")
        result = {"union": sorted(store.load_union())}
        store.close()
    """, ckpt=str(tmp_path))
    assert out["union"] == ["a", "b"]
    assert "cannot start a reader process for checkpoint files (it ended with exit status 3)" in (
        out["stderr"])


@pytest.mark.parametrize("kind", KINDS)
def test_inspect_reports_the_damaged_file(tmp_path: Path, kind: str) -> None:
    write_ids(tmp_path, "a-1", ["a", "b"])
    bad = write_ids(tmp_path, "b-2", [f"s{i:05d}" for i in range(2000)])
    damage(bad, kind)
    text = run_cli("checkpoint", "inspect", str(tmp_path), timeout=60)
    assert text.returncode == 0, text.stderr
    assert f"{bad}  {bad.stat().st_size} bytes  UNREADABLE (damaged: " in text.stdout
    assert "damaged writer files: 1 " in text.stdout
    assert "completed sources (union): 2" in text.stdout
    out = run_cli("checkpoint", "inspect", str(tmp_path), "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["damaged"] == [str(bad)] and report["completed"] == ["a", "b"]
    (good, damaged) = report["writers"]
    assert (good["completed"], good["damaged"], good["error"]) == (2, False, None)
    assert (damaged["completed"], damaged["damaged"]) == (None, True)
    if kind in ("truncated", "scrambled"):
        assert damaged["error"].startswith(f"ReaderCrashedError: {bad}: reading it killed")


# --------------------------------------------------------------------------------------------
# A real run with a damaged writer file present
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Two real CLI runs: the first completes input files 0 and 1 (its writer file is
    returned), the second 2 and 3."""
    from curator_dask.sample_data import generate_jsonl

    base = tmp_path_factory.mktemp("two-runs")
    (base / "p.yaml").write_text(PIPELINE)
    generate_jsonl(str(base / "all"), files=4, docs_per_file=3, seed=5)
    (base / "input").mkdir()
    for i in (0, 1):
        shutil.copy(base / "all" / f"part-0000{i}.jsonl", base / "input")
    first = cli_run(base)
    assert first.returncode == 0, first.stderr
    (first_file,) = os.listdir(base / "ckpt" / METADATA_DIRNAME)
    for i in (2, 3):
        shutil.copy(base / "all" / f"part-0000{i}.jsonl", base / "input")
    second = cli_run(base)
    assert "4 source partitions: 2 already complete (skipped), 2 to process" in second.stderr
    shutil.rmtree(base / "out")
    return base, first_file


@pytest.fixture
def checkpointed(two_runs: tuple[Path, str]) -> Iterator[tuple[Path, str]]:
    """``two_runs``, its checkpoint restored afterwards. Source ids hash absolute input paths,
    so the runs cannot be copied elsewhere."""
    base, _ = two_runs
    saved = base.parent / f"{base.name}-saved"
    shutil.copytree(base / "ckpt", saved)
    yield two_runs
    shutil.rmtree(base / "ckpt")
    shutil.rmtree(base / "out", ignore_errors=True)
    saved.rename(base / "ckpt")


def cli_run(cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("run", "p.yaml", "--workers", "1", "--checkpoint-path", "ckpt", "--no-job",
                   cwd=cwd, timeout=180)


def writer_ids(ckpt: Path) -> dict[str, list[str]]:
    """``{file name: ids}`` of the readable writer files (read in a child process)."""
    from curator_dask.resumability.safe_read import SafeReader

    paths = sorted((ckpt / METADATA_DIRNAME).glob("*.mdb"))
    with SafeReader() as reader:
        return {p.name: sorted(ids) for p, (ids, _) in zip(paths, reader.read_all(map(str, paths)),
                                                          strict=True) if ids is not None}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["truncated", "scrambled"])
def test_run_with_a_damaged_writer_file_completes(
    checkpointed: tuple[Path, str], kind: str
) -> None:
    work, first_file = checkpointed
    before = writer_ids(work / "ckpt")
    (second_file,) = set(before) - {first_file}
    bad = work / "ckpt" / METADATA_DIRNAME / first_file
    damage(bad, kind)
    out = cli_run(work)
    assert out.returncode == 0, out.stderr  # not -7 (SIGBUS)
    assert f"{bad} is damaged" in out.stderr or (
        f"resumability: skipping unreadable checkpoint {bad}: " in out.stderr)
    assert "4 source partitions: 2 already complete (skipped), 2 to process" in out.stderr
    after = writer_ids(work / "ckpt")
    assert after[second_file] == before[second_file]  # skipped: not run again
    rerun = {name: ids for name, ids in after.items() if name != second_file}
    assert list(rerun.values()) == [before[first_file]]  # the damaged file's sources ran again
    assert len(os.listdir(work / "out")) == 2
