"""Generate the configuration key reference from ``curator_dask/curator_dask.yaml``.

    python tools/docs/gen_config_reference.py           # print to stdout

Every leaf key under ``curator-dask`` is listed with its default, the environment variable
that sets it (Dask's ``DASK_`` prefix, ``__`` between levels) and the comment above it in the
YAML file, so a key added to the defaults appears on the next docs build.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import yaml

ROOT = "curator-dask"


def defaults_file() -> str:
    import curator_dask

    return os.path.join(os.path.dirname(curator_dask.__file__), "curator_dask.yaml")


def comments(text: str) -> dict[str, str]:
    """``dotted key -> the comment lines right above it`` for a block-style YAML mapping."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped:
            pending = []
            continue
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        key = stripped.split(":", 1)[0].strip().strip("'\"")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        out[".".join(k for _, k in stack)] = " ".join(pending)
        pending = []
    return out


def leaves(mapping: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key, value in mapping.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            out.extend(leaves(value, path))
        else:
            out.append((path, value))
    return out


def env_var(key: str) -> str:
    """``execution.max-in-flight`` -> ``DASK_CURATOR_DASK__EXECUTION__MAX_IN_FLIGHT``."""
    parts = [ROOT, *key.split(".")]
    return "DASK_" + "__".join(p.replace("-", "_").upper() for p in parts)


def yaml_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def page_meanings(page: str | None) -> dict[str, str]:
    """``key -> meaning`` from the hand-written table of docs/configuration.md (a fallback
    for keys without a comment in the YAML file)."""
    if not page or not os.path.exists(page):
        return {}
    out = {}
    with open(page, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\|\s*`([^`]+)`\s*\|[^|]*\|\s*(.*?)\s*\|\s*$", line)
            if m:
                out[m.group(1)] = m.group(2)
    return out


def keys(page: str | None = None) -> list[dict[str, str]]:
    """One row per leaf key: key, default, environment variable, description."""
    path = defaults_file()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    data = yaml.safe_load(text)[ROOT]
    notes = comments(text)
    fallback = page_meanings(page)
    return [{"key": key, "default": yaml_value(value), "env": env_var(key),
             "meaning": _escape(notes.get(f"{ROOT}.{key}", "")) or fallback.get(key, "")}
            for key, value in leaves(data)]


def _escape(text: str) -> str:
    return re.sub(r"([\\*_|])", r"\\\1", text).replace("<", "&lt;")


def render(page: str | None = None) -> str:
    """The page; ``page`` is docs/configuration.md (meanings for keys without a comment)."""
    lines = [
        "# Configuration keys",
        "",
        "<!-- Generated from curator_dask/curator_dask.yaml by "
        "tools/docs/gen_config_reference.py at every docs build: do not edit. -->",
        "",
        "Every key of the `curator-dask` section of `dask.config`, generated from the "
        "package's defaults file (`curator_dask/curator_dask.yaml`) at every documentation "
        "build. Set a key in a Dask YAML file, with `dask.config.set({\"curator-dask.KEY\": "
        "value})`, or with the environment variable shown (YAML syntax for the value; set it "
        "before Python starts). Constructor arguments win over the configuration. "
        "See [Configuration](configuration.md) for how the settings interact.",
        "",
        "| key | default | environment variable | meaning |",
        "|---|---|---|---|",
    ]
    for row in keys(page):
        lines.append(f"| `{row['key']}` | `{row['default']}` | `{row['env']}` | {row['meaning']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.stdout.write(render(os.path.join(here, os.pardir, os.pardir, "docs", "configuration.md")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
