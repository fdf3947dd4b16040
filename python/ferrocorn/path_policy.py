"""``--path-policy 'PREFIX:key=value,...'``: per path prefix overrides of the body size limit
(``body``), the body read timeout (``body-timeout``) and the request timeout (``timeout``).

Parsed and validated once at start-up (``parse_policy`` raises ``ValueError`` with a one-line
message naming the bad part; ``Config`` turns it into a ``ConfigError``). The core picks a
request's body limits by the same rule (``src/config.rs`` ``prefix_matches``), the request
timeout's runner here (``_asgi.py`` ``_with_path_timeouts``). Only configurations with
policies pay for the lookup.

Matching is on the raw path as the client sent it (percent-encoded, without the query), at a
segment boundary: ``/upload`` covers ``/upload`` and ``/upload/...`` but not ``/uploads``;
``/upload/*`` is the same as ``/upload``; a prefix ending in ``/`` covers what starts with it,
and ``/`` covers every path. The first policy that matches wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Union

__all__ = ["UNSET", "PathPolicy", "parse_policies", "parse_policy", "prefix_matches"]


class _Unset:
    """A key the policy does not set: the request gets the global value."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()

# What a policy value is: a number, None for "off", or UNSET.
Setting = Union[int, float, None, _Unset]

_SIZE = re.compile(r"(\d+)([kmgt]?)(i?b)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# Visible ASCII without the characters that end a path or a spec part.
_PREFIX = re.compile(r"/[!$&-+\-.0-9;=@A-Z_a-z~%/*]*")
_OFF = ("off", "none")


@dataclass(frozen=True)
class PathPolicy:
    prefix: str  # normalised: starts with "/", no trailing "/*"
    body: Setting = UNSET  # bytes; None: no limit
    body_timeout: Setting = UNSET  # seconds; None: none
    timeout: Setting = UNSET  # seconds; None: none

    def matches(self, path: str) -> bool:
        return prefix_matches(self.prefix, path)


def prefix_matches(prefix: Any, path: Any) -> bool:
    """The rule of ``src/config.rs`` ``prefix_matches``, for two ``str`` or two ``bytes``."""
    if not path.startswith(prefix):
        return False
    n = len(prefix)
    slash = "/" if isinstance(prefix, str) else b"/"
    return prefix[n - 1 :] == slash or len(path) == n or path[n : n + 1] == slash


def parse_policies(specs: Any) -> list[PathPolicy]:
    """The policies of a ``path_policy`` option: None, one spec or a list of specs."""
    if specs is None:
        return []
    if isinstance(specs, str):
        specs = [specs]
    if not isinstance(specs, (list, tuple)):
        raise ValueError(f"expected a spec or a list of specs, got {specs!r}")
    return [parse_policy(spec) for spec in specs]


def parse_policy(spec: Any) -> PathPolicy:
    """One ``PREFIX:key=value,...`` spec; ValueError naming what is wrong."""
    if not isinstance(spec, str):
        raise ValueError(f"{spec!r}: expected a 'PREFIX:key=value,...' string")
    prefix, colon, settings = spec.rpartition(":")
    if not colon:
        raise ValueError(f"{spec!r}: expected 'PREFIX:key=value,...'")
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"{spec!r}: the prefix {prefix!r} must start with '/' and be a plain URL path"
        )
    if prefix.endswith("/*"):
        prefix = prefix[:-2] or "/"
    elif "*" in prefix:
        raise ValueError(f"{spec!r}: '*' is only allowed as a trailing '/*'")
    values: dict[str, Setting] = {}
    for item in settings.split(","):
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals or not key:
            raise ValueError(f"{spec!r}: expected key=value, got {item.strip()!r}")
        field = _KEYS.get(key.lower())
        if field is None:
            known = ", ".join(_KEYS)
            raise ValueError(f"{spec!r}: unknown key {key!r} (known keys: {known})")
        if field in values:
            raise ValueError(f"{spec!r}: key {key!r} given twice")
        try:
            values[field] = (
                _parse_size(key, value) if field == "body" else _parse_seconds(key, value)
            )
        except ValueError as exc:
            raise ValueError(f"{spec!r}: {exc}") from None
    return PathPolicy(prefix, **values)


def _parse_size(key: str, value: str) -> int | None:
    if value.lower() in _OFF or value == "0":
        return None
    match = _SIZE.fullmatch(value)
    if match is None:
        raise ValueError(f"invalid {key}={value!r}: expected bytes like 1048576, 10M, 10G or off")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def _parse_seconds(key: str, value: str) -> float | None:
    if value.lower() in _OFF:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"invalid {key}={value!r}: expected seconds > 0 (like 600) or off")
    return seconds


_KEYS = {"body": "body", "body-timeout": "body_timeout", "timeout": "timeout"}
