"""A Data-Juicer recipe read as ``dj-process`` reads it, and refused in one line when bad.

Data-Juicer's own config parser (``data_juicer.config.init_configs``) reads the recipe and
its dotted overrides (``--partition.mode auto``), so every default and every global key an
operator inherits (``text_keys``, ``work_dir``, ``skip_op_error``) is Data-Juicer's. Its
parser knows three executors; ``dask`` (and ``default``/``ray``/``ray_partitioned``, which
all run on Dask here) is taken off before it parses, and ``ray_partitioned`` given to it, so
the sections and ``--resume`` of the partitioned executor are accepted as it accepts them.

What is refused before any cluster starts (:class:`RecipeError`, one line, exit 2): an
unknown operator (with the closest registered names), a misspelled or mistyped parameter (Data-
Juicer's own preflight check), a dataset-level operator the engine cannot run (selectors,
groupers, aggregators), an operator that needs a GPU where none is, an operator whose resource
(model, word list) is not on this machine and cannot be downloaded, a ``dataset_path`` that
names no file.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any

import yaml

from curator_dask.errors import CuratorDaskError

logger = logging.getLogger(__name__)

EXECUTOR_TYPES = ("dask", "default", "ray", "ray_partitioned")
# the suffixes Data-Juicer's local loader reads (a folder's other files are left alone)
SUFFIXES = (".jsonl", ".json", ".parquet", ".jsonl.gz", ".json.gz", ".jsonl.zst")


class RecipeError(ValueError, CuratorDaskError):
    """A Data-Juicer recipe the engine refuses before anything runs: one line naming the
    operator, parameter or path, and the fix."""


def is_data_juicer_recipe(path: str) -> bool:
    """Whether the YAML file at ``path`` is a Data-Juicer recipe: a ``process:`` list and
    no ``stages:`` (a curator_dask pipeline file)."""
    try:
        with open(path, encoding="utf-8") as f:
            spec = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(spec, dict) and "process" in spec and "stages" not in spec


@dataclass
class Recipe:
    """A parsed recipe: Data-Juicer's config object and what the engine takes from it."""

    cfg: Any  # Data-Juicer's jsonargparse Namespace
    path: str
    executor_type: str  # as the recipe named it
    process: list[dict[str, Any]] = field(default_factory=list)

    @property
    def job_id(self) -> str:
        return str(self.cfg.job_id)

    @property
    def job_dir(self) -> str:
        """``{work_dir}/{job_id}``: Data-Juicer's parser already put the job id in work_dir."""
        return str(self.cfg.work_dir)

    @property
    def np(self) -> int:
        return int(self.cfg.get("np") or 1)


def _raw_spec(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            spec = yaml.safe_load(f)
    except FileNotFoundError:
        msg = f"recipe {path!r} does not exist: give the path of a Data-Juicer recipe YAML"
        raise RecipeError(msg) from None
    except yaml.YAMLError as exc:
        msg = f"recipe {path!r} is not valid YAML: {str(exc).splitlines()[0]}"
        raise RecipeError(msg) from None
    if not isinstance(spec, dict):
        msg = f"recipe {path!r} is not a mapping of keys: a Data-Juicer recipe has process:"
        raise RecipeError(msg)
    return spec


def _preflight(process: Any, path: str) -> None:
    """Data-Juicer's own pre-instantiation check (operator names, parameter names and types),
    its first error as one line."""
    from data_juicer.core.preflight import PipelineConfigError, pre_instantiation_check

    if not isinstance(process, list):
        msg = f"recipe {path!r}: process: must be a list of operators, got {process!r}"
        raise RecipeError(msg)
    entries = [e if isinstance(e, dict) else {e: None} for e in process]
    try:
        pre_instantiation_check(entries)
    except PipelineConfigError as exc:
        first = exc.errors[0]
        more = f" (and {len(exc.errors) - 1} more)" if len(exc.errors) > 1 else ""
        msg = f"recipe {path!r}: operator {first}{more}"
        raise RecipeError(msg) from None


def _check_dataset_path(spec: dict[str, Any], path: str, base: str) -> None:
    dataset_path = spec.get("dataset_path")
    if not dataset_path:
        if spec.get("dataset"):
            msg = (f"recipe {path!r}: the dataset: section (mixtures, remote sources) is not "
                   "run on Dask yet; give dataset_path: files, a folder or a glob")
            raise RecipeError(msg)
        msg = f"recipe {path!r}: no dataset_path: name the JSONL or Parquet files to read"
        raise RecipeError(msg)
    from curator_dask.data_juicer.io import dataset_files

    dataset_files(str(dataset_path), base)  # raises RecipeError naming the path


def load_recipe(path: str, overrides: list[str] | None = None) -> Recipe:
    """Read the recipe at ``path`` with Data-Juicer's parser and the dotted ``overrides`` as
    ``dj-process`` takes them; raise :class:`RecipeError` for what cannot run."""
    spec = _raw_spec(path)
    executor_type = str(spec.get("executor_type") or "default")
    overrides = list(overrides or [])
    if "--executor_type" in overrides:
        i = overrides.index("--executor_type")
        executor_type = overrides[i + 1] if i + 1 < len(overrides) else executor_type
        del overrides[i:i + 2]
    if executor_type not in EXECUTOR_TYPES:
        msg = (f"recipe {path!r}: executor_type {executor_type!r} is not one of "
               f"{', '.join(EXECUTOR_TYPES)} (all run on Dask here)")
        raise RecipeError(msg)
    _preflight(spec.get("process") or [], path)
    base = os.path.dirname(os.path.abspath(path))
    # Data-Juicer resolves relative paths against the current directory, as dj-process does
    _check_dataset_path(spec, path, os.getcwd())
    spec["executor_type"] = "ray_partitioned"
    cfg = _parse(spec, overrides, path, base)
    cfg.config = [os.path.abspath(path)]  # the user's recipe, not the copy the parser read
    recipe = Recipe(cfg=cfg, path=os.path.abspath(path), executor_type=executor_type,
                    process=list(cfg.process or []))
    with _quiet_loguru():
        check_ops(recipe)
    return recipe


def _parse(spec: dict[str, Any], overrides: list[str], path: str, base: str) -> Any:
    from data_juicer.config import init_configs

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, dir=base,
                                     prefix=".curator-dask-recipe-") as tmp:
        yaml.safe_dump(spec, tmp, sort_keys=False, allow_unicode=True)
    err = io.StringIO()
    try:
        with _quiet_loguru(), contextlib.redirect_stderr(err):
            return init_configs(["--config", tmp.name, *overrides],
                                load_configs_only=True)
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        msg = f"recipe {path!r}: {lines[-1] if lines else 'refused by Data-Juicer parser'}"
        raise RecipeError(msg) from None
    except (ValueError, TypeError, KeyError) as exc:
        msg = f"recipe {path!r}: {str(exc).splitlines()[0]}"
        raise RecipeError(msg) from None
    finally:
        os.unlink(tmp.name)


