"""Helpers shared by the tests: polling with a deadline, the CLI in a subprocess (or on a
pseudo-terminal), the union of completed source ids, waiting for a SLURM job, and importing a
module from a file path.

The ``executor`` fixture lives in ``tests/conftest.py``; the check that the SLURM answering is
the project's own local one lives in ``tests/slurm/local_slurm.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CLI = (sys.executable, "-m", "curator_dask")

T = TypeVar("T")


def poll_for(predicate: Callable[[], T], timeout: float, message: str | Callable[[], str], *,
             interval: float = 0.05, on_timeout: Callable[[], Any] | None = None,
             ignore: tuple[type[BaseException], ...] = (), fail: bool = True) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy, and
    return that; when ``timeout`` seconds pass first, call ``on_timeout`` (clean-up such as
    cancelling a job) and fail the test with ``message`` (a string, or a callable that builds
    it then, e.g. from a log).

    Exceptions of the types in ``ignore`` raised by ``predicate`` count as "not yet" (e.g. a
    file read while another process replaces it); any other exception propagates at once, so
    an ``assert`` inside ``predicate`` fails the test immediately. With ``fail=False`` the last
    (falsy) value is returned at the deadline instead, for waits whose outcome the test's own
    assertions judge afterwards.

    Like ``distributed.utils_test.poll_for``, synchronously.

    Example:
        >>> poll_for(lambda: 42, timeout=1, message="never")
        42
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except ignore:
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            if on_timeout is not None:
                on_timeout()
            if not fail:
                return value
            text = message() if callable(message) else message
            pytest.fail(f"timed out after {timeout} s: {text}")
        time.sleep(interval)


def completed_ids(checkpoint: str | os.PathLike[str]) -> set[str]:
    """The union of the completed source ids in every writer file (``*.mdb``) of a local
    checkpoint, each read as NeMo Curator reads it. Raises ``FileNotFoundError`` when the
    checkpoint has no metadata folder (yet)."""
    from curator_dask.resumability.store import METADATA_DIRNAME, read_completed

    meta = Path(checkpoint) / METADATA_DIRNAME
    ids: set[str] = set()
    for name in sorted(os.listdir(meta)):
        if name.endswith(".mdb"):
            ids |= read_completed(str(meta / name))
    return ids


def cli_env(env: Mapping[str, str] | None = None, *, pythonpath: Iterable[str | Path] = (),
            drop_prefixes: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment without the variables starting with ``drop_prefixes``, with
    ``pythonpath`` prepended to ``PYTHONPATH`` and ``env`` on top."""
    out = {k: v for k, v in os.environ.items() if not (drop_prefixes and k.startswith(
        drop_prefixes))}
    paths = [str(p) for p in pythonpath]
    if paths:
        out["PYTHONPATH"] = os.pathsep.join(filter(None, [*paths, out.get("PYTHONPATH")]))
    out.update(env or {})
    return out


