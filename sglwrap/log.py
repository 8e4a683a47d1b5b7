"""Logging through structlog: readable on a terminal, JSON lines otherwise (journald). Always on stderr."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog

_configured = False


def configure(*, verbose: bool = False, json_lines: bool | None = None) -> None:
    """Set up structlog once for this process; ``json_lines`` defaults to "stderr is not a terminal"."""
    global _configured
    if json_lines is None:
        json_lines = not sys.stderr.isatty() or os.environ.get("SGLWRAP_LOG_FORMAT") == "json"
    level = logging.DEBUG if verbose else logging.INFO
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=_colors())
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configured = True


def _colors() -> bool:
    """Colour in the readable log lines exactly where reports get it (``--color``, ``NO_COLOR``, a terminal)."""
    from sglwrap.term import use_color

    return use_color(sys.stderr)


def get_logger(name: str = "sglwrap") -> Any:
    """A structlog logger; configures defaults on first use."""
    if not _configured:
        configure()
    return structlog.get_logger(name)
