"""Fingerprints of a pipeline's configuration and inputs, for strict resume.

Data-Juicer compares raw YAML text (a comment fails it, a code change passes it). Here the
fingerprint is built from the *built* stages: each stage's class, name, roles, resources,
batch size and parameters, normalized to JSON, including the parameters of the objects a stage
holds (a filter in ``ScoreFilter``, a modifier in ``Modify``); the rule is
:func:`stage_fingerprint`'s. A resume compares field by field and names what changed. Inputs
are fingerprinted by path, size and modification time (or ETag), optionally by a full content
hash. Pure: no Dask, no LMDB, and no import of the libraries whose objects it describes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import json
import math
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fsspec

from curator_dask.classes import class_named
from curator_dask.utils.redact import is_secret_name, redact, redact_secret

_MAX_DEPTH = 6
# Inside a held object, a container with more items than this is fingerprinted by its length
# and a digest, so a stop-word list does not fill config_fingerprint.json (a change still shows).
_MAX_ITEMS = 256
# Objects of these packages are run-time state (threads, locks, loggers, files, sockets, file
# systems, clients, clusters, models, tensors, frames), not configuration: their class only.
_RUNTIME_PACKAGES = frozenset({
    "_io", "io", "_thread", "threading", "logging", "socket", "_socket", "ssl", "_ssl",
    "subprocess", "multiprocessing", "concurrent", "asyncio", "_asyncio", "queue", "_queue",
    "selectors", "sqlite3", "weakref", "tempfile", "mmap",
    "fsspec", "s3fs", "gcsfs", "adlfs", "botocore", "boto3", "aiobotocore", "aiohttp",
    "requests", "urllib3", "httpx", "dask", "distributed", "ray", "lmdb",
    "torch", "tensorflow", "jax", "jaxlib", "transformers", "tokenizers", "sentencepiece",
    "fasttext", "vllm", "onnxruntime", "sklearn", "spacy", "jieba", "pandas", "pyarrow",
    "polars", "cudf", "cupy",
})
# Per-document scratch attributes of NeMo Curator's DocumentFilter / DocumentModifier (set while
# a document is scored or modified, never configuration).
_NEMO_SCRATCH = frozenset({"_sentences", "_paragraphs", "_ngrams",
                           "_boilerplate_paragraph_indices", "_top_or_bottom_only"})
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodWrapperType,
              types.WrapperDescriptorType, types.MethodDescriptorType,
              types.ClassMethodDescriptorType)


def _is_runtime(value: Any) -> bool:
    return isinstance(value, types.ModuleType) or any(
        (getattr(c, "__module__", None) or "").partition(".")[0] in _RUNTIME_PACKAGES
        for c in type(value).__mro__[:-1])


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _collection(items: list[Any], compact: bool) -> Any:
    if compact and len(items) > _MAX_ITEMS:
        return {"__len__": len(items), "__sha256__": _digest(items)}
    return items


def _attributes(value: Any) -> list[tuple[str, Any]]:
    """A held object's attributes: ``vars()`` and ``__slots__``, ``_`` names included."""
    try:
        found = dict(vars(value))
    except TypeError:  # no __dict__
        found = {}
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in found and not name.startswith("__"):
                with contextlib.suppress(AttributeError):  # an unset slot
                    found[name] = getattr(value, name)
    skip = _NEMO_SCRATCH if class_named(value, "DocumentFilter", "DocumentModifier") else ()
    return [(n, found[n]) for n in sorted(found) if not n.startswith("__") and n not in skip]


