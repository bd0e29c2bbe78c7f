"""Fingerprints of a pipeline's configuration and inputs, for strict resume.

Data-Juicer compares raw YAML text (a comment fails it, a code change passes it). Here the
fingerprint is built from the *built* stages: each stage's class, name, roles, resources,
batch size and parameters (dataclass fields, or public attributes), normalized to JSON. A
resume compares field by field and names what changed. Inputs are fingerprinted by path, size
and modification time (or ETag), optionally by a full content hash. Pure: no Dask, no LMDB.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fsspec

_MAX_DEPTH = 6


def _normalize(value: Any, depth: int = 0) -> Any:
    """A JSON-able, deterministic form of a parameter value."""
    if depth > _MAX_DEPTH:
        return f"<{type(value).__name__}>"
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): _normalize(v, depth + 1) for k, v in sorted(value.items(), key=str)}
    if isinstance(value, list | tuple):
        return [_normalize(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_normalize(v, depth + 1) for v in value), key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__class__": _qualname(type(value)),
                **{f.name: _normalize(getattr(value, f.name), depth + 1)
                   for f in dataclasses.fields(value) if not f.name.startswith("_")}}
    if isinstance(value, type):
        return _qualname(value)
    if callable(value):
        return f"<callable {_qualname(value)}>"
    return f"<{_qualname(type(value))}>"


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def stage_fingerprint(stage: Any) -> dict[str, Any]:
    """Class, name, roles, resources, batch size and parameters of one built stage.

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
    params = {n: _normalize(getattr(stage, n)) for n in names
              if not n.startswith("_") and n not in skip}
    return {
        "class": _qualname(type(stage)),
        "name": stage.name,
        "source": bool(stage.is_source_stage),
        "sink": bool(stage.is_sink_stage),
        "resources": _normalize(stage.resources),
        "batch_size": stage.batch_size,
        "params": params,
    }


def config_fingerprint(stages: Sequence[Any], **settings: Any) -> dict[str, Any]:
    """The normalized configuration of a built pipeline plus run settings, and its digest."""
    body = {"stages": [stage_fingerprint(s) for s in stages],
            "settings": _normalize(settings)}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return {"digest": hashlib.sha256(text.encode()).hexdigest(), **body}


def _walk(saved: Any, current: Any, where: str, out: list[str]) -> None:
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(set(saved) | set(current), key=str):
            if key == "digest":
                continue
            path = f"{where}.{key}" if where else str(key)
            if key not in saved:
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
