"""NeMo stages log through loguru; their records on Dask workers reach the driver's log.

On a worker, every loguru record (NeMo's modules and the user's stages alike) goes into the
stdlib logger ``curator_dask_loguru``, with its module's name kept; ``Client.forward_logging``
carries them to the driver, where they are written to loguru again (what a NeMo user sees,
marked with the worker's address) and to the job's driver log.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import Client
    from loguru import Message, Record

LOGGER = "curator_dask_loguru"  # the stdlib logger that carries workers' loguru records
_lock = threading.Lock()
_driver_handler: logging.Handler | None = None


def bridge_worker_loguru(level: int = logging.INFO) -> None:
    """In a worker process: loguru's records become stdlib records.

    Called at each run's worker setup, and installed again each time: a library imported on
    the worker since the last run may have removed every loguru sink (importing
    ``data_juicer`` does, to add its own stderr sink), which would leave NeMo's records of
    this run nowhere. Setup runs before the run's tasks, so no record falls in between."""
    from loguru import logger

    with _lock:
        logger.remove()
        logger.add(_to_stdlib, level=level, format="{message}")
        logging.getLogger(LOGGER).setLevel(level)


def _to_stdlib(message: Message) -> None:
    record = message.record
    std = logging.getLogger(LOGGER)
    level = record["level"].no
    if not std.isEnabledFor(level):
        return
    std.handle(std.makeRecord(std.name, level, record["file"].path, record["line"],
                              record["message"], (), None, record["function"],
                              extra={"loguru_name": record["name"] or ""}))


class _ToLoguru(logging.Handler):
    """On the driver: forwarded worker records written to loguru, as NeMo writes its own."""

    def emit(self, record: logging.LogRecord) -> None:
        worker = getattr(record, "worker", None)  # set by distributed's forward_logging
        if not worker:
            return  # only records that came from a worker; the driver logs to loguru itself
        from loguru import logger

        name: str = getattr(record, "loguru_name", record.name)

        def where(r: Record) -> None:
            r["name"], r["function"], r["line"] = name, record.funcName, record.lineno

        level = record.levelname if record.levelname in _LOGURU_LEVELS else record.levelno
        logger.patch(where).log(level, "[worker {}] {}", worker, record.getMessage())


_LOGURU_LEVELS = {"TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"}


def forward_to_driver(client: Client) -> None:
    """Forward the workers' loguru records to this driver (idempotent)."""
    global _driver_handler
    client.forward_logging(LOGGER, level=logging.INFO)
    with _lock:
        if _driver_handler is None:
            _driver_handler = _ToLoguru()
            std = logging.getLogger(LOGGER)
            std.addHandler(_driver_handler)
            std.propagate = False  # loguru prints them; a root handler would print them twice
            if std.getEffectiveLevel() > logging.INFO:
                std.setLevel(logging.INFO)
