"""Default fsspec storage options for object stores: config ``io.storage-options``.

curator_dask's readers and writers (``JsonlReader``, ``ParquetReader``, ``JsonlWriter``,
``ParquetWriter``) and the completion checkpoint each take fsspec storage options
(``read_kwargs={"storage_options": ...}``, ``write_kwargs={"storage_options": ...}``,
``Pipeline.run(checkpoint_storage_options=...)``). One given none, whose path is a remote URL
(``s3://``, ``gs://``, ...), takes config ``curator-dask.io.storage-options`` instead: a reader
or writer when it is made, the checkpoint when the run's options are checked, both on the
driver. The value then travels as a plain dict inside the pickled stage (or the completion
plugin), since remote workers and schedulers do not see the driver's config.
``run --storage-option KEY=VALUE`` sets the key (:func:`set_default_storage_options`).

Options given explicitly, even ``{}``, are used as they are, never merged with the default; a
local path never gets the default. See docs/object-stores.md.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

# At import, not in the functions: the defaults must be in dask.config before a user's
# ``with dask.config.set({"curator-dask.io.storage-options": ...})``, whose exit would otherwise
# remove the whole curator-dask section it created (defaults merged inside it included).
from curator_dask import config
from curator_dask.utils.files import is_remote_url

CONFIG_KEY = "io.storage-options"


def default_storage_options(paths: str | os.PathLike | Iterable[str] | None,
                            given: dict | None) -> dict | None:
    """``given`` unless it is ``None``; else a copy of config ``io.storage-options`` when that
    is set and one of ``paths`` is a remote URL; else ``None``.

    Example:
        >>> import dask.config
        >>> with dask.config.set({"curator-dask.io.storage-options": {"anon": True}}):
        ...     [default_storage_options(p, None) for p in ("s3://bucket/in", "data/in")]
        [{'anon': True}, None]
        >>> default_storage_options("s3://bucket/in", {"profile": "dev"})
        {'profile': 'dev'}
    """
    if given is not None:
        return given
    default = config.get(CONFIG_KEY)
    if not default:
        return None
    if not isinstance(default, Mapping):
        # the value itself is not shown: it may hold a secret
        msg = (f"config curator-dask.{CONFIG_KEY} must be a mapping of fsspec storage options, "
               f"got a {type(default).__name__}; give e.g. "
               "{'client_kwargs': {'endpoint_url': 'http://127.0.0.1:9000'}} (in the "
               "environment variable DASK_CURATOR_DASK__IO__STORAGE_OPTIONS as a Python "
               "literal: True, False, None, not true, false, null)")
        raise TypeError(msg)
    if paths is None:
        return None
    candidates: Iterable[str | os.PathLike] = (
        [paths] if isinstance(paths, str | os.PathLike) else paths
    )
    if not any(is_remote_url(os.fspath(p)) for p in candidates):
        return None
    return copy.deepcopy(dict(default))


def parse_storage_options(items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items (``run --storage-option``) as one nested dict.

    VALUE is read as JSON when it parses (``true``, ``8``, ``null``, ``{"a": 1}``, ``"007"``
    for a string of digits), else kept as the string. Dots in KEY nest:
    ``client_kwargs.endpoint_url=URL`` gives ``{"client_kwargs": {"endpoint_url": URL}}``. A
    KEY given twice keeps its last VALUE. Errors name the KEY only, never a VALUE (it may be a
    secret).

    Example:
        >>> parse_storage_options(["anon=false", "client_kwargs.endpoint_url=http://h:9000",
        ...                        "client_kwargs.region_name=us-east-1", 'key="0123"'])
        {'anon': False, 'client_kwargs': {'endpoint_url': 'http://h:9000', \
'region_name': 'us-east-1'}, 'key': '0123'}
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            shown = f"{key}=..." if sep else key
            msg = (f"--storage-option {shown}: expected KEY=VALUE with a KEY of dot-separated "
                   "names, e.g. --storage-option client_kwargs.endpoint_url=http://127.0.0.1:9000")
            raise ValueError(msg)
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        node = out
        for depth, name in enumerate(path[:-1]):
            node = node.setdefault(name, {})
            if not isinstance(node, dict):
                msg = (f"--storage-option {key}=...: {'.'.join(path[:depth + 1])} is already "
                       "set to a value, not a mapping; give it as one or the other")
                raise ValueError(msg)
        if isinstance(node.get(path[-1]), dict) and not isinstance(value, dict):
            msg = (f"--storage-option {key}=...: {key} already holds nested options "
                   f"({key}.NAME=...); give it as one or the other")
            raise ValueError(msg)
        node[path[-1]] = value
    return out


def merge_storage_options(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` on top, nested mappings merged key by key.

    Example:
        >>> merge_storage_options({"client_kwargs": {"region_name": "eu"}, "anon": True},
        ...                       {"client_kwargs": {"endpoint_url": "http://h"}})
        {'client_kwargs': {'region_name': 'eu', 'endpoint_url': 'http://h'}, 'anon': True}
    """
    out = copy.deepcopy(dict(base))
    for name, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(name), Mapping):
            out[name] = merge_storage_options(out[name], value)
        else:
            out[name] = copy.deepcopy(value)
    return out


def set_default_storage_options(items: Iterable[str]) -> dict[str, Any]:
    """Merge ``KEY=VALUE`` items over config ``io.storage-options`` and set the result for
    this process (the CLI, before the pipeline's stages are made); returns it.

    Example:
        >>> import dask.config
        >>> with dask.config.set({"curator-dask.io.storage-options": {"anon": False}}):
        ...     set_default_storage_options(["profile=dev"])
        {'anon': False, 'profile': 'dev'}
    """
    import dask.config

    merged = merge_storage_options(config.get(CONFIG_KEY) or {}, parse_storage_options(items))
    dask.config.set({f"curator-dask.{CONFIG_KEY}": merged})
    return merged
