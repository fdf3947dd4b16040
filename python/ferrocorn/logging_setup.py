"""The server's logging: the ``ferrocorn``, ``ferrocorn.error`` and ``ferrocorn.access``
loggers, their default handlers and formatter, and a user's ``--log-config``."""

from __future__ import annotations

import errno
import json
import logging
import logging.config
import os
import sys
from typing import Any

from .jsonlog import JsonFormatter
from .options import TRACE_LOG_LEVEL, ConfigError

__all__ = ["DefaultFormatter", "StdStreamHandler", "apply_log_config", "configure_logging"]

logging.addLevelName(TRACE_LOG_LEVEL, "TRACE")

# Loggers owned by the server; the parent carries the stderr handler.
LOGGER_NAMES = ("ferrocorn", "ferrocorn.error", "ferrocorn.access")


class DefaultFormatter(logging.Formatter):
    """Formats ``INFO:     message`` (the level padded so messages line up), optionally coloured.

    Use ``%(levelprefix)s`` in a custom ``fmt`` to get the padded, coloured level.
    """

    _COLOURS = {
        "TRACE": "\x1b[34m",  # blue
        "DEBUG": "\x1b[36m",  # cyan
        "INFO": "\x1b[32m",  # green
        "WARNING": "\x1b[33m",  # yellow
        "ERROR": "\x1b[31m",  # red
        "CRITICAL": "\x1b[91m",  # bright red
    }

    def __init__(
        self,
        fmt: str | None = "%(levelprefix)s %(message)s",
        datefmt: str | None = None,
        style: str = "%",
        use_colours: bool = False,
    ) -> None:
        super().__init__(fmt, datefmt, style)  # type: ignore[arg-type]  # style is a Literal
        self.use_colours = use_colours
        # Cached per level name: formatting runs for every access-log line.
        self._prefixes: dict[str, str] = {}

    def _prefix(self, levelname: str) -> str:
        prefix = self._prefixes.get(levelname)
        if prefix is None:
            padding = " " * max(0, 8 - len(levelname))
            colour = self._COLOURS.get(levelname) if self.use_colours else None
            shown = f"{colour}{levelname}\x1b[0m" if colour else levelname
            prefix = self._prefixes[levelname] = f"{shown}:{padding}"
        return prefix

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.levelprefix = self._prefix(record.levelname)
        return super().formatMessage(record)


class StdStreamHandler(logging.StreamHandler):
    """Writes to ``sys.stdout``/``sys.stderr`` as they are at emit time.

    Test runners and daemonising wrappers replace the std streams after logging is set up; a
    handler holding the old object would write to a closed file.
    """

    def __init__(self, stream_name: str) -> None:
        logging.Handler.__init__(self)
        self._stream_name = stream_name

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return getattr(sys, self._stream_name)


def _wants_colour(stream: Any) -> bool:
    if "NO_COLOR" in os.environ:  # https://no-color.org
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or already closed
        return False


def _set_own_handler(target: logging.Logger, stream_name: str, json_lines: bool) -> None:
    """Install our std-stream handler on ``target``, replacing one a previous call installed.

    ``json_lines``: ``--log-format json`` (jsonlog.py), never coloured."""
    for handler in list(target.handlers):
        if isinstance(handler, StdStreamHandler):
            target.removeHandler(handler)
    handler = StdStreamHandler(stream_name)
    formatter: logging.Formatter
    if json_lines:
        formatter = JsonFormatter()
    else:
        formatter = DefaultFormatter(use_colours=_wants_colour(getattr(sys, stream_name)))
    handler.setFormatter(formatter)
    target.addHandler(handler)


def configure_logging(
    log_config: Any, log_format: str, log_level_no: int | None, access_log: bool
) -> None:
    """Set up the server's loggers; idempotent (``Config.configure_logging``).

    Without ``log_config`` the messages go to stderr and the access log to stdout, as text or
    (``log_format="json"``) JSON lines; ``log_config`` (a dictConfig dict or a
    .json/.yaml/.ini path) replaces that default.  ``log_level_no`` and ``access_log`` are
    applied last.
    """
    if log_config is None:
        json_lines = log_format == "json"
        parent = logging.getLogger("ferrocorn")
        _set_own_handler(parent, "stderr", json_lines)
        parent.propagate = False  # uvicorn-like: no duplicates through the root logger
        access = logging.getLogger("ferrocorn.access")
        _set_own_handler(access, "stdout", json_lines)
        access.propagate = False
        logging.getLogger("ferrocorn.error").propagate = True
        for name in LOGGER_NAMES:
            logging.getLogger(name).setLevel(logging.INFO)
            logging.getLogger(name).disabled = False
    else:
        apply_log_config(log_config)

    if log_level_no is not None:
        for name in LOGGER_NAMES:
            logging.getLogger(name).setLevel(log_level_no)
    if not access_log:
        access = logging.getLogger("ferrocorn.access")
        access.propagate = False
        # A disabled logger answers isEnabledFor() with False, so access lines are
        # neither built nor formatted.
        access.disabled = True


def apply_log_config(log_config: Any) -> None:
    if isinstance(log_config, dict):
        source = "log_config"
    else:
        source = f'"{os.fspath(log_config)}"'
    try:
        if isinstance(log_config, dict):
            logging.config.dictConfig(log_config)
            return
        path = os.fspath(log_config)
        lowered = path.lower()
        if lowered.endswith(".json"):
            with open(path, encoding="utf-8") as file:
                logging.config.dictConfig(json.load(file))
        elif lowered.endswith((".yaml", ".yml")):
            try:
                import yaml
            except ImportError:
                raise ConfigError(
                    f"Could not configure logging from {source}: PyYAML is not installed."
                ) from None
            with open(path, encoding="utf-8") as file:
                loaded = yaml.safe_load(file)
            if not isinstance(loaded, dict):
                raise ValueError("the file does not contain a mapping")
            logging.config.dictConfig(loaded)
        else:
            if not os.path.isfile(path):  # fileConfig's own error for this is cryptic
                raise FileNotFoundError(errno.ENOENT, "No such file", path)
            logging.config.fileConfig(path, disable_existing_loggers=False)
    except ConfigError:
        raise
    except Exception as exc:  # any user-config mistake: json, yaml, configparser, dictConfig
        message = str(exc).replace("\n", " ")
        raise ConfigError(
            f"Could not configure logging from {source}: {type(exc).__name__}: {message}"
        ) from exc
