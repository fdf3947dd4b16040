"""The server's options, declared once (table.py), and what is derived from the table here:
the checked values ``Config`` stores, and the docs' Settings page.

Standard library only, and no import of the rest of the package: the docs build loads it
without the compiled extension (docs/hooks/settings.py).
"""

from __future__ import annotations

import inspect
from typing import Any

from .checks import LOG_LEVELS, TRACE_LOG_LEVEL, encode_header, log_level_number
from .page import settings_markdown
from .spec import ConfigError, Option
from .table import (
    BY_NAME,
    CONFIG_OPTIONS,
    HTTP_MODES,
    INTERFACES,
    LIFESPAN_MODES,
    LOG_FORMATS,
    LOOP_CHOICES,
    OPTIONS,
    PROXY_PROTOCOL_MODES,
    SENDFILE_MODES,
    SSL_CERT_REQS,
    SSL_MIN_VERSIONS,
    WS_MODES,
)

__all__ = [
    "BY_NAME",
    "CONFIG_OPTIONS",
    "HTTP_MODES",
    "INTERFACES",
    "LIFESPAN_MODES",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "LOOP_CHOICES",
    "OPTIONS",
    "PROXY_PROTOCOL_MODES",
    "SENDFILE_MODES",
    "SSL_CERT_REQS",
    "SSL_MIN_VERSIONS",
    "TRACE_LOG_LEVEL",
    "WS_MODES",
    "ConfigError",
    "Option",
    "check_options",
    "config_signature",
    "encode_header",
    "log_level_number",
    "settings_markdown",
]


def check_options(given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``Config``'s keyword arguments, checked one by one in the table's order: (every
    option as given, a default where not given; every option as ``Config`` stores it)."""
    unknown = [name for name in given if name not in BY_NAME or BY_NAME[name].cli_only]
    if unknown:
        raise TypeError(f"Config.__init__() got an unexpected keyword argument {unknown[0]!r}")
    as_given = {o.name: given.get(o.name, o.default) for o in CONFIG_OPTIONS}
    return as_given, {o.name: o.checked(as_given[o.name]) for o in CONFIG_OPTIONS}


def config_signature() -> inspect.Signature:
    """``Config.__init__``'s signature: ``(self, app, *, <every option>=<default>)``."""
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [
        inspect.Parameter("self", positional),
        inspect.Parameter("app", positional, annotation="str | Callable[..., Any]"),
    ]
    params += [
        inspect.Parameter(
            o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=o.type_hint
        )
        for o in CONFIG_OPTIONS
    ]
    return inspect.Signature(params, return_annotation="None")
