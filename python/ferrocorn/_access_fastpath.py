"""Whether the core may write the access log itself (ARCHITECTURE.md, "Access log").

With the default logging configuration — ``ferrocorn.access`` at INFO with only the handler
``Config.configure_logging`` installed (stdout, ``DefaultFormatter`` or, with ``--log-format
json``, ``JsonFormatter``; no filters) — the line
each request logs is always the same function of the request, so the Rust core formats it
and writes it to stdout from a thread of its own (src/access_log/), byte for byte what the
handler would print.  Any other configuration (``--log-config``, another handler, a filter,
a level above INFO, a custom record factory, a replaced ``sys.stdout`` without a descriptor)
keeps Python's logging.  The server re-checks on every tick while serving: a change made
after start-up diverts the lines back to Python's logging from then on.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from .jsonlog import JsonFormatter
from .logging_setup import DefaultFormatter, StdStreamHandler

access_logger = logging.getLogger("ferrocorn.access")

_DEFAULT_FMT = "%(levelprefix)s %(message)s"


def _default_handler(logger: logging.Logger) -> StdStreamHandler | None:
    """The one handler ``configure_logging`` installs, if that is all the logger has."""
    if type(logger) is not logging.Logger or logger.__dict__.keys() & _LOGGER_METHODS:
        return None
    if logger.disabled or logger.propagate or logger.filters:
        return None
    if not logger.isEnabledFor(logging.INFO) or len(logger.handlers) != 1:
        return None
    handler = logger.handlers[0]
    if type(handler) is not StdStreamHandler or handler._stream_name != "stdout":
        return None
    if handler.filters or handler.level > logging.INFO or handler.terminator != "\n":
        return None
    if handler.__dict__.keys() & _HANDLER_METHODS:
        return None
    formatter = handler.formatter
    if type(formatter) is JsonFormatter:
        return handler if logging.getLogRecordFactory() is logging.LogRecord else None
    if type(formatter) is not DefaultFormatter:
        return None
    style = formatter._style
    if type(style) is not logging.PercentStyle or style._fmt != _DEFAULT_FMT:
        return None
    if logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    return handler


# Instance attributes that would replace how a record is made or handled.
_LOGGER_METHODS = {"info", "_log", "makeRecord", "handle", "callHandlers", "filter"}
_HANDLER_METHODS = {"emit", "handle", "format", "filter", "stream"}


def _style(handler: logging.Handler) -> tuple[bool, bool]:
    """(colour, json) of the default handler's formatter."""
    formatter = handler.formatter
    if type(formatter) is JsonFormatter:
        return False, True
    return bool(getattr(formatter, "use_colours", False)), False


class CoreAccessLog:
    """The default configuration as found at start-up: ``fd``, ``colour`` and ``json`` (the
    JSON line of ``--log-format json``) for the core."""

    def __init__(self, stream: Any, fd: int, colour: bool, json_lines: bool) -> None:
        self._stream = stream
        self.fd = fd
        self.colour = colour
        self.json = json_lines

    @classmethod
    def detect(cls, access_log: bool, custom_format: bool) -> CoreAccessLog | None:
        """The core's part, or None when Python's logging must write the lines."""
        if not access_log or custom_format:
            return None
        handler = _default_handler(access_logger)
        if handler is None:
            return None
        stream = sys.stdout
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # a StringIO, a closed stream
            return None
        colour, json_lines = _style(handler)
        # What Python already buffered goes first.
        try:
            stream.flush()
        except (OSError, ValueError):
            return None
        return cls(stream, fd, colour, json_lines)

    def core_args(self) -> tuple[int, bool, bool]:
        return self.fd, self.colour, self.json

    def still_default(self) -> bool:
        """False once the configuration (or ``sys.stdout``) is no longer the one detected."""
        handler = _default_handler(access_logger)
        if handler is None or sys.stdout is not self._stream:
            return False
        return _style(handler) == (self.colour, self.json)


def log_through_python(client: str, method: str, path: str, version: str, status: int) -> None:
    """The diverted core's lines: the record the Python runner would have logged."""
    access_logger.info('%s - "%s %s HTTP/%s" %d', client, method, path, version, status)
