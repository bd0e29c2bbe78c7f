"""One ``PYTHONHASHSEED`` for every worker process curator_dask starts.

``hash()`` of a ``str`` (and of ``bytes``, and of tuples of them) is salted with a secret that
each interpreter draws at its start, so the order of a ``set`` of strings, and whatever a stage
derives from it, differs between processes. NeMo Curator's ``RepeatingTopNGramsFilter`` picks
"the most frequent n-gram" with ``max`` over such a set: on a tie, two worker processes (or a
replay after a worker was lost) score the same document differently. The secret is fixed only
by ``PYTHONHASHSEED`` in the environment *when the interpreter starts*: a running process cannot
change it, which is why the value must reach every worker before it starts (the forkserver, the
Nanny's pre-spawn environment, the SLURM job scripts, ``slurm-runner``'s worker ranks).

The value: ``PYTHONHASHSEED`` of the driver's environment when it has one (so the driver, which
runs the head, agrees with its workers), else config ``cluster.python-hash-seed`` (default
6640, the value Dask's own Nanny gives the workers it spawns); ``null`` sets nothing. No module
of this one imports Dask: the forkserver reads it before Dask is imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

ENV = "PYTHONHASHSEED"
CONFIG_KEY = "cluster.python-hash-seed"
# What distributed's Nanny puts in place of an unset or "0" seed for the workers it spawns
# (dask/distributed#8400); embedded workers forked by the forkserver must get the same.
NANNY_SEED = "6640"
_MAX = 2**32 - 1


def check_hash_seed(value: Any, given: str = CONFIG_KEY) -> str | None:
    """``value`` as the text of a ``PYTHONHASHSEED``, or ``None`` for ``None``; a value Python
    would refuse at start (each worker would die at once) raises ``ValueError``.

    Example:
        >>> check_hash_seed(6640), check_hash_seed("random"), check_hash_seed(None)
        ('6640', 'random', None)
        >>> try:
        ...     check_hash_seed("abc")
        ... except ValueError as exc:
        ...     print(str(exc).split(";")[0])
        cluster.python-hash-seed='abc' is not a PYTHONHASHSEED
    """
    if value is None:
        return None
    text = str(value).strip()
    if text == "random" or (text.isdigit() and int(text) <= _MAX):
        return text
    msg = (f"{given}={value!r} is not a PYTHONHASHSEED; use an integer from 0 to {_MAX} "
           f"(e.g. {NANNY_SEED}), 'random', or null to leave every process its own seed")
    raise ValueError(msg)


def worker_hash_seed(configured: Any = None, *, environ: Mapping[str, str] | None = None) -> \
        str | None:
    """The ``PYTHONHASHSEED`` the worker processes get: the driver's (``environ``, default
    ``os.environ``) when set, else ``configured``, else config ``cluster.python-hash-seed``.

    Example:
        >>> worker_hash_seed(environ={"PYTHONHASHSEED": "3"})
        '3'
        >>> worker_hash_seed(123, environ={})
        '123'
    """
    env = os.environ if environ is None else environ
    if env.get(ENV, "").strip():
        return check_hash_seed(env[ENV], given=f"{ENV} of the driver's environment")
    if configured is None:
        from curator_dask import config

        configured = config.get(CONFIG_KEY)
    return check_hash_seed(configured)


def nanny_hash_seed(seed: str | None) -> str | None:
    """The seed a worker spawned by Dask's Nanny ends up with when ``seed`` is asked for:
    the Nanny never starts one with ``0`` (hash randomization off), it uses 6640 instead.
    Workers forked by the forkserver are given the same, so that forked workers and the ones
    a Nanny spawns later (after a worker died) agree.

    Example:
        >>> nanny_hash_seed("0"), nanny_hash_seed("12"), nanny_hash_seed(None)
        ('6640', '12', None)
    """
    return NANNY_SEED if seed == "0" else seed