def _normalize(value: Any, depth: int = 0, compact: bool = False,
               path: frozenset[int] = frozenset()) -> Any:
    """A JSON-able, deterministic form of a parameter value (the rule: :func:`stage_fingerprint`).

    Example:
        >>> import re
        >>> class Limit:
        ...     def __init__(self, n):
        ...         self._n, self._pattern, self._lock = n, re.compile("a+"), None
        >>> _normalize([Limit(3)])[0]["_n"], _normalize(Limit(3))["_pattern"]["pattern"]
        (3, 'a+')
    """
    if depth > _MAX_DEPTH:
        return f"<{_qualname(type(value))}>"
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, bytes | bytearray):
        return {"__bytes__": len(value), "__sha256__": hashlib.sha256(value).hexdigest()[:16]}
    if id(value) in path:
        return f"<cycle {_qualname(type(value))}>"
    path = path | {id(value)}
    deeper = functools.partial(_normalize, depth=depth + 1, compact=compact, path=path)
    if isinstance(value, Mapping):
        keys = {(k if isinstance(k, str | int | float | bool) or k is None
                 else json.dumps(deeper(k), sort_keys=True)): v for k, v in value.items()}
        out = {str(k): _param(k, v, deeper)
               for k, v in sorted(keys.items(), key=lambda kv: str(kv[0]))}
        return ({"__len__": len(out), "__sha256__": _digest(out)}
                if compact and len(out) > _MAX_ITEMS else out)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple
        return {"__class__": _qualname(type(value)),
                **{f: deeper(getattr(value, f)) for f in value._fields}}
    if isinstance(value, list | tuple):
        return _collection([deeper(v) for v in value], compact)
    if isinstance(value, set | frozenset):
        return _collection(sorted((deeper(v) for v in value), key=repr), compact)
    if isinstance(value, enum.Enum):
        return f"{_qualname(type(value))}.{value.name}"
    if isinstance(value, type):
        return _qualname(value)
    if isinstance(value, re.Pattern):
        return {"__class__": "re.Pattern", "pattern": deeper(value.pattern),
                "flags": int(value.flags)}
    if _is_runtime(value):
        return f"<{_qualname(type(value))}>"
    if dataclasses.is_dataclass(value):
        return {"__class__": _qualname(type(value)),
                **{f.name: _param(f.name, getattr(value, f.name), deeper)
                   for f in dataclasses.fields(value) if not f.name.startswith("_")}}
    if isinstance(value, _FUNCTIONS):
        return f"<callable {_qualname(value)}>"
    if isinstance(value, types.MethodType):
        return {"__callable__": f"<callable {_qualname(value)}>", "self": deeper(value.__self__)}
    if isinstance(value, functools.partial):
        return {"__class__": "functools.partial", "func": deeper(value.func),
                "args": deeper(value.args), "keywords": deeper(value.keywords)}
    if type(value).__module__ == "numpy" and hasattr(value, "dtype"):
        if getattr(value, "ndim", 1) == 0:  # a NumPy scalar
            return deeper(value.item())
        if not value.dtype.hasobject:
            return {"__class__": "numpy.ndarray", "dtype": str(value.dtype),
                    "shape": list(value.shape),
                    "__sha256__": hashlib.sha256(value.tobytes()).hexdigest()[:16]}
    attributes = _attributes(value)
    if not attributes and not hasattr(value, "__dict__"):
        return f"<{_qualname(type(value))}>"
    inner = functools.partial(_normalize, depth=depth + 1, compact=True, path=path)
    return {"__class__": _qualname(type(value)),
            **{n: _param(n, v, inner) for n, v in attributes}}


def _param(name: Any, value: Any, normalize: Any = _normalize) -> Any:
    """A named parameter's normalized value; under a credential's name, digests only (the
    rule: :mod:`curator_dask.utils.redact`), taken before a container is compacted."""
    return redact_secret(normalize(value)) if is_secret_name(name) else normalize(value)


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    if module is None:  # methods of built-in types
        module = getattr(getattr(obj, "__objclass__", None), "__module__", None) or "builtins"
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{name}"


