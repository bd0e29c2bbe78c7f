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

An import path under ``nemo_curator.`` falls back to ``curator_dask.`` when NeMo Curator is not
installed, so a NeMo Curator pipeline file runs as is.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

from curator_dask.pipeline import Pipeline
from curator_dask.stages.base import ProcessingStage

_TOP_KEYS = {"name", "description", "stages", "config"}


class PipelineDefinitionError(ValueError):
    """The pipeline file or reference is invalid; the message names the field."""


def import_object(path: str, where: str) -> Any:
    """Import ``package.module.Name`` (or ``package.module:Name``)."""
    if not isinstance(path, str) or not path.strip():
        raise PipelineDefinitionError(f"{where}: expected an import path string, got {path!r}")
    module_name, _, attr = path.replace(":", ".").rpartition(".")
    if not module_name:
        raise PipelineDefinitionError(
            f"{where}: {path!r} is not an import path (expected package.module.Name)"
        )
    candidates = [module_name]
    if module_name.startswith("nemo_curator"):
        candidates.append("curator_dask" + module_name[len("nemo_curator"):])
    error: Exception | None = None
    for candidate in candidates:
        try:
            module = importlib.import_module(candidate)
        except ImportError as exc:
            error = error or exc
            continue
        if hasattr(module, attr):
            return getattr(module, attr)
        error = error or AttributeError(f"module {candidate!r} has no attribute {attr!r}")
    raise PipelineDefinitionError(f"{where}: cannot import {path!r}: {error}")


def _build(value: Any, where: str) -> Any:
    if isinstance(value, list):
        return [_build(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if "_target_" not in value:
        return {k: _build(v, f"{where}.{k}") for k, v in value.items()}
    target = import_object(value["_target_"], f"{where}._target_")
    kwargs = {k: _build(v, f"{where}.{k}") for k, v in value.items() if k != "_target_"}
    try:
        return target(**kwargs)
    except (TypeError, ValueError, NotImplementedError, FileExistsError) as exc:
        raise PipelineDefinitionError(f"{where} ({value['_target_']}): {exc}") from None


def pipeline_from_mapping(spec: Any, source: str = "pipeline") -> Pipeline:
    """Build a ``Pipeline`` from a parsed YAML mapping."""
    if not isinstance(spec, dict):
        raise PipelineDefinitionError(
            f"{source}: expected a mapping with a 'stages' list, got {type(spec).__name__}"
        )
    unknown = sorted(set(spec) - _TOP_KEYS)
    if unknown:
        raise PipelineDefinitionError(
            f"{source}: unknown key(s) {unknown}; allowed: {sorted(_TOP_KEYS)}"
        )
    stages = spec.get("stages")
    if not isinstance(stages, list) or not stages:
        raise PipelineDefinitionError(f"{source}: 'stages' must be a non-empty list")
    pipeline = Pipeline(name=str(spec.get("name", "pipeline")),
                        description=spec.get("description"), config=spec.get("config"))
    for i, entry in enumerate(stages):
        where = f"{source}: stages[{i}]"
        if not isinstance(entry, dict) or "_target_" not in entry:
            raise PipelineDefinitionError(
                f"{where}: expected a mapping with '_target_: package.module.StageClass'"
            )
        stage = _build(entry, where)
        if not isinstance(stage, ProcessingStage):
            raise PipelineDefinitionError(
                f"{where}._target_: {entry['_target_']} is not a ProcessingStage"
            )
        pipeline.add_stage(stage)
    return pipeline


def _load_yaml(path: str) -> Pipeline:
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
    return pipeline_from_mapping(spec, path)


def _load_module_from_file(path: str) -> Any:
    """Import ``path`` as a module named after its stem, with its folder on ``sys.path``.

    Like ``python path.py`` does, the folder goes first on ``sys.path``, so worker processes
    (which start with the driver's ``sys.path``) import the same module by name when they
    unpickle its stages. A remote cluster needs the file importable there too.
    """
    folder = os.path.dirname(os.path.abspath(path))
    name = os.path.splitext(os.path.basename(path))[0]
    if not name.isidentifier():
        raise PipelineDefinitionError(
            f"{path}: the file name must be a valid Python module name to be importable by "
            "workers (letters, digits, underscores)"
        )
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PipelineDefinitionError(f"{path}: cannot load as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_pipeline(reference: str) -> Pipeline:
    """A ``Pipeline`` from ``pipeline.yaml``, ``file.py:function`` or ``module:function``."""
    if reference.endswith((".yaml", ".yml")):
        return _load_yaml(reference)
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
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise PipelineDefinitionError(f"{reference}: cannot import {target!r}: {exc}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise PipelineDefinitionError(f"{reference}: {target} has no function {func_name!r}")
    pipeline = func()
    if not isinstance(pipeline, Pipeline):
        raise PipelineDefinitionError(
            f"{reference}: {func_name}() returned {type(pipeline).__name__}, not a Pipeline"
        )
    return pipeline
