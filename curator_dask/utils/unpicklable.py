"""Plugins whose locks, queues and conditions each copy makes anew.

distributed pickles a plugin on its way to the scheduler or to every worker; a lock, a queue or
a condition does not pickle. A plugin names those attributes once (``_remade``: attribute →
factory), makes them in ``__init__`` with :meth:`RemadeWhenUnpickled._make_remade`, and every
unpickled copy makes its own, so that all of its state exists from ``__init__`` on (as
distributed's own plugins do).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar


class RemadeWhenUnpickled:
    """Leaves the attributes named in ``_remade`` out of its pickle and makes them anew.

    Example:
        >>> import cloudpickle, threading
        >>> class Plugin(RemadeWhenUnpickled):
        ...     _remade = {"_lock": threading.Lock}
        ...     def __init__(self):
        ...         self.name = "p"
        ...         self._make_remade()
        >>> copy = cloudpickle.loads(cloudpickle.dumps(Plugin()))
        >>> copy.name, type(copy._lock) is type(threading.Lock())
        ('p', True)
    """

    _remade: ClassVar[dict[str, Callable[[], Any]]] = {}

    def _make_remade(self) -> None:
        for name, make in self._remade.items():
            setattr(self, name, make())

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self._remade}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._make_remade()
