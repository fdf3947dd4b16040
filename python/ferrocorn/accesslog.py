"""``--access-log-format``: access-log lines from named atoms, compiled once at start-up.

The format is a ``%``-style string with named fields, e.g.
``'%(client)s "%(request_line)s" %(status)d %(bytes)d %(duration_ms).1f "%(user_agent)s"'``.
Atoms (text atoms that would be empty print ``-``):

====================  =====  ======================================================================
atom                  type   value
====================  =====  ======================================================================
``client``            str    client ``host:port`` (after proxy headers), as the default line prints
``client_host``       str    client host only
``method``            str    request method
``path``              str    request path as sent (percent-encoded, no query)
``query``             str    query string without ``?``
``full_path``         str    path with ``?query``, as the default line prints
``request_line``      str    ``GET /path?query HTTP/1.1``
``http_version``      str    ``1.0``, ``1.1``, ``2``
``scheme``            str    ``http``/``https`` (after proxy headers)
``host``              str    ``Host`` request header
``status``            int    response status (500 when the app failed; 0 when nothing was sent)
``bytes``             int    response body bytes sent
``duration``          float  seconds from request arrival to the end of the app call
``duration_ms``       float  the same, in milliseconds
``user_agent``        str    ``User-Agent`` request header
``referer``           str    ``Referer`` request header
``request_id``        str    ``X-Request-ID`` request header
====================  =====  ======================================================================

Header values have ``\\`` and ``"`` backslash-escaped so they can sit inside quotes.  ``%%`` is a
literal ``%``; positional ``%s`` fields are an error.  Timestamps and levels are the logging
formatter's business (``--log-config``).  The default (no format given) is uvicorn's line,
``%(client)s - "%(method)s %(full_path)s HTTP/%(http_version)s" %(status)d``, printed by a
dedicated fast path.
"""

from __future__ import annotations

import re
from typing import Any, Callable

__all__ = ["ATOMS", "DEFAULT_ACCESS_LOG_FORMAT", "AccessLogFormat", "client_text"]

DEFAULT_ACCESS_LOG_FORMAT = (
    '%(client)s - "%(method)s %(full_path)s HTTP/%(http_version)s" %(status)d'
)

# access_info(): (client, method, path_with_query, http_version, status, bytes, seconds)
Info = tuple  # type: ignore[type-arg]
_Atom = Callable[[dict, Info, dict], Any]  # (scope, info, headers) -> value


def client_text(client: Any) -> str:
    """``host:port`` like the core's access_info(); ``""`` when there is no client."""
    return f"{client[0]}:{client[1]}" if client else ""


def _escape(value: str) -> str:
    if "\\" in value or '"' in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"')
    return value


def _header(name: bytes) -> _Atom:
    def atom(scope: dict, info: Info, headers: dict) -> str:
        value = headers.get(name)
        return _escape(value) if value else "-"

    return atom


def _client(scope: dict, info: Info, headers: dict) -> str:
    return client_text(scope.get("client")) or "-"


def _client_host(scope: dict, info: Info, headers: dict) -> str:
    client = scope.get("client")
    return str(client[0]) if client and client[0] else "-"


def _path(scope: dict, info: Info, headers: dict) -> str:
    return info[2].partition("?")[0] or "-"


def _query(scope: dict, info: Info, headers: dict) -> str:
    return info[2].partition("?")[2] or "-"


def _request_line(scope: dict, info: Info, headers: dict) -> str:
    return f"{info[1]} {info[2]} HTTP/{info[3]}"


# name -> (getter, sample value used to validate the format at start-up)
ATOMS: dict[str, tuple[_Atom, Any]] = {
    "client": (_client, "127.0.0.1:5000"),
    "client_host": (_client_host, "127.0.0.1"),
    "method": (lambda s, i, h: i[1], "GET"),
    "path": (_path, "/"),
    "query": (_query, "-"),
    "full_path": (lambda s, i, h: i[2], "/"),
    "request_line": (_request_line, "GET / HTTP/1.1"),
    "http_version": (lambda s, i, h: i[3], "1.1"),
    "scheme": (lambda s, i, h: s.get("scheme") or "-", "http"),
    "host": (_header(b"host"), "-"),
    "status": (lambda s, i, h: i[4], 200),
    "bytes": (lambda s, i, h: i[5], 0),
    "duration": (lambda s, i, h: i[6], 0.0),
    "duration_ms": (lambda s, i, h: i[6] * 1000.0, 0.0),
    "user_agent": (_header(b"user-agent"), "-"),
    "referer": (_header(b"referer"), "-"),
    "request_id": (_header(b"x-request-id"), "-"),
}
_HEADER_ATOMS = {
    "host": b"host",
    "user_agent": b"user-agent",
    "referer": b"referer",
    "request_id": b"x-request-id",
}

_FIELD = re.compile(r"%(?:(%)|\(([^)]*)\))?")


class AccessLogFormat:
    """A compiled ``--access-log-format``; ``fmt(scope, info)`` renders one line.

    ``scope`` is the scope the app saw (so proxy headers apply) and ``info`` the tuple from
    ``HttpProtocol.access_info()``.  Only the atoms the format names are computed, and the
    request headers are scanned only when a header atom is used.
    """

    __slots__ = ("format", "_atoms", "_header_names")

    def __init__(self, fmt: str) -> None:
        if not isinstance(fmt, str):
            raise ValueError(f"{fmt!r} is not a string")
        names: list[str] = []
        for match in _FIELD.finditer(fmt):
            if match.group(1):
                continue  # %%
            name = match.group(2)
            if name is None:
                raise ValueError(
                    f"{fmt!r}: use named fields such as %(status)d, not positional ones"
                )
            if name not in ATOMS:
                known = ", ".join(sorted(ATOMS))
                raise ValueError(f"{fmt!r}: unknown atom {name!r} (known: {known})")
            if name not in names:
                names.append(name)
        try:
            fmt % {name: ATOMS[name][1] for name in names}
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"{fmt!r}: {exc}") from None
        self.format = fmt
        self._atoms = tuple((name, ATOMS[name][0]) for name in names)
        self._header_names = frozenset(_HEADER_ATOMS[n] for n in names if n in _HEADER_ATOMS)

    def __call__(self, scope: dict, info: Info) -> str:
        headers: dict[bytes, str] = {}
        wanted = self._header_names
        if wanted:
            for name, value in scope["headers"]:
                if name in wanted and name not in headers:
                    headers[name] = value.decode("latin-1")
        return self.format % {name: atom(scope, info, headers) for name, atom in self._atoms}

    def __repr__(self) -> str:
        return f"AccessLogFormat({self.format!r})"