def stage_fingerprint(stage: Any) -> dict[str, Any]:
    """Class, name, roles, resources, batch size and parameters of one built stage.

    The stage's parameters are its dataclass fields (else its attributes), minus names that
    start with ``_`` and the header fields. Each value is normalized recursively and
    deterministically (no ids or addresses; mappings by key and sets sorted):

    - ``None``, booleans, numbers, strings, lists, tuples, sets and mappings as themselves;
      a ``NamedTuple`` by field, ``bytes`` by length and digest, an enum by member name.
    - A class or a function (lambda, method of a type, built-in) by qualified name: code is
      not fingerprinted. A bound method adds its instance, a ``functools.partial`` its function
      and arguments, a compiled regex its ``pattern`` and ``flags``, a NumPy array its dtype,
      shape and a digest of its bytes.
    - A dataclass held by the stage: its fields that do not start with ``_``.
    - Any other held object (a NeMo ``DocumentFilter`` or ``DocumentModifier``, a helper of
      one's own, a callable object): its class and every attribute in ``vars()`` and
      ``__slots__``, *including* names that start with ``_`` (NeMo keeps parameters such as
      ``WordCountFilter``'s ``_min_words`` there), except ``__`` names and the per-document
      scratch attributes of NeMo's filters and modifiers (``_sentences``, ``_paragraphs``,
      ``_ngrams``, ...). Within such an object a container of more than 256 items is
      fingerprinted by length and digest.
    - A value under a credential's name, at any depth (``hf_token``, ``password``,
      ``storage_options`` ``account_key``, ``sas_token``, ``connection_string``, ...), and the
      value of a ``name=value`` pair with such a name inside a string, by a digest only: a
      change is seen, the value never written (the rule: :mod:`curator_dask.utils.redact`).
    - Run-time state is represented by its class only, so that it neither fails nor
      destabilizes the fingerprint: modules, and objects of the standard library's thread,
      lock, queue, logging, file, socket and process modules, of file systems and clients
      (fsspec, boto, HTTP), of Dask and Ray, and of the model and data libraries (torch,
      transformers, fasttext, pandas, pyarrow, ...). So is any value nested deeper than
      six levels. A cycle is cut where it closes.

    Fingerprints are taken from the stages as built, before ``setup``: state that ``setup``
    adds (a loaded model) is not configuration.

    Example:
        >>> from curator_dask.stages.text.io.writer import JsonlWriter
        >>> fp = stage_fingerprint(JsonlWriter(path="memory://fp-doc"))
        >>> fp["class"], fp["params"]["mode"]
        ('curator_dask.stages.text.io.writer.jsonl.JsonlWriter', 'ignore')
    """
    if dataclasses.is_dataclass(stage):
        names = [f.name for f in dataclasses.fields(stage)]
    else:
        names = sorted(vars(stage))
    skip = {"name", "resources", "batch_size", "is_source_stage", "is_sink_stage",
            "is_resumable"}
    params = {n: _param(n, getattr(stage, n)) for n in names
              if not n.startswith("_") and n not in skip}
    return redact({
        "class": _qualname(type(stage)),
        "name": stage.name,
        "source": bool(stage.is_source_stage),
        "sink": bool(stage.is_sink_stage),
        "resources": _normalize(stage.resources),
        "batch_size": stage.batch_size,
        "params": params,
    })


def config_fingerprint(stages: Sequence[Any], **settings: Any) -> dict[str, Any]:
    """The normalized configuration of a built pipeline plus run settings, and its digest."""
    body = {"stages": [stage_fingerprint(s) for s in stages],
            "settings": redact(_normalize(settings))}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return {"digest": hashlib.sha256(text.encode()).hexdigest(), **body}


def _walk(saved: Any, current: Any, where: str, out: list[str]) -> None:
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(set(saved) | set(current), key=str):
            if key == "digest":
                continue
            path = f"{where}.{key}" if where else str(key)
            if key not in saved:
                # A stage parameter that a newer version added, at its default None, keeps
                # the stage's old behaviour: jobs saved before it existed still resume.
                if not (current[key] is None and where.endswith(".params")):
                    out.append(f"{path}: added ({json.dumps(current[key])})")
            elif key not in current:
                out.append(f"{path}: removed (was {json.dumps(saved[key])})")
            else:
                _walk(saved[key], current[key], path, out)
    elif isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current):
        for i, (a, b) in enumerate(zip(saved, current, strict=True)):
            _walk(a, b, f"{where}[{i}]", out)
    elif saved != current:
        out.append(f"{where}: {json.dumps(saved)} -> {json.dumps(current)}")


