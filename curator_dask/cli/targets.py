"""What a YAML pipeline file's folder means for its ``_target_``s (``cli/loader.py`` builds them).

Two rules, both relative to the folder that holds the file:

- :class:`TargetRule`: the classes a nested ``_target_`` (a filter given to ``ScoreFilter``)
  may name: classes of the stage libraries, of modules in the file's folder (which the loader
  puts first on ``sys.path``), or of modules the user allowed.
- :func:`resolve_path_arguments`: the path arguments of the stage libraries' readers, writers
  and ``FilePartitioningStage`` (:data:`PATH_ARGUMENTS`); a relative one is taken from the
  file's folder, so a pipeline file runs the same from any directory. URLs, absolute paths
  and ``~`` paths are kept as written, and so is every other argument.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from curator_dask.classes import NEMO_PACKAGE
from curator_dask.errors import CuratorDaskError

LIBRARIES = ("curator_dask", NEMO_PACKAGE)
ALLOW_OPTION = "--allow-target-module"
ALLOW_KEY = "pipeline-files.allowed-modules"

# Class name (of curator_dask or nemo_curator, anywhere in a target's MRO, so a subclass
# counts) -> its argument that names files. The readers are composites of both models whose
# `file_paths` go to FilePartitioningStage; NeMo's Lance stages take a dataset `path`.
PATH_ARGUMENTS = {
    "FilePartitioningStage": "file_paths",
    "BaseReader": "file_paths",  # curator_dask's JsonlReader and ParquetReader
    "JsonlReader": "file_paths",
    "ParquetReader": "file_paths",
    "BaseWriter": "path",  # JsonlWriter, ParquetWriter, NeMo's MegatronTokenizerWriter
    "LanceReader": "path",
    "LancePartitioningStage": "path",
    "LanceWriter": "path",
}


class PipelineDefinitionError(ValueError, CuratorDaskError):
    """The pipeline file or reference is invalid; the message names the field."""


@dataclass(frozen=True)
class TargetRule:
    """Where the classes of nested ``_target_``s may come from besides the stage libraries:
    ``modules`` (dotted names: ``pkg`` covers ``pkg.sub`` and ``pkg.Class``, not ``pkgx``) and
    the modules whose file lies in ``folder`` (not installed or standard-library ones).

    Example:
        >>> import fractions, subprocess
        >>> rule = TargetRule.resolve(["fractions"])
        >>> rule.refusal(fractions.Fraction, "fractions.Fraction") is None
        True
        >>> rule.refusal(subprocess.Popen, "subprocess.Popen")
        ("module 'subprocess' is not allowed", 'subprocess')
    """

    modules: tuple[str, ...] = ()
    folder: str | None = None

    @classmethod
    def resolve(cls, allowed: Iterable[str] = (), folder: str | None = None) -> TargetRule:
        """Config ``pipeline-files.allowed-modules`` plus ``allowed`` (the command line's)."""
        from curator_dask import config

        configured = config.get(ALLOW_KEY) or []
        if not isinstance(configured, (list, tuple)):  # a string from an environment variable
            configured = [configured]
        given = [*((f"config {ALLOW_KEY}", n) for n in configured),
                 *((ALLOW_OPTION, n) for n in allowed)]
        for source, name in given:
            if not isinstance(name, str) or not all(p.isidentifier() for p in name.split(".")):
                msg = (f"{source} {name!r}: expected dotted module names such as mypackage or "
                       "mypackage.filters (each allows that module and the modules under it)")
                raise PipelineDefinitionError(msg)
        return cls(tuple(name for _, name in given), folder)

    def _allows(self, dotted: str, module: str) -> bool:
        names = [(module, p) for p in LIBRARIES] + [(dotted, p) for p in self.modules]
        return any(n == p or n.startswith(f"{p}.") for n, p in names) or (
            self.folder is not None and _in_folder(module, self.folder))

    def refusal(self, target: type, path: str) -> tuple[str, str] | None:
        """Why the class ``target``, imported as ``path``, may not be called, and the module
        to allow (``None``: it may be). Its import path and its ``__module__`` must both be
        allowed: ``curator_dask.x.Popen``, a re-export of ``subprocess.Popen``, is refused."""
        path = path.replace(":", ".")
        module, defined = path.rpartition(".")[0], f"{target.__module__}.{target.__qualname__}"
        if not self._allows(path, module):
            return f"module {module!r} is not allowed", module
        if self._allows(defined, target.__module__):
            return None
        return (f"module {target.__module__!r} is not allowed" if defined == path else
                f"it is {defined}, of module {target.__module__!r}, which is not allowed",
                target.__module__)

    def check(self, where: str, target: type, path: str) -> None:
        """Refuse a class that may not be called: one line, the target, why, the option."""
        refused = self.refusal(target, path)
        if refused is not None:
            folder = f" ({self.folder})" if self.folder else ""
            msg = (f"{where}._target_: {path} is refused: {refused[0]}; a nested _target_ must "
                   f"be a class of curator_dask, nemo_curator, a module in the pipeline file's "
                   f"folder{folder} or a module allowed with {ALLOW_OPTION} {refused[1]} (or "
                   f"config {ALLOW_KEY}); allow only modules you trust, a pipeline file is code")
            raise PipelineDefinitionError(msg)


def _in_folder(module: str, folder: str) -> bool:
    """Whether the imported ``module``'s file lies under ``folder``, not installed or stdlib."""
    file = getattr(sys.modules.get(module), "__file__", None)
    real = os.path.realpath(file) if file else ""
    system = tuple(os.path.join(os.path.realpath(sysconfig.get_paths()[k]), "")
                   for k in ("stdlib", "platstdlib"))
    return (real.startswith(os.path.join(os.path.realpath(folder), ""))
            and not real.startswith(system) and "site-packages" not in real
            and "dist-packages" not in real)


def path_arguments(target: type) -> set[str]:
    """The arguments of the class ``target`` that :data:`PATH_ARGUMENTS` names as paths.

    Example:
        >>> from curator_dask.stages.text.io.writer import JsonlWriter
        >>> path_arguments(JsonlWriter), path_arguments(dict)
        ({'path'}, set())
    """
    return {PATH_ARGUMENTS[cls.__name__] for cls in getattr(target, "__mro__", ())
            if cls.__name__ in PATH_ARGUMENTS and cls.__module__.partition(".")[0] in LIBRARIES}


def resolve_path_arguments(target: type, kwargs: dict[str, Any], folder: str) -> dict[str, Any]:
    """``kwargs`` with each path argument of ``target`` (a string or a list of strings) taken
    from ``folder`` when it is relative; URLs (``s3://...``), absolute and ``~`` paths, and
    every other argument, are kept as written.

    Example:
        >>> from curator_dask.stages.text.io.reader import JsonlReader
        >>> resolve_path_arguments(JsonlReader, {"file_paths": ["./in", "s3://b/x", "/abs"],
        ...                                      "fields": ["text"]}, "/data/run")
        {'file_paths': ['/data/run/in', 's3://b/x', '/abs'], 'fields': ['text']}
    """
    out = dict(kwargs)
    for name in path_arguments(target) & out.keys():
        value = out[name]
        if isinstance(value, str):
            out[name] = _from_folder(value, folder)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[name] = [_from_folder(v, folder) for v in value]
    return out


def _from_folder(path: str, folder: str) -> str:
    if not path or "://" in path or path.startswith("~") or os.path.isabs(path):
        return path
    joined = os.path.normpath(os.path.join(folder, path))
    # "dir/" and "dir" may differ to a reader (a folder named like a file): keep the slash
    return joined + os.sep if path.endswith(("/", os.sep)) and joined != os.sep else joined
