"""NeMo Curator's id generator on a ``DaskExecutor``, without Ray: the redirects inside NeMo.

NeMo Curator 1.4 keeps document ids in a detached Ray actor. Its readers with
``_generate_ids=True`` / ``_assign_ids=True`` get the actor in ``setup``
(``get_id_generator_actor()``) and call ``ray.get(self.id_generator.register_batch.remote(key,
n))`` (or ``get_batch_range.remote``) once per partition; its users and
``TextDuplicatesRemovalWorkflow.run`` start, save and end the actor with
``create_id_generator_actor``, ``write_id_generator_to_disk`` and ``kill_id_generator_actor``.
For runs on a ``DaskExecutor`` these reach :mod:`curator_dask.ids.generator` instead (the
registry on the driver, and on the run's Dask scheduler while the run is in progress):

- ``get_id_generator_actor()`` inside a curator_dask task on a worker returns a
  :class:`DaskIdGeneratorHandle`, whose ``register_batch.remote(...)`` /
  ``get_batch_range.remote(...)`` make the scheduler RPC at once and return the value wrapped in
  a :class:`Resolved`;
- ``ray`` in the reader's module (``nemo_curator.stages.text.io.reader.base``) is a
  :class:`RayStandIn` whose ``get`` unwraps a ``Resolved`` and hands anything else to the real
  ``ray.get``; every other attribute is the real ``ray``'s;
- ``create_id_generator_actor`` / ``write_id_generator_to_disk`` / ``kill_id_generator_actor``
  on the driver go to curator_dask's functions of the same names while a ``DaskExecutor`` is
  started, or inside ``TextDuplicatesRemovalWorkflow.run(executor=<DaskExecutor>)``; writing
  and killing also while curator_dask's generator exists (one a redirected call created), so
  the ``kill_id_generator_actor()`` after a ``with DaskExecutor()`` block ends it instead of
  asking Ray.

Everything else (another executor, no started ``DaskExecutor``, a Dask task that is not
curator_dask's) runs NeMo's own code: :func:`target` says which function a call runs.

Why these redirects and not others. They are the narrowest that work: the reader's methods stay
exactly NeMo's, so the id column's name, dtype and position and NeMo's warnings cannot drift
from a copy; only the two objects they talk to change, and a ``ray.get`` given a real Ray
reference still reaches Ray. The four functions are redirected in place (their code becomes a
three-line dispatcher; NeMo's code keeps running from an exact copy of each function) rather
than by rebinding the module's names, because a script imports them by name
(``from ...id_generator import create_id_generator_actor``) usually before it makes its first
``DaskExecutor``, and that name would go on calling Ray's version.

When. Each redirect is a row of :mod:`.patches`: the functions' code and the reader's ``ray``
are replaced only while they are held (a started ``DaskExecutor``, a removal workflow running on
one, a worker's ``StageHost`` whose stages use ids: :func:`install_for`, or a generator made on
Dask that still exists) and restored after; the workflow's ``run`` is an entry row, replaced
before a run because NeMo's ``run`` calls ``create_id_generator_actor`` before it touches the
executor.

Version guard, as for ``Pipeline.run`` (:mod:`.hook`): nothing is redirected unless NeMo is
1.4.x and the functions and reader methods are the ones this was written against (their
parameters, and the names the reader's id methods use: :func:`functions_match`,
:func:`reader_matches`). Otherwise a ``DaskExecutor`` run whose stages need ids stops before
anything runs with one line naming the supported versions (:func:`unsupported_reason`, raised
by :mod:`.checks`), so it can never fall into Ray's path.
"""

from __future__ import annotations

import contextvars
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from curator_dask.nemo import hook

ID_MODULE = "nemo_curator.stages.deduplication.id_generator"
READER_MODULE = "nemo_curator.stages.text.io.reader.base"
WORKFLOW_MODULE = "nemo_curator.stages.text.deduplication.removal_workflow"
# parameter names and defaults of NeMo 1.4's functions, which the dispatchers reproduce
_SIGNATURES: dict[str, tuple[list[str], tuple | None]] = {
    "get_id_generator_actor": ([], None),
    "create_id_generator_actor": (["filepath", "storage_options"], (None, None)),
    "write_id_generator_to_disk": (["filepath", "storage_options"], (None,)),
    "kill_id_generator_actor": ([], None),
}
# names the reader's id methods must use for the handle and the stand-in to serve them
_READER_NAMES = {"_generate_ids_func": {"ray", "register_batch", "remote"},
                 "_assign_ids_func": {"ray", "get_batch_range", "remote"}}
