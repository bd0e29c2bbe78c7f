"""Load a ``Pipeline`` from a YAML file or from ``file.py:function`` / ``module:function``.

YAML (NeMo Curator / Hydra style: ``_target_`` is an import path, other keys are arguments;
nested mappings with a ``_target_`` are built too)::

    name: demo
    stages:
      - _target_: curator_dask.stages.text.io.reader.JsonlReader
        file_paths: ./input
        fields: [text]
      - _target_: curator_dask.stages.text.io.writer.JsonlWriter
        path: ./output

An import path under ``nemo_curator.`` names NeMo Curator's own class when NeMo Curator is
installed (its stages run on the same engine, see docs/design/architecture.md "Two models, one
engine"; NeMo is imported only then); when it is not, it falls back to the class curator_dask
mirrors under ``curator_dask.``, so a NeMo Curator pipeline file runs as is. Either way the
result is a curator_dask ``Pipeline`` (jobs, strict resume, stage checkpoints).

Only classes are called: a ``_target_`` that is a function (``os.system``) is refused before
anything is called, and a stage's ``_target_`` must be a ``ProcessingStage`` class of either
model (from any module: a stage class is code its author wrote). Any other nested ``_target_``
(a filter given to ``ScoreFilter``) must be a class that :class:`TargetRule` allows: of the
stage libraries, of the pipeline file's folder, or of a module the user allowed.

A YAML file loads the same from any directory: its folder goes first on ``sys.path`` (as a
``file.py``'s does) and the relative path arguments of the stage libraries' readers and writers
are taken from that folder (``cli/targets.py``, ``PATH_ARGUMENTS``).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from collections.abc import Iterable
from typing import Any

from curator_dask.classes import NEMO_PACKAGE, is_nemo
from curator_dask.cli.recipe import (
    SECTIONS,
    RecipeOptions,
    check_checkpoints,
    partition_target,
    recipe_options,
)
from curator_dask.cli.targets import PipelineDefinitionError, TargetRule, resolve_path_arguments
from curator_dask.pipeline import Pipeline
from curator_dask.stages.model import is_stage_class

_TOP_KEYS = {"name", "description", "stages", "config", *SECTIONS}


def nemo_installed() -> bool:
    """Whether NeMo Curator can be imported here (looked up, not imported)."""
    try:
        return importlib.util.find_spec(NEMO_PACKAGE) is not None
    except (ImportError, ValueError):  # a broken or blocked installation
        return False


def import_object(path: str, where: str) -> Any:
    """Import ``package.module.Name`` (or ``package.module:Name``).

    ``nemo_curator.…`` imports NeMo Curator's object when NeMo Curator is installed, else the
    object curator_dask mirrors under ``curator_dask.…``.

    Example:
        >>> import_object("curator_dask.stages.text.io.writer.JsonlWriter", "doc").__name__
        'JsonlWriter'
        >>> import_object("nemo_curator.stages.text.io.writer.JsonlWriter", "doc").__name__
        'JsonlWriter'
    """
    if not isinstance(path, str) or not path.strip():
        raise PipelineDefinitionError(f"{where}: expected an import path string, got {path!r}")
    module_name, _, attr = path.replace(":", ".").rpartition(".")
    if not module_name:
        raise PipelineDefinitionError(
            f"{where}: {path!r} is not an import path (expected package.module.Name)"
        )
    mirror = None
    if module_name.partition(".")[0] == NEMO_PACKAGE and not nemo_installed():
        mirror = "curator_dask" + module_name[len(NEMO_PACKAGE):]
    try:
        module = importlib.import_module(mirror or module_name)
    except ImportError as exc:
        error = str(exc)
    else:
        if hasattr(module, attr):
            return getattr(module, attr)
        error = f"module {mirror or module_name!r} has no attribute {attr!r}"
        close = difflib.get_close_matches(attr, [n for n in dir(module)
                                                 if not n.startswith("_")], n=1)
        if close:
            error += f"; did you mean {module_name}.{close[0]}?"
    if mirror:
        msg = (f"{where}: cannot import {path!r}: NeMo Curator is not installed (pip install "
               f"'curator_dask[nemo]') and curator_dask has no {mirror}.{attr} to use instead")
        raise PipelineDefinitionError(msg)
    raise PipelineDefinitionError(f"{where}: cannot import {path!r}: {error}")


def _build(value: Any, where: str, rule: TargetRule, base: str | None,
           stage: bool = False) -> Any:
    if isinstance(value, list):
        return [_build(v, f"{where}[{i}]", rule, base) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if "_target_" not in value:
        return {k: _build(v, f"{where}.{k}", rule, base) for k, v in value.items()}
    name = value["_target_"]
    target = import_object(name, f"{where}._target_")
    # Checked before anything is called: a pipeline file names classes, never functions.
    if stage and not is_stage_class(target):
        raise PipelineDefinitionError(f"{where}._target_: {name} is not a ProcessingStage class")
    if not isinstance(target, type):
        raise PipelineDefinitionError(
            f"{where}._target_: {name} is not a class (a _target_ must name a class)")
    if not is_stage_class(target):  # stage code may come from anywhere, a Popen may not
        rule.check(where, target, name)
    kwargs = {k: _build(v, f"{where}.{k}", rule, base)
              for k, v in value.items() if k != "_target_"}
    if base is not None:
        kwargs = resolve_path_arguments(target, kwargs, base)
    try:
        return target(**kwargs)
    except (TypeError, ValueError, NotImplementedError, FileExistsError) as exc:
        raise PipelineDefinitionError(f"{where} ({name}): {exc}{_closest_parameter(target, exc)}"
                                      ) from None


def _closest_parameter(target: type, error: Exception) -> str:
    """``; did you mean 'file_paths'?`` for a misspelled keyword argument of ``target``.

    Example:
        >>> from curator_dask import JsonlReader
        >>> _closest_parameter(JsonlReader, TypeError(
        ...     "JsonlReader.__init__() got an unexpected keyword argument 'file_path'"))
        "; did you mean 'file_paths'?"
    """
    found = re.search(r"unexpected keyword argument '(\w+)'", str(error))
    if not isinstance(error, TypeError) or found is None:
        return ""
    try:
        names = [p for p in inspect.signature(target).parameters if p not in ("self",)]
    except (TypeError, ValueError):
        return ""
    close = difflib.get_close_matches(found.group(1), names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def pipeline_from_mapping(spec: Any, source: str = "pipeline", rule: TargetRule | None = None,
                          base: str | None = None) -> Pipeline:
    """Build a curator_dask ``Pipeline`` from a parsed YAML mapping (stages of either model);
    ``rule`` says where nested targets may come from (default: ``TargetRule.resolve()``),
    ``base`` the folder that relative path arguments are taken from (``None``: as written;
    :func:`~curator_dask.cli.targets.resolve_path_arguments`). A recipe's ``partition:``
    reaches the source reader; its run options are :func:`recipe_from_mapping`'s.

    Example:
        >>> spec = {"name": "p", "stages": [
        ...     {"_target_": "curator_dask.stages.text.io.reader.JsonlReader", "file_paths": "in"},
        ...     {"_target_": "os.system", "command": "echo never"}]}
        >>> try:
        ...     pipeline_from_mapping(spec, "p.yaml")
        ... except PipelineDefinitionError as exc:
        ...     print(exc)
        p.yaml: stages[1]._target_: os.system is not a ProcessingStage class
    """
    return recipe_from_mapping(spec, source, rule, base)[0]


def recipe_from_mapping(spec: Any, source: str = "pipeline", rule: TargetRule | None = None,
                        base: str | None = None) -> tuple[Pipeline, RecipeOptions]:
    """As :func:`pipeline_from_mapping`, plus the run options of the file's Data-Juicer
    recipe sections (``partition:``, ``checkpoint:``, ``intermediate_storage:``,
    ``executor_type:``; :mod:`curator_dask.cli.recipe`), all checked before anything runs."""
    if not isinstance(spec, dict):
        raise PipelineDefinitionError(
            f"{source}: expected a mapping with a 'stages' list, got {type(spec).__name__}"
        )
    unknown = sorted(set(spec) - _TOP_KEYS, key=str)
    if unknown:
        raise PipelineDefinitionError(
            f"{source}: unknown key(s) {unknown}; allowed: {sorted(_TOP_KEYS)}"
        )
    stages = spec.get("stages")
    rule = TargetRule.resolve() if rule is None else rule
    if not isinstance(stages, list) or not stages:
        raise PipelineDefinitionError(f"{source}: 'stages' must be a non-empty list")
    options = recipe_options(spec, source)
    built = []
    for i, entry in enumerate(stages):
        where = f"{source}: stages[{i}]"
        if not isinstance(entry, dict) or "_target_" not in entry:
            raise PipelineDefinitionError(
                f"{where}: expected a mapping with '_target_: package.module.StageClass'"
            )
        built.append(_build(entry, where, rule, base, stage=True))
    if options.partition is not None:
        # Which entry holds the source is known once the stages are built; that one is made
        # again with partition=, so the reader's own checks see it as if written there.
        i = partition_target(built, source)
        if "partition" in stages[i]:
            raise PipelineDefinitionError(
                f"{source}: stages[{i}].partition and the partition: section both set the "
                "source's partitions; keep one of them")
        built[i] = _build({**stages[i], "partition": options.partition},
                          f"{source}: stages[{i}] (with the partition: section)", rule, base,
                          stage=True)
    pipeline = Pipeline(name=str(spec.get("name", "pipeline")),
                        description=spec.get("description"), config=spec.get("config"),
                        stages=built)
    if options.stage_checkpoints:
        roles = Pipeline(stages=list(built))  # the run's own build, for the stages' names
        roles.build()
        check_checkpoints(options, roles.stages, source)
    return pipeline, options


def _load_yaml(path: str, allowed: Iterable[str]) -> tuple[Pipeline, RecipeOptions]:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            spec = yaml.safe_load(f)
    except OSError as exc:
        raise PipelineDefinitionError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PipelineDefinitionError(f"{path}: invalid YAML{at}: {problem}") from None
    # As for file.py:build: the file's folder first on sys.path (`_target_: stages.X` beside
    # the file imports from any directory), and the modules built from it shipped by value.
    folder = _first_on_path(path)
    before = set(sys.modules)
    loaded = recipe_from_mapping(spec, path, TargetRule.resolve(allowed, folder), folder)
    ship_by_value(list(set(sys.modules) - before), folder)
    return loaded


def _first_on_path(path: str) -> str:
    """Put the folder of the file ``path`` first on ``sys.path``, as ``python path.py`` does
    (unless it is on it already), and return it."""
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return folder


def _load_module_from_file(path: str) -> Any:
    """Import ``path`` as a module named after its stem, with its folder on ``sys.path``.

    Like ``python path.py`` does, the folder goes first on ``sys.path``. Workers of another
    machine (``--address``, SLURM worker jobs) usually cannot import the file, so its module,
    and the modules it imported from its folder, are registered with
    ``cloudpickle.register_pickle_by_value``: their stages travel to the workers by value
    (docs/design/architecture.md "The worker plugin: StageHost").
    """
    name = os.path.splitext(os.path.basename(path))[0]
    if not name.isidentifier():
        raise PipelineDefinitionError(
            f"{path}: the file name must be a valid Python module name to be importable by "
            "workers (letters, digits, underscores)"
        )
    folder = _first_on_path(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PipelineDefinitionError(f"{path}: cannot load as a Python file")
    module = importlib.util.module_from_spec(spec)
    before = set(sys.modules)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 (any error while importing is a definition error)
        sys.modules.pop(name, None)
        raise definition_error(exc, path, "importing the pipeline file") from None
    ship_by_value([name, *(set(sys.modules) - before)], folder)
    return module


def _where(exc: BaseException, path: str | None) -> str:
    """``file, line N`` of the innermost traceback frame in ``path`` (else in any file
    outside Python's import machinery); ``exc``'s own location for a ``SyntaxError``."""
    if isinstance(exc, SyntaxError):
        same = path and exc.filename and os.path.realpath(exc.filename) == os.path.realpath(path)
        return f"{path if same else exc.filename or path}, line {exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<frozen ")]
    own = [f for f in frames if path and os.path.realpath(f.filename) == os.path.realpath(path)]
    if not own and not frames:
        return path or "?"
    frame = (own or frames)[-1]
    where = f"{frame.filename if not own else path}, line {frame.lineno}"
    if own and frames[-1] is not own[-1]:  # raised further in, e.g. in a module it imports
        where += f" (raised in {frames[-1].filename}, line {frames[-1].lineno})"
    return where


def definition_error(exc: BaseException, path: str | None, doing: str
                     ) -> PipelineDefinitionError:
    """A one-line :class:`PipelineDefinitionError` for an exception raised while importing a
    pipeline file or module or calling its function: the file and line, then the error.

    Example:
        >>> try:
        ...     compile("def build(:\\n", "p.py", "exec")
        ... except SyntaxError as exc:
        ...     print(definition_error(exc, "p.py", "importing it"))
        p.py, line 1: SyntaxError: invalid syntax: def build(: (while importing it)
    """
    if isinstance(exc, SyntaxError):
        text = (exc.text or "").strip()
        detail = f"{type(exc).__name__}: {exc.msg}" + (f": {text}" if text else "")
    else:
        first = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {first[0]}" if first else type(exc).__name__
    return PipelineDefinitionError(f"{_where(exc, path)}: {detail} (while {doing})")


def ship_by_value(names: list[str], folder: str) -> list[str]:
    """Register the modules ``names`` whose file lies under ``folder`` with
    ``cloudpickle.register_pickle_by_value``; returns the names registered.

    Meant for the modules a pipeline file imported for the first time: modules imported
    before (curator_dask itself, even when ``folder`` is its checkout) and installed packages
    keep travelling by reference.

    Example:
        >>> import tempfile
        >>> ship_by_value(["os", "curator_dask"], tempfile.gettempdir())
        []
    """
    import cloudpickle

    root = os.path.join(os.path.realpath(folder), "")
    shipped = []
    for name in sorted(names):
        file = getattr(sys.modules.get(name), "__file__", None)
        if not file or not os.path.realpath(file).startswith(root):
            continue
        installed = "site-packages" in file or "dist-packages" in file
        if installed or name.partition(".")[0] in ("curator_dask", NEMO_PACKAGE):
            continue
        cloudpickle.register_pickle_by_value(sys.modules[name])
        shipped.append(name)
    return shipped


def _import_module(reference: str, target: str) -> Any:
    """Import the module ``target`` of ``module:function``; any error is a definition error."""
    try:
        return importlib.import_module(target)
    except ImportError as exc:
        raise PipelineDefinitionError(f"{reference}: cannot import {target!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 (a syntax error or an error raised while importing)
        raise definition_error(exc, None, f"importing {target!r}") from None


def load_pipeline(reference: str, allowed_modules: Iterable[str] = ()) -> Pipeline:
    """A ``Pipeline`` from ``pipeline.yaml``, ``file.py:function`` or ``module:function``; a
    YAML file's nested targets may also be classes of ``allowed_modules`` (:class:`TargetRule`)."""
    return load_recipe(reference, allowed_modules)[0]


def load_recipe(reference: str, allowed_modules: Iterable[str] = ()
                ) -> tuple[Pipeline, RecipeOptions]:
    """As :func:`load_pipeline`, plus the run options of a YAML file's recipe sections
    (:class:`~curator_dask.cli.recipe.RecipeOptions`; none for a Python reference)."""
    if reference.endswith((".yaml", ".yml")):
        return _load_yaml(reference, allowed_modules)
    return _load_function(reference), RecipeOptions()


def _load_function(reference: str) -> Pipeline:
    """The ``Pipeline`` that ``file.py:function`` or ``module:function`` returns."""
    target, sep, func_name = reference.rpartition(":")
    if not sep or not target or not func_name:
        raise PipelineDefinitionError(
            f"{reference!r}: expected a .yaml file or file.py:function / module:function"
        )
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise PipelineDefinitionError(f"{target}: no such file")
        module = _load_module_from_file(target)
    else:
        module = _import_module(reference, target)
    func = getattr(module, func_name, None)
    if not callable(func):
        raise PipelineDefinitionError(f"{reference}: {target} has no function {func_name!r}")
    try:
        pipeline = func()
    except PipelineDefinitionError:
        raise
    except Exception as exc:  # noqa: BLE001 (the function could not build the pipeline)
        file = target if target.endswith(".py") else getattr(module, "__file__", None)
        raise definition_error(exc, file, f"calling {func_name}()") from None
    if is_nemo(pipeline) and type(pipeline).__name__ == "Pipeline":
        # NeMo Curator's own Pipeline: its stages, run by ours on the same executor
        return Pipeline(name=pipeline.name, description=pipeline.description,
                        stages=list(pipeline.stages), config=dict(pipeline.config or {}))
    if not isinstance(pipeline, Pipeline):
        raise PipelineDefinitionError(
            f"{reference}: {func_name}() returned {type(pipeline).__name__}, not a Pipeline"
        )
    return pipeline
