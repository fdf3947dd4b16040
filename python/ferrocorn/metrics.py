"""``--metrics``: request counters and a Prometheus text endpoint (``GET /metrics``, ``GET
/health``) on its own port, served by a tiny ``asyncio`` server inside the worker.

Collection happens in a dedicated task wrapper (``_asgi``), chosen at start-up only when
metrics are on, so the default request path pays nothing.

Per worker, for now: every worker process counts its own requests and serves its own
endpoint.  With several workers each one would need its own port, so the supervisor is meant to
own the endpoint instead: workers send ``RequestMetrics.snapshot()`` (plain, picklable data),
the supervisor combines them with ``merge_snapshots`` (or labels them by worker) and serves
``render``.  Until then, run ``--metrics`` with one worker.

Exposed families:

* ``ferrocorn_requests_total`` (counter): requests handed to the app (requests the core answers
  itself — 503 beyond ``--limit-concurrency``, 400/431 for malformed ones — are not counted);
* ``ferrocorn_responses_total{status="..."}`` (counter): those requests by response status,
  counted when the app call ends (``500`` when the app failed, ``0`` when the client went away
  before any response was sent);
* ``ferrocorn_requests_in_flight`` (gauge): app calls running now;
* ``ferrocorn_open_connections`` (gauge): open client connections (``Core.active_connections``);
* ``ferrocorn_websocket_connections`` (gauge): WebSocket sessions whose app call is running
  (they are not counted as requests, and their lifetimes stay out of the histogram);
* ``ferrocorn_request_duration_seconds`` (histogram): from request arrival to the end of the
  app call.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from bisect import bisect_left
from typing import Any, Callable

__all__ = [
    "BUCKETS",
    "MetricsServer",
    "RequestMetrics",
    "bind_metrics_socket",
    "merge_snapshots",
    "render",
]

logger = logging.getLogger("ferrocorn.error")

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class RequestMetrics:
    """Counters one worker's task wrapper updates; touched only on the event-loop thread.

    The wrapper does ``metrics.started += 1`` before the app call and ``observe(status,
    seconds)`` after it, so ``in flight = started - finished``.
    """

    __slots__ = ("started", "responses", "bucket_counts", "duration_sum", "websockets")

    def __init__(self) -> None:
        self.started = 0
        self.websockets = 0  # WebSocket app calls running (not counted as requests)
        self.responses: dict[int, int] = {}
        # Non-cumulative counts per bucket; the last slot is +Inf.
        self.bucket_counts = [0] * (len(BUCKETS) + 1)
        self.duration_sum = 0.0

    def observe(self, status: int, seconds: float) -> None:
        responses = self.responses
        responses[status] = responses.get(status, 0) + 1
        # bisect_left: a duration equal to a bound belongs to that bucket (le = "<=").
        self.bucket_counts[bisect_left(BUCKETS, seconds)] += 1
        self.duration_sum += seconds

    def snapshot(self, open_connections: int = 0) -> dict[str, Any]:
        """Plain data (ints, floats, lists, dicts): what a worker would send a supervisor."""
        finished = sum(self.bucket_counts)
        return {
            "requests_total": self.started,
            "requests_in_flight": max(0, self.started - finished),
            "responses": dict(self.responses),
            "open_connections": open_connections,
            "buckets": list(self.bucket_counts),
            "duration_sum": self.duration_sum,
            "websocket_connections": self.websockets,
        }


def merge_snapshots(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum several workers' snapshots into one (counters, gauges and histograms all add)."""
    merged: dict[str, Any] = {
        "requests_total": 0,
        "requests_in_flight": 0,
        "responses": {},
        "open_connections": 0,
        "buckets": [0] * (len(BUCKETS) + 1),
        "duration_sum": 0.0,
        "websocket_connections": 0,
    }
    keys = (
        "requests_total",
        "requests_in_flight",
        "open_connections",
        "duration_sum",
        "websocket_connections",
    )
    for snap in snapshots:
        for key in keys:
            merged[key] += snap[key]
        for status, count in snap["responses"].items():
            merged["responses"][status] = merged["responses"].get(status, 0) + count
        merged["buckets"] = [a + b for a, b in zip(merged["buckets"], snap["buckets"])]
    return merged