def diff_configs(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Human-readable differences, e.g. ``stages[2] (keep_long).params.min_chars: 50 -> 60``.

    Example:
        >>> a = {"stages": [{"name": "f", "params": {"n": 1}}], "settings": {}}
        >>> b = {"stages": [{"name": "f", "params": {"n": 2}}], "settings": {}}
        >>> diff_configs(a, b)
        ['stages[0] (f).params.n: 1 -> 2']
        >>> b["stages"][0]["params"]["partition"] = None  # added later, at its default
        >>> diff_configs(a, b)
        ['stages[0] (f).params.n: 1 -> 2']
    """
    out: list[str] = []
    s_stages, c_stages = saved.get("stages", []), current.get("stages", [])
    if len(s_stages) != len(c_stages):
        out.append(f"stages: {len(s_stages)} stages -> {len(c_stages)} stages "
                   f"({[s.get('name') for s in s_stages]} -> {[s.get('name') for s in c_stages]})")
    else:
        for i, (a, b) in enumerate(zip(s_stages, c_stages, strict=True)):
            _walk(a, b, f"stages[{i}] ({b.get('name', a.get('name'))})", out)
    _walk(saved.get("settings", {}), current.get("settings", {}), "settings", out)
    return out


def _file_hash(fs: Any, path: str, chunk: int = 8 << 20) -> str:
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def input_fingerprints(
    paths: Iterable[str], *, storage_options: dict | None = None, content: bool = False,
    infos: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{path: {"size", "mtime" or "etag"[, "sha256"]}}`` for each input file.

    The default is cheap (metadata only; ``infos`` from a listing saves asking again per
    file); ``content=True`` reads every byte (sha256 over the raw file, in C, never row by
    row in Python).
    """
    result: dict[str, dict[str, Any]] = {}
    for path in paths:
        fs, fs_path = fsspec.core.url_to_fs(path, **(storage_options or {}))
        info = (infos or {}).get(path) or fs.info(fs_path)
        entry: dict[str, Any] = {"size": info.get("size")}
        etag = info.get("ETag") or info.get("etag")
        if etag:
            entry["etag"] = str(etag).strip('"')
        else:
            mtime = info.get("mtime") or info.get("LastModified") or info.get("created")
            entry["mtime"] = mtime if isinstance(mtime, int | float) else str(mtime)
        if content:
            entry["sha256"] = _file_hash(fs, fs_path)
        result[path] = entry
    return result


def diff_inputs(saved: Mapping[str, Mapping[str, Any]],
                current: Mapping[str, Mapping[str, Any]], *,
                common_fields_only: bool = False) -> list[str]:
    """Which input files changed, appeared or disappeared, naming each file.

    ``common_fields_only`` compares only the fields both sides recorded (a record made without
    a content hash still matches on size and mtime).

    Example:
        >>> diff_inputs({"a": {"size": 1}}, {"a": {"size": 2}, "b": {"size": 1}})
        ['modified: a (size 1 -> 2)', 'added: b']
    """
    out = []
    for path in sorted(set(saved) | set(current)):
        if path not in current:
            out.append(f"removed: {path}")
        elif path not in saved:
            out.append(f"added: {path}")
        else:
            fields = (set(saved[path]) & set(current[path]) if common_fields_only
                      else set(saved[path]) | set(current[path]))
            changed = [k for k in sorted(fields) if saved[path].get(k) != current[path].get(k)]
            if changed:
                detail = ", ".join(f"{k} {saved[path].get(k)!r} -> {current[path].get(k)!r}"
                                   for k in changed)
                out.append(f"modified: {path} ({detail})")
    return out
