"""Configuration defaults under the ``curator-dask`` key of ``dask.config``.

The defaults live in ``curator_dask.yaml`` beside this module and are merged with
``dask.config.update_defaults`` (never written to the user's home). Every key can be set in a
Dask config file, with ``dask.config.set``, or through an environment variable such as
``DASK_CURATOR_DASK__EXECUTION__FUSE=false``.

Resolve values on the client and pass plain values to workers: remote workers do not see the
client's config.
"""

from __future__ import annotations

import os
from typing import Any

import dask.config
import yaml

_FN = os.path.join(os.path.dirname(__file__), "curator_dask.yaml")

with open(_FN, encoding="utf-8") as _f:
    DEFAULTS: dict[str, Any] = yaml.safe_load(_f)

dask.config.update_defaults(DEFAULTS)


def get(key: str, override: Any = None) -> Any:
    """Return ``override`` unless it is ``None``, else ``curator-dask.<key>`` from dask.config.

    Example:
        >>> get("execution.fuse")
        True
    """
    if override is not None:
        return override
    return dask.config.get(f"curator-dask.{key}")


def section(key: str) -> dict[str, Any]:
    """``curator-dask.<key>`` as keyword arguments: dashed config keys become underscores.

    Example:
        >>> section("stage-checkpoints")["strategy"]
        'disabled'
    """
    return {k.replace("-", "_"): v for k, v in dask.config.get(f"curator-dask.{key}").items()}
