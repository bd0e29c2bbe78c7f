"""Which model a class belongs to, by name: NeMo Curator's or curator_dask's own.

The engine is duck-typed over both models (docs/design/architecture.md, "Two models, one
engine"): it recognises sentinels, file groups and NeMo objects by class name and module, never
by importing NeMo Curator. *Pure*: imports nothing but :mod:`curator_dask.lineage`, so every
layer may ask (the stores, the fingerprints, the stages, the engine, the command line).
"""

from __future__ import annotations

from curator_dask.lineage import class_names

__all__ = ["NEMO_PACKAGE", "class_named", "is_nemo"]

NEMO_PACKAGE = "nemo_curator"


def is_nemo(obj: object) -> bool:
    """Whether ``obj`` is (or its class derives from) a NeMo Curator class; imports nothing.

    Example:
        >>> is_nemo(object()), is_nemo(3)
        (False, False)
    """
    cls = obj if isinstance(obj, type) else type(obj)
    return any(c.__module__.partition(".")[0] == NEMO_PACKAGE for c in cls.__mro__)


def class_named(obj: object, *names: str) -> bool:
    """Whether ``obj``'s class or a base is called one of ``names`` (either model's class).

    Example:
        >>> class FileGroupTask: pass
        >>> class Mine(FileGroupTask): pass
        >>> class_named(Mine(), "FileGroupTask")
        True
    """
    cls: type = type(obj)  # `type`: mypy takes type[object] for unhashable (mypy#20409)
    return not class_names(cls).isdisjoint(names)
