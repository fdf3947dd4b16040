"""``--static-path-route PREFIX --static-path-mount DIR`` (repeatable; the n-th route goes
with the n-th mount, granian's convention): directories whose files the core serves itself
(``src/server/static_route.rs``), without calling the app.

Validated once at start-up (``parse_routes`` raises ``ValueError`` with a one-line message;
``Config`` turns it into a ``ConfigError``). A route matches the raw path at a segment
boundary, like ``--path-policy`` (``path_policy.prefix_matches``): ``/static`` covers
``/static/...`` but not ``/statics``. A mount is resolved to its real path here, so the core
can tell a file reached through a symlink that leaves it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_ROUTE", "StaticRoute", "parse_routes"]

# A mount given without a route (granian's default).
DEFAULT_ROUTE = "/static"
# A plain URL path: what a raw path can hold without percent-encoding.
_PREFIX = re.compile(r"/[!$&-+\-.0-9;=@A-Z_a-z~/]*")


@dataclass(frozen=True)
class StaticRoute:
    prefix: str  # starts with "/", no trailing "/" (unless it is "/")
    mount: str  # absolute, symlinks resolved


def _as_list(name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{name} must be a string or a list of strings, got {value!r}")
    return [os.fspath(item) for item in value]


def _prefix(route: str) -> str:
    if not _PREFIX.fullmatch(route):
        raise ValueError(f"static_path_route {route!r} must start with '/' and be a plain URL path")
    if any(segment in (".", "..") for segment in route.split("/")):
        raise ValueError(f"static_path_route {route!r} must not contain '.' or '..' segments")
    return route.rstrip("/") or "/"


def _mount(path: str) -> str:
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise ValueError(f"static_path_mount {path!r} is not a directory")
    return real


def parse_routes(routes: Any, mounts: Any) -> list[StaticRoute]:
    """The (route, mount) pairs of the options: as many routes as mounts, or one mount and
    no route (then ``DEFAULT_ROUTE``)."""
    route_list = _as_list("static_path_route", routes)
    mount_list = _as_list("static_path_mount", mounts)
    if not route_list and len(mount_list) == 1:
        route_list = [DEFAULT_ROUTE]
    if len(route_list) != len(mount_list):
        raise ValueError(
            f"{len(route_list)} static_path_route and {len(mount_list)} static_path_mount "
            "given: each route needs its mount (the n-th route goes with the n-th mount)"
        )
    parsed = [StaticRoute(_prefix(r), _mount(m)) for r, m in zip(route_list, mount_list)]
    seen: set[str] = set()
    for route in parsed:
        if route.prefix in seen:
            raise ValueError(f"static_path_route {route.prefix!r} given twice")
        seen.add(route.prefix)
    return parsed