_WORKFLOW_PARAMETERS = ["self", "executor", "initial_tasks"]
_DRIVER_FUNCTIONS = ("create_id_generator_actor", "write_id_generator_to_disk",
                     "kill_id_generator_actor")

_originals: dict[str, Callable[..., Any]] = {}  # NeMo's functions, as copies
_in_workflow: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "curator_dask_nemo_removal_on_dask", default=False)


# -- which function a call runs --------------------------------------------------------------
def target(name: str) -> Callable[..., Any]:
    """The function a call of NeMo's ``name`` (one of its four id generator functions) runs
    now: curator_dask's (``DaskIdGeneratorHandle`` for ``get_id_generator_actor``), or NeMo's
    own (:func:`original`). The redirected functions call exactly this."""
    if name == "get_id_generator_actor":
        return DaskIdGeneratorHandle if in_curator_dask_task() else original(name)
    if name not in _DRIVER_FUNCTIONS:
        msg = f"{name!r} is not one of NeMo's id generator functions redirected for Dask"
        raise ValueError(msg)
    from curator_dask.ids import generator as ours

    if (_in_workflow.get() or dask_executor_started()
            or (name != "create_id_generator_actor" and ours.id_generator_exists())):
        return getattr(ours, name)
    return original(name)


def original(name: str) -> Callable[..., Any]:
    """NeMo's own function ``name``: the module's while it is not redirected, else a copy of
    the function object with NeMo's code."""
    fn = getattr(_nemo_module(ID_MODULE), name)
    if fn.__code__ is _DISPATCHERS[name].__code__:
        return _originals[name]
    return fn


