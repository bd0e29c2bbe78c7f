"""One base for the package's errors (issue 23, item 6): every exception class that curator_dask
defines derives from ``CuratorDaskError`` and keeps its built-in base, ``curator_dask.errors``
documents each (module, built-in base, when it is raised), each survives pickling (errors
cross from the workers to the driver), and one ``except CuratorDaskError`` catches the errors
of real runs. The classes are found by walking the package, so a new one that forgets the base
or the table fails here."""

from __future__ import annotations

import builtins
import importlib
import inspect
import pickle
import pkgutil
import re
from dataclasses import dataclass

import pytest

import curator_dask
from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage
from curator_dask.errors import CuratorDaskError, PartialRunWarning, StageError
from curator_dask.sample_data import generate_jsonl
from curator_dask.utils.files import NoInputFilesError
from tests.docs.test_docs_build import site  # noqa: F401 (the built docs site, a fixture)
from tests.helpers import docs_tool

_ROW = re.compile(r"^\| `(\w+)` \| `([\w.]+)` \| `([\w.]+)` \| (.+) \|$")


def package_classes() -> dict[str, type[BaseException]]:
    """Every ``BaseException`` subclass defined in a module of curator_dask, by name (each
    module imported; the package defines no two with one name)."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(curator_dask.__path__, "curator_dask."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (issubclass(obj, BaseException) and obj.__module__ == info.name
                    and obj is not CuratorDaskError):
                assert obj.__name__ not in found, (obj, found[obj.__name__])
                found[obj.__name__] = obj
    return found


def package_errors() -> dict[str, type[BaseException]]:
    """The exception classes: the walk less warnings, which the docs keep outside on purpose."""
    return {n: c for n, c in package_classes().items() if not issubclass(c, Warning)}


def documented() -> dict[str, tuple[str, str]]:
    """``curator_dask.errors``' table: name -> (module, built-in base)."""
    rows = [_ROW.match(line) for line in (curator_dask.errors.__doc__ or "").splitlines()]
    return {m.group(1): (m.group(2), m.group(3)) for m in rows if m}


def _builtin(name: str) -> type:
    if name == "lmdb.Error":
        import lmdb

        return lmdb.Error
    return getattr(builtins, name)


def test_the_walk_finds_every_exception_class_of_the_package():
    classes = package_classes()
    # the issue counted 20 in 14 modules; the package has more (CLI, jobs, SLURM, dedup, ...)
    assert len(package_errors()) >= 30, sorted(package_errors())
    for name in ("StageError", "UsageError", "CheckpointUnusable", "ReaderCrashedError",
                 "UnknownBatchError", "RequestRefused", "JobNotFoundError"):
        assert name in classes, name
    assert {n for n, c in classes.items() if issubclass(c, Warning)} == {"PartialRunWarning"}


def test_every_error_derives_from_the_base_and_keeps_its_builtin_base():
    table = documented()
    wrong = []
    for name, cls in package_errors().items():
        module, base = table.get(name, (None, None))
        if base is None or not issubclass(cls, CuratorDaskError) or not issubclass(
                cls, _builtin(base)):
            wrong.append(name)
            continue
        # the documented base is the nearest class of the MRO from outside the package
        outside = next(c for c in cls.__mro__ if not c.__module__.startswith("curator_dask"))
        assert outside is _builtin(base), (name, outside, base)
        assert cls.__module__ == module, (name, cls.__module__, module)
    assert not wrong, f"not a CuratorDaskError of its documented built-in base: {wrong}"
    assert CuratorDaskError.__bases__ == (Exception,)


def test_one_base_order_everywhere_the_builtin_first():
    for name, cls in package_errors().items():
        if CuratorDaskError in cls.__bases__:
            assert cls.__bases__[-1] is CuratorDaskError, (name, cls.__bases__)
        else:  # a subclass of another error of the package
            assert any(issubclass(b, CuratorDaskError) for b in cls.__bases__), name


def test_the_errors_docstring_lists_exactly_the_package_errors():
    assert set(documented()) == set(package_errors())
    doc = curator_dask.errors.__doc__ or ""
    assert "PartialRunWarning" in doc.split("Not in the family", 1)[1]


def _sample(cls: type[BaseException]) -> BaseException:
    """An instance as the package raises it: the classes with their own ``__init__`` get its
    arguments, the others one message."""
    name = cls.__name__
    if issubclass(cls, StageError):
        return cls("picky", ["0_ab"], "ValueError: bad", "Traceback ...\n",
                   source_files=["/in/part-2.jsonl"])
    if name in ("WorkerFailedError", "WorkerMemoryError"):
        return cls("died 4 times", stages=["hog"], source_files=["/in/big.jsonl"],
                   task_ids=["0_ab"], memory_limit=600_000_000, workers=["tcp://w:1"])
    if name == "JobNotFoundError":
        return cls("j-20260101", "/work", "/index/jobs.jsonl")
    if name == "AmbiguousJobError":
        return cls("j-20260101", ["/a/j-20260101", "/b/j-20260101"])
    return cls(f"{name}: what went wrong and what to do")


@pytest.mark.parametrize("name", sorted(package_errors()))
def test_each_error_survives_pickling(name):
    error = _sample(package_errors()[name])
    again = pickle.loads(pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL))
    assert type(again) is type(error) and isinstance(again, CuratorDaskError)
    assert str(again) == str(error) and again.args == error.args
    assert vars(again) == vars(error)


def test_the_warning_stays_outside_the_family():
    assert issubclass(PartialRunWarning, RuntimeWarning)
    assert not issubclass(PartialRunWarning, CuratorDaskError)


def test_the_base_is_exported_and_in_the_api_reference(site):  # noqa: F811 (the fixture)
    assert "CuratorDaskError" in curator_dask.__all__
    assert curator_dask.CuratorDaskError is CuratorDaskError
    assert "::: curator_dask.errors" in docs_tool("gen_api_reference").render()
    html = (site / "api-reference.html").read_text(encoding="utf-8")
    errors = html.split('id="errors"', 1)[1]
    for name, (module, _base) in documented().items():
        assert re.search(rf"<td><code>{name}</code></td>\s*<td><code>{re.escape(module)}<",
                         errors), name


@dataclass
class Refuses(ProcessingStage):
    """Raises on every task (reaches the workers by reference: ``tests.test_errors_base``)."""

    name: str = "refuses"

    def process(self, task):
        raise ValueError("this stage refuses every task")


def caught_by_the_base(pipeline, executor) -> BaseException | None:
    """What one ``except CuratorDaskError`` around a real run catches (``None``: nothing)."""
    try:
        pipeline.run(executor=executor)
    except CuratorDaskError as exc:
        return exc
    return None


def test_one_except_catches_a_missing_input_of_a_real_run(tmp_path, executor):
    pipeline = (Pipeline(name="missing").add_stage(JsonlReader(file_paths=str(tmp_path / "no")))
                .add_stage(JsonlWriter(path=str(tmp_path / "out"))))
    caught = caught_by_the_base(pipeline, executor)
    assert type(caught) is NoInputFilesError and isinstance(caught, FileNotFoundError)


def test_one_except_catches_a_stage_error_raised_on_a_worker(tmp_path, executor):
    generate_jsonl(str(tmp_path / "in"), files=2, docs_per_file=3, seed=3)
    pipeline = (Pipeline(name="refused").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
                .add_stage(Refuses()).add_stage(JsonlWriter(path=str(tmp_path / "out"))))
    caught = caught_by_the_base(pipeline, executor)
    assert type(caught) is StageError and isinstance(caught, RuntimeError)
    assert caught.stage_name == "refuses" and "refuses every task" in caught.error