def cli(*args: str, cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = 120, pythonpath: Iterable[str | Path] = (),
        drop_env_prefixes: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``python -m curator_dask ARGS`` in a subprocess (this interpreter), text output
    captured, never raising on a non-zero exit; ``env`` etc. as for :func:`cli_env`."""
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False,
                          env=cli_env(env, pythonpath=pythonpath,
                                      drop_prefixes=drop_env_prefixes))


def start_cli(*args: str, cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
              **popen: Any) -> subprocess.Popen[str]:
    """``python -m curator_dask ARGS`` started in the background, stdout and stderr piped
    (text); extra keyword arguments go to ``subprocess.Popen``."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([*CLI, *args], cwd=cwd, text=True, env=cli_env(env), **popen)


def in_terminal(argv: Sequence[str], cwd: str | Path, *, timeout: float = 120,
                when: Callable[[], bool] | None = None,
                then: Callable[[int], Any] | None = None) -> tuple[int, str]:
    """Run ``argv`` on a pseudo-terminal (120 columns), as a person at a terminal would:
    the process leads its own process group, like a shell's foreground job, so
    ``os.killpg(pid, SIGINT)`` in ``then`` is what Ctrl+C does (the children get it too).
    ``then(pid)`` is called once, as soon as ``when()`` holds. Returns ``(wait status,
    output)``, the output with carriage returns as line breaks and escape sequences removed.
    """
    import fcntl
    import pty
    import re
    import select
    import struct
    import termios

    size = struct.pack("HHHH", 40, 120, 0, 0)
    pid, fd = pty.fork()
    if pid == 0:  # the child: its own session and process group, on the terminal
        try:
            # the size is set here too, before the exec: set only by the parent, a fast child
            # could ask the terminal for its size first and get 0 x 0 (rich then uses 80)
            fcntl.ioctl(1, termios.TIOCSWINSZ, size)
            os.chdir(cwd)
            # rich reads COLUMNS before the terminal (CI=true machines leave it unset)
            os.execve(argv[0], list(argv), {**cli_env(), "COLUMNS": "120", "LINES": "40"})
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, size)
    out, called, deadline = bytearray(), False, time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not called and when is not None and when():
            called = True
            then(pid)
        if not select.select([fd], [], [], 0.1)[0]:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the terminal's other side closed (the process ended)
            break
        if not data:
            break
        out += data
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", out.decode(errors="replace"))
    return status, text.replace("\r\n", "\n").replace("\r", "\n")


def import_path(path: str | Path, name: str | None = None) -> ModuleType:
    """Import the file ``path`` as module ``name`` (default: its stem), registered in
    ``sys.modules`` (dataclasses and ``cloudpickle.register_pickle_by_value`` need that),
    without touching ``sys.path``. A module of that name from the same file is reused."""
    path = Path(path).resolve()
    name = name or path.stem
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) == str(path):
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        msg = f"cannot import {path}"
        raise ImportError(msg)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def wait_for_job(job_id: str, timeout: float = 240, *, interval: float = 1) -> None:
    """Wait until the SLURM job (all its array tasks) has left the queue; if it has not in
    ``timeout`` seconds, cancel it and fail with what ``squeue`` last said (state and reason,
    e.g. ``PENDING Resources``)."""
    last = [""]

    def gone() -> bool:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i %T %r"],
                             capture_output=True, text=True, check=False)
        last[0] = out.stdout.strip() or out.stderr.strip()
        return out.returncode == 0 and not out.stdout.strip()

    poll_for(gone, timeout, lambda: f"job {job_id} did not finish in {timeout} s; squeue: "
             f"{last[0]}", interval=interval,
             on_timeout=lambda: subprocess.run(["scancel", job_id], check=False))


def slow_pipeline(seconds: float, name: str = "slow-demo") -> str:
    """The source of a pipeline file (``build()``): ``input`` → a stage that sleeps ``seconds``
    per batch → ``output``, for runs that must be caught while they work."""
    return textwrap.dedent(f"""
        import time
        from dataclasses import dataclass
        from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

        @dataclass
        class Slow(ProcessingStage):
            name: str = "slow"
            def process(self, task):
                time.sleep({seconds})
                return task

        def build():
            return (Pipeline(name={name!r}).add_stage(JsonlReader(file_paths="input"))
                    .add_stage(Slow()).add_stage(JsonlWriter(path="output")))
    """)


def docs_tool(name: str) -> ModuleType:
    """A module of tools/docs (``snippets``, ``gen_cli_reference``, ...), imported from its
    file under the name ``tools_docs_<name>``."""
    return import_path(REPO_ROOT / "tools" / "docs" / f"{name}.py", f"tools_docs_{name}")


@contextlib.contextmanager
def moto_s3(bucket: str, key: str = "testing", secret: str = "testing"
            ) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A real S3-compatible server (moto's, in a thread on 127.0.0.1) with ``bucket`` made:
    yields ``(s3fs filesystem, storage options)``; skips the test without moto or s3fs."""
    s3fs = pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"key": key, "secret": secret,
                   "client_kwargs": {"endpoint_url": f"http://{host}:{port}",
                                     "region_name": "us-west-2"}}
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir(bucket)
        yield fs, options
    finally:
        server.stop()


def stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group of ``proc`` (started with ``start_new_session=True``),
    SIGKILL it after 10 s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
