"""structlog configuration shared by every subcommand.

JSON lines when stderr is not a terminal (a Pod's log), coloured console lines on a terminal.
Standard-library loggers (kr8s, httpx, aiohttp) are routed through the same renderer so that
one process never mixes two log formats.

A logged exception carries its traceback without the frames' local variables. structlog's
renderers show locals by default: a reconcile's locals hold whole cached objects (a failure
under injected faults rendered thousands of lines, seconds of CPU each, on the event loop)
and may hold credentials, which have no place in a log.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["auto", "json", "console"]
LOG_LEVELS = ("debug", "info", "warning", "error")


def configure_logging(level: str = "info", fmt: LogFormat = "auto") -> None:
    """Configure structlog and the standard library to log at *level* in *fmt* to stderr."""
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}: use one of {', '.join(LOG_LEVELS)}")
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: structlog.types.Processor
    if use_json:
        shared.append(
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        )
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # Client libraries are chatty at INFO (one line per request); keep them to warnings
    # unless the operator asked for debug output.
    for noisy in ("httpx", "httpcore", "aiohttp.access", "kr8s"):
        logging.getLogger(noisy).setLevel(numeric if numeric <= logging.DEBUG else logging.WARNING)