def _bound(value: float) -> str:
    return repr(float(value))  # 0.005 -> "0.005", 1 -> "1.0"


def render(snapshot: dict[str, Any]) -> str:
    """The Prometheus text exposition format (0.0.4) of a snapshot."""
    lines = [
        "# HELP ferrocorn_requests_total Requests handed to the application.",
        "# TYPE ferrocorn_requests_total counter",
        f"ferrocorn_requests_total {snapshot['requests_total']}",
        "# HELP ferrocorn_responses_total Finished requests by response status code.",
        "# TYPE ferrocorn_responses_total counter",
    ]
    for status in sorted(snapshot["responses"]):
        lines.append(
            f'ferrocorn_responses_total{{status="{status}"}} {snapshot["responses"][status]}'
        )
    lines += [
        "# HELP ferrocorn_requests_in_flight Application calls in progress.",
        "# TYPE ferrocorn_requests_in_flight gauge",
        f"ferrocorn_requests_in_flight {snapshot['requests_in_flight']}",
        "# HELP ferrocorn_open_connections Open client connections.",
        "# TYPE ferrocorn_open_connections gauge",
        f"ferrocorn_open_connections {snapshot['open_connections']}",
        "# HELP ferrocorn_websocket_connections WebSocket sessions the application is serving.",
        "# TYPE ferrocorn_websocket_connections gauge",
        f"ferrocorn_websocket_connections {snapshot['websocket_connections']}",
        "# HELP ferrocorn_request_duration_seconds Time from request arrival to the end of "
        "the application call.",
        "# TYPE ferrocorn_request_duration_seconds histogram",
    ]
    cumulative = 0
    for bound, count in zip((*map(_bound, BUCKETS), "+Inf"), snapshot["buckets"]):
        cumulative += count
        lines.append(f'ferrocorn_request_duration_seconds_bucket{{le="{bound}"}} {cumulative}')
    lines += [
        f"ferrocorn_request_duration_seconds_sum {snapshot['duration_sum']!r}",
        f"ferrocorn_request_duration_seconds_count {cumulative}",
    ]
    return "\n".join(lines) + "\n"


def bind_metrics_socket(host: str, port: int) -> socket.socket:
    """The endpoint's listening socket; OSError when it cannot be bound."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    infos = socket.getaddrinfo(host or None, port, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    af, kind, proto, _, address = infos[0]
    sock = socket.socket(af, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_HEAD_TIMEOUT = 10.0


class MetricsServer:
    """Answers ``GET /metrics`` and ``GET /health`` (``200 ok``); one request per connection."""

    def __init__(
        self,
        metrics: RequestMetrics,
        sock: socket.socket,
        open_connections: Callable[[], int] = lambda: 0,
    ) -> None:
        self.metrics = metrics
        self.sock = sock
        self.open_connections = open_connections
        self._server: asyncio.AbstractServer | None = None

    @property
    def address(self) -> tuple[Any, ...]:
        return self.sock.getsockname()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, sock=self.sock)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        else:
            self.sock.close()

    def body(self) -> bytes:
        try:
            connections = self.open_connections()
        except Exception:  # the core is gone (shutting down)
            connections = 0
        return render(self.metrics.snapshot(connections)).encode()

    def respond(self, head: bytes) -> tuple[int, str, bytes, bool]:
        """(status, content type, body, send the body?) for a request head."""
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, "text/plain", b"bad request\n", True
        method, path = parts[0], parts[1].split(b"?", 1)[0]
        if path not in (b"/metrics", b"/health"):
            return 404, "text/plain", b"not found\n", method != b"HEAD"
        if method not in (b"GET", b"HEAD"):
            return 405, "text/plain", b"method not allowed\n", True
        if path == b"/health":
            return 200, "text/plain", b"ok", method == b"GET"
        return 200, CONTENT_TYPE, self.body(), method == b"GET"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
                return
            status, content_type, body, with_body = self.respond(head)
            head = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
                f"Content-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1"))
            if with_body:
                writer.write(body)
            await writer.drain()
        except OSError as exc:  # the scraper went away
            logger.debug("Metrics endpoint: %s", exc)
        finally:
            writer.close()
