"""The checks of the options whose values need more than a range or a choice.

Each takes the option's name and the value given to ``Config`` and returns the value to store,
or raises ``ConfigError`` with a one-line message. Standard library only (see spec.py).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from .spec import ConfigError, check_int, check_seconds

TRACE_LOG_LEVEL = 5

LOG_LEVELS: dict[str, int] = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": TRACE_LOG_LEVEL,
}


def as_given(name: str, value: Any) -> Any:
    return value


def log_level_number(value: Any) -> int | None:
    """The logging level of a ``log_level`` value (a name or a number); None: not set."""
    if value is None:
        return None
    if isinstance(value, str):
        level = LOG_LEVELS.get(value.lower())
        if level is None:
            raise ConfigError(
                f"Invalid log_level {value!r}: expected one of {', '.join(LOG_LEVELS)}."
            )
        return level
    return check_int("log_level", value, 0)


def log_level(name: str, value: Any) -> Any:
    log_level_number(value)
    return value  # stored as given; Config keeps the number as ``log_level_no``


def http_alias(value: Any) -> Any:
    # uvicorn-style aliases: "1.1" and the ints 1 and 2.
    try:
        return {"1.1": "1", 1: "1", 2: "2"}.get(value, value)
    except TypeError:  # unhashable: left for the choice check to reject
        return value


def cert_reqs_alias(value: Any) -> Any:
    # The ssl module's ints (ssl.CERT_NONE/OPTIONAL/REQUIRED are 0/1/2), as uvicorn takes them.
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 3:
        return ("none", "optional", "required")[value]
    return value.lower() if isinstance(value, str) else value


def tls_version_alias(value: Any) -> str:
    return str(value).lower().replace("tlsv", "").replace("_", ".")


def root_path(name: str, value: Any) -> Any:
    if value and not value.startswith("/"):
        raise ConfigError(f"Invalid root_path {value!r}: it must start with '/'.")
    # The core builds path = root_path + path, so "/api/" would yield "/api//x".
    return value.rstrip("/")


def uds_permissions(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        # CLI and env values are octal, like chmod: "660", "0660" or "0o660".
        try:
            value = int(value, 8)
        except ValueError:
            raise ConfigError(
                f"Invalid uds_permissions {value!r}: expected octal digits such as 660."
            ) from None
    return check_int("uds_permissions", value, 0, 0o7777)


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")  # RFC 9110 token
_HEADER_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # CTLs except HTAB


def encode_header(item: Any) -> tuple[bytes, bytes]:
    """A ``"Name:Value"`` string or a (name, value) pair as (lowercase name, value) bytes."""
    if isinstance(item, str):
        name, sep, value = item.partition(":")
        if not sep:
            raise ConfigError(f'Invalid header {item!r}: expected "Name:Value".')
    else:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise ConfigError(
                f'Invalid header {item!r}: expected a "Name:Value" string or a (name, value) pair.'
            ) from None
    # bytes are taken as latin-1, the encoding HTTP/1.1 header values travel in.
    if isinstance(name, bytes):
        name = name.decode("latin-1")
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(name, str) or not isinstance(value, str):
        raise ConfigError(f"Invalid header {item!r}: name and value must be str or bytes.")
    name, value = name.strip(), value.strip()
    if not _HEADER_NAME.match(name):
        raise ConfigError(f"Invalid header {item!r}: {name!r} is not a valid header name.")
    if _HEADER_VALUE_FORBIDDEN.search(value):
        raise ConfigError(f"Invalid header {item!r}: the value contains control characters.")
    try:
        encoded_value = value.encode("latin-1")
    except UnicodeEncodeError:
        raise ConfigError(
            f"Invalid header {item!r}: the value must be encodable as latin-1."
        ) from None
    return name.lower().encode("latin-1"), encoded_value


def headers(name: str, value: Any) -> list[Any]:
    items = list(value or [])
    for item in items:
        encode_header(item)  # fail at construction, not at the first request
    return items


def file_name(name: str, value: Any) -> str | None:
    if value is not None and (
        not isinstance(value, str)
        or value in ("", ".", "..")
        or "/" in value
        or "\\" in value
        or "\0" in value
    ):
        raise ConfigError(f"Invalid {name} {value!r}: expected a file name.")
    return value


def globs(name: str, value: Any) -> list[str]:
    patterns = [value] if isinstance(value, str) else list(value or [])
    if not all(isinstance(p, str) and p for p in patterns):
        raise ConfigError(f"Invalid {name} {value!r}: expected glob patterns (strings).")
    return patterns


def directories(name: str, value: Any) -> list[str]:
    """Absolute paths; Config checks that they exist when ``reload`` is on."""
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    return [os.path.abspath(os.fspath(d)) for d in value or []]


def none_if_empty(name: str, value: Any) -> Any:
    return value or None


def workers(name: str, value: Any) -> int:
    return 1 if value is None else check_int(name, value, 1)


def seconds_zero_if_none(name: str, value: Any) -> float:
    return check_seconds(name, value or 0.0)


def seconds_none_if_zero(name: str, value: Any) -> float | None:
    return None if value is None else (check_seconds(name, value) or None)


def forwarded_allow_ips(name: str, value: Any) -> Any:
    if value is None:  # uvicorn reads this variable too
        return os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
    return value  # Config parses it (proxy_headers.TrustedHosts)