def in_curator_dask_task() -> bool:
    """Whether this thread runs a Dask task on a worker that holds a curator_dask run."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return False
    from curator_dask.backends.dask.worker import StageHost

    return any(isinstance(p, StageHost) for p in list(worker.plugins.values()))


def dask_executor_started() -> bool:
    """Whether a ``DaskExecutor`` of this process has a started cluster."""
    from curator_dask.backends.dask.executor import any_started

    return any_started()


def uses_ids(stage: Any) -> bool:
    """Whether a stage generates or assigns ids through the generator."""
    return bool(getattr(stage, "_generate_ids", False) or getattr(stage, "_assign_ids", False))


def install_for(stages: list[Any]) -> bool:
    """On a worker (the run's stages are NeMo's): when one of them uses ids, import the id
    generator's and the reader's modules (the reader's ``setup`` imports the first only then)
    and hold their redirects (:func:`curator_dask.nemo.patches.install`); whether it did (the
    caller then releases them with ``patches.remove()``)."""
    if not any(uses_ids(s) for s in stages):
        return False
    from curator_dask.nemo import patches

    for name in (ID_MODULE, READER_MODULE):
        _nemo_module(name)
    patches.install()
    return True


def unsupported_reason() -> str | None:
    """``None`` when NeMo's id generation runs on a ``DaskExecutor`` here, else the one line
    that says why not (another NeMo Curator version, or other functions than expected)."""
    version = hook.nemo_version()
    detail = ""
    if hook.is_supported(version):
        from curator_dask.nemo import patches

        modules = [_nemo_module(name) for name in (ID_MODULE, READER_MODULE)]  # imported now
        patches.refresh()  # so a started executor redirects them at once
        if functions_match(modules[0]) and reader_matches(modules[1]):
            return None
        detail = (" (its id generator functions or its reader's id methods are not the ones "
                  "curator_dask was written against)")
    supported = ", ".join(v + ".x" for v in hook.SUPPORTED_VERSIONS)
    return (f"curator_dask runs NeMo Curator's id generation (_generate_ids / _assign_ids) on a "
            f"DaskExecutor for NeMo Curator {supported} only; this is {version}{detail}: use a "
            "supported NeMo Curator, or AddId for ids without the generator")


# -- what the reader talks to ------------------------------------------------------------------
@dataclass(frozen=True)
class Resolved:
    """The value of a :class:`DaskIdGeneratorHandle` call, already there (what the reader's
    ``ray.get`` returns for it)."""

    value: Any


class _Remote:
    """One method of the handle: ``.remote(*args)`` calls curator_dask's function now."""

    def __init__(self, name: str) -> None:
        self.name = name

    def remote(self, *args: Any, **kwargs: Any) -> Resolved:
        from curator_dask.ids import generator as ours

        return Resolved(getattr(ours, self.name)(*args, **kwargs))


class DaskIdGeneratorHandle:
    """What NeMo's reader holds as ``self.id_generator`` in a curator_dask task: the methods it
    calls on Ray's actor, each one scheduler RPC (:func:`~curator_dask.ids.generator.
    register_batch`, ``get_batch_range``).

    Example:
        >>> DaskIdGeneratorHandle().register_batch.name
        'register_batch'
    """

    register_batch = _Remote("register_batch")
    get_batch_range = _Remote("get_batch_range")

    def __repr__(self) -> str:
        return "DaskIdGeneratorHandle()"


class RayStandIn:
    """``ray`` in the reader's module: ``get`` unwraps a :class:`Resolved`; anything else,
    every other attribute included, is the real ``ray``'s.

    Example:
        >>> import types
        >>> stand_in = RayStandIn(types.SimpleNamespace(get=lambda ref: ("ray", ref)))
        >>> stand_in.get(Resolved(7)), stand_in.get("ref")
        (7, ('ray', 'ref'))
    """

    def __init__(self, real: Any) -> None:
        self._real = real

    def get(self, refs: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(refs, Resolved):
            return refs.value
        return self._real.get(refs, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "_real":  # before __init__ (copying): no recursion
            raise AttributeError(name)
        return getattr(self._real, name)

    def __repr__(self) -> str:
        return f"RayStandIn({self._real!r})"


# -- the replacements and their guards (rows of curator_dask.nemo.patches) ---------------------
def _supported() -> bool:
    return hook.is_supported(hook.nemo_version())


def functions_match(module: Any) -> bool:
    """Whether NeMo's id generator module is the one the dispatchers were written for (NeMo
    1.4.x, the four functions with these parameters and defaults): all four are redirected,
    or none."""
    return _supported() and all(_matches(getattr(module, name, None), *signature)
                                for name, signature in _SIGNATURES.items())


def dispatcher_code(name: str) -> Callable[[Any, Any], Any]:
    """The replacement of NeMo's function ``name``'s code: its dispatcher's, once an exact copy
    of NeMo's function is kept for :func:`original`."""

    def replacement(code: Any, module: Any) -> Any:
        _originals[name] = _copy(getattr(module, name))  # its code is still NeMo's here
        return _DISPATCHERS[name].__code__

    return replacement


def _matches(fn: Any, parameters: list[str], defaults: tuple | None) -> bool:
    if not isinstance(fn, types.FunctionType) or fn.__code__.co_freevars:
        return False
    found = inspect.signature(fn).parameters.values()
    return ([p.name for p in found] == parameters and fn.__defaults__ == defaults
            and all(p.kind is p.POSITIONAL_OR_KEYWORD for p in found))


def _copy(fn: types.FunctionType) -> types.FunctionType:
    clone = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                               fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    clone.__dict__.update(fn.__dict__)
    for attribute in ("__qualname__", "__doc__", "__module__", "__annotations__"):
        setattr(clone, attribute, getattr(fn, attribute))
    return clone


def reader_matches(module: Any) -> bool:
    """Whether NeMo's reader module is the one :class:`RayStandIn` was written for (NeMo 1.4.x,
    a real ``ray`` module, and id methods that use the names the handle serves)."""
    reader = getattr(module, "BaseReader", None)
    if reader is None or not _supported():
        return False
    if not isinstance(getattr(module, "ray", None), (types.ModuleType, RayStandIn)):
        return False
    for method, names in _READER_NAMES.items():
        fn = getattr(reader, method, None)
        if not isinstance(fn, types.FunctionType) or not names <= set(fn.__code__.co_names):
            return False
    return True


def ray_stand_in(real: Any, module: Any = None) -> RayStandIn:
    """The replacement of ``ray`` in NeMo's reader module."""
    return RayStandIn(real)


def workflow_matches(module: Any) -> bool:
    """Whether ``TextDuplicatesRemovalWorkflow.run`` has the parameters the wrapper passes on
    (on any version: a Dask run with ids on an unsupported one then stops with the version line
    instead of starting Ray's actor)."""
    nemo_run = getattr(getattr(module, "TextDuplicatesRemovalWorkflow", None), "run", None)
    return (isinstance(nemo_run, types.FunctionType)
            and list(inspect.signature(nemo_run).parameters) == _WORKFLOW_PARAMETERS)


def removal_run(nemo_run: Callable[..., Any], module: Any = None) -> Callable[..., Any]:
    """The replacement of NeMo's ``TextDuplicatesRemovalWorkflow.run``."""

    def run(self: Any, executor: Any = None, initial_tasks: Any = None) -> Any:
        return _run_removal(nemo_run, self, executor, initial_tasks)

    # a function's own attributes: mypy knows only those of its type
    run.__doc__, run.__wrapped__ = nemo_run.__doc__, nemo_run  # type: ignore[attr-defined]  # wraps
    run.__curator_dask_redirect__ = True  # type: ignore[attr-defined]  # marker
    return run


def _run_removal(nemo_run: Callable[..., Any], workflow: Any, executor: Any,
                 initial_tasks: Any) -> Any:
    """NeMo's ``TextDuplicatesRemovalWorkflow.run``; on a ``DaskExecutor`` its
    ``create_id_generator_actor`` / ``kill_id_generator_actor`` are curator_dask's (held, and
    chosen by :func:`target`, while it runs)."""
    from curator_dask.backends.dask.executor import DaskExecutor

    if not isinstance(executor, DaskExecutor):
        return nemo_run(workflow, executor, initial_tasks)
    if getattr(workflow, "id_generator_path", None) is not None:
        reason = unsupported_reason()
        if reason is not None:
            msg = f"TextDuplicatesRemovalWorkflow(id_generator_path=...): {reason}"
            raise RuntimeError(msg)
    from curator_dask.nemo import patches

    token = _in_workflow.set(True)
    patches.install()  # the id functions NeMo's run calls are redirected while it runs
    try:
        return nemo_run(workflow, executor, initial_tasks)
    finally:
        _in_workflow.reset(token)
        patches.remove()


def _nemo_module(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


def call(name: str, *args: Any) -> Any:
    """A call of NeMo's redirected function ``name``: :func:`target`'s function; after a kill,
    the redirects are restored when nothing holds them any more."""
    result = target(name)(*args)
    if name == "kill_id_generator_actor":
        from curator_dask.nemo import patches

        patches.settle()
    return result


# The code of NeMo's four functions once redirected: the same parameters; no names of this
# module (the code runs with NeMo's module globals), so each imports call.
def _get_id_generator_actor() -> Any:
    from curator_dask.nemo.ids import call

    return call("get_id_generator_actor")


def _create_id_generator_actor(filepath: Any = None, storage_options: Any = None) -> Any:
    from curator_dask.nemo.ids import call

    return call("create_id_generator_actor", filepath, storage_options)


def _write_id_generator_to_disk(filepath: Any, storage_options: Any = None) -> Any:
    from curator_dask.nemo.ids import call

    return call("write_id_generator_to_disk", filepath, storage_options)


def _kill_id_generator_actor() -> Any:
    from curator_dask.nemo.ids import call

    return call("kill_id_generator_actor")


_DISPATCHERS = {"get_id_generator_actor": _get_id_generator_actor,
                "create_id_generator_actor": _create_id_generator_actor,
                "write_id_generator_to_disk": _write_id_generator_to_disk,
                "kill_id_generator_actor": _kill_id_generator_actor}
