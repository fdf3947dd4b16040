"""``--log-format json``: one JSON object per line for the error and access records.

Every record has ``timestamp`` (UTC, ISO 8601 with milliseconds: ``2026-01-02T03:04:05.678Z``),
``level``, ``logger`` and ``message``; a traceback comes as ``exc_info`` (a string).  An access
record adds the fields of ``ACCESS_FIELDS``, which the runner passes as ``extra={"access": ...}``
(Python's path) — or the core writes the same object itself (src/access_log/json.rs) when the
default configuration is in effect (_access_fastpath.py).  Output is compact
(``separators=(",", ":")``) and ASCII (``ensure_ascii``), so one record is always one line.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

__all__ = [
    "ACCESS_FIELDS",
    "JsonFormatter",
    "access_fields",
    "timestamp",
    "trace_id",
]

# The access record's fields after the four every record has, in the order they are written.
ACCESS_FIELDS = (
    "client",
    "method",
    "path",
    "query",
    "http_version",
    "status",
    "bytes",
    "duration",
    "user_agent",
    "request_id",
    "trace_id",
)

_HEX = frozenset("0123456789abcdef")


def timestamp(created: float) -> str:
    """``created`` (seconds since the epoch) as the records show it, in UTC."""
    whole = int(created)
    millis = int((created - whole) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def trace_id(traceparent: str | None) -> str | None:
    """The 32-hex trace-id of a valid W3C ``traceparent`` header (version 00 rules, any
    version's first four fields), else None."""
    if traceparent is None:
        return None
    parts = traceparent.strip().split("-")
    if len(parts) < 4:
        return None
    version, trace, parent, flags = parts[0], parts[1], parts[2], parts[3]
    if len(version) != 2 or not _HEX.issuperset(version) or version == "ff":
        return None
    if version == "00" and len(parts) != 4:
        return None
    if len(trace) != 32 or not _HEX.issuperset(trace) or trace == "0" * 32:
        return None
    if len(parent) != 16 or not _HEX.issuperset(parent) or parent == "0" * 16:
        return None
    if len(flags) != 2 or not _HEX.issuperset(flags):
        return None
    return trace


def access_fields(scope: dict, info: tuple, client: str) -> dict[str, Any]:
    """The access record's fields for one app call: ``scope`` as the app saw it, ``info`` the
    tuple of ``HttpProtocol.access_info()``, ``client`` the "host:port" the line names."""
    user_agent = request_id = traceparent = None
    for name, value in scope.get("headers", ()):
        if name == b"user-agent":
            if user_agent is None:
                user_agent = value.decode("latin-1")
        elif name == b"x-request-id":
            if request_id is None:
                request_id = value.decode("latin-1")
        elif name == b"traceparent" and traceparent is None:
            traceparent = value.decode("latin-1")
    path, _, query = info[2].partition("?")
    return {
        "client": client,
        "method": info[1],
        "path": path,
        "query": query,
        "http_version": info[3],
        "status": info[4],
        "bytes": info[5],
        "duration": info[6],
        "user_agent": user_agent,
        "request_id": request_id,
        "trace_id": trace_id(traceparent),
    }


class JsonFormatter(logging.Formatter):
    """Formats a record as one compact JSON object (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            entry.update(access)
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, separators=(",", ":"), default=str)
