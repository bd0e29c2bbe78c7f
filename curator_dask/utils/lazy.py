"""A package's public names imported on first use (PEP 562 ``__getattr__`` / ``__dir__``).

Each package that keeps its import cheap (``curator_dask``, ``curator_dask.dedup``,
``curator_dask.jobs``, ...) names its exports once, ``{name: module}``, and takes both module
functions from :func:`lazy_exports`; a name is imported the first time it is asked for and then
kept in the package's namespace.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose names ``exports`` maps to modules.

    Example:
        >>> getattr_, dir_ = lazy_exports("json", {"dumps": "json"})
        >>> getattr_("dumps")({"a": 1}), "dumps" in dir_()
        ('{"a": 1}', True)
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