@contextlib.contextmanager
def _quiet_loguru() -> Any:
    """Data-Juicer logs each config step with loguru, and an operator whose download fails
    logs (and prints) its traceback: while the recipe is read and its operators built,
    Data-Juicer's loguru records are turned off and what it prints is kept off the terminal
    (a refusal is one line). Other loguru sinks of the process (NeMo Curator's, the ones
    curator_dask forwards worker records through) are left as they are."""
    from loguru import logger as loguru

    loguru.disable("data_juicer")
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        loguru.enable("data_juicer")


def check_ops(recipe: Recipe) -> None:
    """Build each operator once in this process (as a worker will) and refuse what cannot
    run: a dataset-level operator other than a deduplicator, an operator that needs a GPU
    where none is, one whose resource cannot be had."""
    from curator_dask.data_juicer.dedup import DEDUP_OPS, equivalent_entry
    from curator_dask.data_juicer.ops import DEDUP, REFUSED, built_op, op_kind, op_name

    for entry in recipe.process:
        name = op_name(entry)
        if name in DEDUP_OPS:
            equivalent_entry(entry)  # refuses a Ray variant's parameter without equivalent
            continue
        try:
            op = built_op(entry)
        except Exception as exc:  # an operator's constructor: any error is the recipe's
            raise RecipeError(_resource_message(name, exc)) from None
        if op_kind(op) == DEDUP:  # a deduplicator this executor has no convergence point for
            msg = (f"operator {name!r} is a deduplicator not run on Dask (those run are "
                   f"{', '.join(sorted(DEDUP_OPS))}); remove it from process: or run it with "
                   "dj-process on the exported result")
            raise RecipeError(msg)
        if op_kind(op) == REFUSED:
            kind = type(op).__mro__[1].__name__
            msg = (f"operator {name!r} is a dataset-level {kind}: it is not run on Dask "
                   "(only Mappers, Filters and deduplicators are); remove it from process: "
                   "or run it with dj-process on the exported result")
            raise RecipeError(msg)
        if op.accelerator == "cuda" and not _gpu_here():
            msg = (f"operator {name!r} needs a GPU (accelerator: cuda) and this machine has "
                   f"none: set accelerator: cpu on it if it can run on CPU, or run on a "
                   "cluster with GPUs (--address)")
            raise RecipeError(msg)


def _gpu_here() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


_URL = re.compile(r"https?://[^\s'\"),]+")
_HOST_PATH = re.compile(r"host='([^']+)'.*?url: (/\S+?)[\s(]")
_RESOURCE_FILE = re.compile(
    r"\[([^\]/]+\.[A-Za-z0-9]+)\]|/([^/\s]+\.(?:json|bin|model|txt|arpa|zip|gz))")


def _resource_message(name: str, exc: BaseException) -> str:
    """One line for an operator that could not be built: which resource, where to get it and
    where Data-Juicer looks for it, when the failure was a download."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    urls = _URL.findall(text)
    host_path = _HOST_PATH.search(text)
    if not urls and host_path:
        urls = [f"https://{host_path.group(1)}{host_path.group(2)}"]
    found = _RESOURCE_FILE.search(text)
    if urls or "download" in text.lower():
        from data_juicer.utils.cache_utils import (
            DATA_JUICER_ASSETS_CACHE,
            DATA_JUICER_MODELS_CACHE,
        )

        resource = next((g for g in found.groups() if g), None) if found else None
        is_model = "model" in text.lower() and "models" in (urls[0] if urls else "models")
        folder = DATA_JUICER_MODELS_CACHE if is_model else DATA_JUICER_ASSETS_CACHE
        variable = "DATA_JUICER_MODELS_CACHE" if is_model else "DATA_JUICER_ASSETS_CACHE"
        where = f" from {urls[0]}" if urls else ""
        return (f"operator {name!r} needs {resource or 'a resource'}, which cannot be "
                f"downloaded on this machine ({type(exc).__name__}): download it{where} where "
                f"the network allows and put it in {folder} (or point {variable} at its "
                "folder), then run again")
    return f"operator {name!r} could not be built: {type(exc).__name__}: {text[:300]}"
