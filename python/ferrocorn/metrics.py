"""``--metrics``: request counters and a Prometheus text endpoint (``GET /metrics``, ``GET
/health``) on its own port.

Collection happens in a dedicated task wrapper (``_asgi``), chosen at start-up only when
metrics are on, so the default request path pays nothing.

One process (no supervisor): a tiny ``asyncio`` server inside the server process serves the
endpoint.  With a supervisor (``--workers N`` > 1, ``--reload``), the supervisor serves it
(``supervisor_metrics.py``) and asks each worker for its ``RequestMetrics.snapshot()`` over a
private socket pair (``MetricsChannel``, the worker's side): workers use no port.

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
  app call;
* ``ferrocorn_request_wait_seconds`` (histogram): from request arrival (as hyper hands it
  over) to the app call: the wait in the admission queue, a small body read up front, and the
  hand-off to the event loop;
* ``ferrocorn_requests_queued`` (gauge): requests waiting in the admission queue
  (``--limit-concurrency-queue``);
* ``ferrocorn_responses_503_total{reason}`` (counter): the 503s the core answers itself,
  ``reason`` one of ``concurrency`` (``--limit-concurrency`` without a queue), ``queue_full``,
  ``queue_timeout`` (``--timeout-queue``), ``draining`` (waiting when the graceful shutdown
  began), ``websockets`` (``--limit-websockets``); kept in the core, read on each scrape;
* ``ferrocorn_requests_timed_out_total`` (counter): app calls ``--timeout-request`` cancelled;
* ``ferrocorn_tls_handshake_failures_total`` (counter): TLS handshakes that failed or took
  longer than ``--ssl-handshake-timeout``;
* ``ferrocorn_event_loop_lag_seconds`` (histogram): every ``LAG_INTERVAL`` a callback due at
  a known time records how late the loop ran it (``LoopLag``).

With a supervisor these are the sums over all workers (plus what workers that are gone had
counted), and each family also comes per worker as ``ferrocorn_worker_<name>{worker, pid}``;
see ``supervisor_metrics.py`` for those and the supervisor's own families.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from bisect import bisect_left
from typing import Any, Callable

from .config import ConfigError

__all__ = [
    "BUCKETS",
    "LAG_BUCKETS",
    "LoopLag",
    "MetricsChannel",
    "MetricsServer",
    "RequestMetrics",
    "bind_metrics_socket",
    "counters_of",
    "decode_snapshot",
    "empty_snapshot",
    "log_endpoint",
    "encode_snapshot",
    "merge_snapshots",
    "open_metrics_socket",
    "render",
    "render_request_families",
    "UNAVAILABLE_REASONS",
    "WAIT_BUCKETS",
]

logger = logging.getLogger("ferrocorn.error")

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# The wait before the app call: short unless requests queue (--limit-concurrency-queue).
WAIT_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# How late the event loop runs a callback that was due.
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
LAG_INTERVAL = 0.5  # seconds between two event-loop lag samples
# The core's own 503s, by reason (src/server/admission.rs `Unavailable`).
UNAVAILABLE_REASONS = ("concurrency", "queue_full", "queue_timeout", "draining", "websockets")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Histograms: snapshot key -> (family, bounds, help).
HISTOGRAMS = {
    "buckets": (
        "request_duration_seconds",
        BUCKETS,
        "Time from request arrival to the end of the application call",
    ),
    "wait_buckets": (
        "request_wait_seconds",
        WAIT_BUCKETS,
        "Time from request arrival to the application call (the admission queue included)",
    ),
    "loop_lag_buckets": (
        "event_loop_lag_seconds",
        LAG_BUCKETS,
        f"How late the event loop ran a callback that was due (sampled every {LAG_INTERVAL}s)",
    ),
}


def _sum_key(buckets_key: str) -> str:
    """A histogram's sum in a snapshot: ``buckets`` -> ``duration_sum``, ``x_buckets`` ->
    ``x_sum``."""
    return "duration_sum" if buckets_key == "buckets" else buckets_key[: -len("buckets")] + "sum"


class RequestMetrics:
    """Counters one worker's task wrapper updates; touched only on the event-loop thread.

    The wrapper does ``metrics.started += 1`` and ``observe_wait(seconds)`` before the app
    call and ``observe(status, seconds)`` after it, so ``in flight = started - finished``.
    """

    __slots__ = (
        "started",
        "responses",
        "bucket_counts",
        "duration_sum",
        "websockets",
        "timed_out",
        "wait_counts",
        "wait_sum",
        "lag_counts",
        "lag_sum",
    )

    def __init__(self) -> None:
        self.started = 0
        self.websockets = 0  # WebSocket app calls running (not counted as requests)
        self.timed_out = 0  # app calls cancelled by --timeout-request
        self.responses: dict[int, int] = {}
        # Non-cumulative counts per bucket; the last slot is +Inf.
        self.bucket_counts = [0] * (len(BUCKETS) + 1)
        self.duration_sum = 0.0
        self.wait_counts = [0] * (len(WAIT_BUCKETS) + 1)
        self.wait_sum = 0.0
        self.lag_counts = [0] * (len(LAG_BUCKETS) + 1)
        self.lag_sum = 0.0

    def observe(self, status: int, seconds: float) -> None:
        responses = self.responses
        responses[status] = responses.get(status, 0) + 1
        # bisect_left: a duration equal to a bound belongs to that bucket (le = "<=").
        self.bucket_counts[bisect_left(BUCKETS, seconds)] += 1
        self.duration_sum += seconds

    def observe_wait(self, seconds: float) -> None:
        self.wait_counts[bisect_left(WAIT_BUCKETS, seconds)] += 1
        self.wait_sum += seconds

    def observe_lag(self, seconds: float) -> None:
        self.lag_counts[bisect_left(LAG_BUCKETS, seconds)] += 1
        self.lag_sum += seconds

    def snapshot(
        self, open_connections: int = 0, server: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Plain data (ints, floats, lists, dicts): what a worker would send a supervisor.
        ``server``: the core's counts (``Core.server_counts()``), None without a core."""
        finished = sum(self.bucket_counts)
        snap = empty_snapshot()
        snap.update(
            requests_total=self.started,
            requests_in_flight=max(0, self.started - finished),
            responses=dict(self.responses),
            open_connections=open_connections,
            buckets=list(self.bucket_counts),
            duration_sum=self.duration_sum,
            websocket_connections=self.websockets,
            requests_timed_out=self.timed_out,
            wait_buckets=list(self.wait_counts),
            wait_sum=self.wait_sum,
            loop_lag_buckets=list(self.lag_counts),
            loop_lag_sum=self.lag_sum,
        )
        if server is not None:
            snap["requests_queued"] = int(server["requests_queued"])
            snap["tls_handshake_failures"] = int(server["tls_handshake_failures"])
            snap["responses_503"].update(server["responses_503"])
        return snap


class LoopLag:
    """Samples the event loop's lag every ``LAG_INTERVAL``: a callback due at a known time
    notes how late it runs (a loop busy with a long callback, or blocked, runs it late)."""

    def __init__(self, metrics: RequestMetrics, loop: asyncio.AbstractEventLoop) -> None:
        self.metrics = metrics
        self.loop = loop
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._due = self.loop.time() + LAG_INTERVAL
        self._handle = self.loop.call_at(self._due, self._sample)

    def _sample(self) -> None:
        # asyncio may run a timer up to its clock resolution early: that is no lag.
        self.metrics.observe_lag(max(0.0, self.loop.time() - self._due))
        self.start()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


# Besides the dicts (counters by label) and the histograms' bucket lists.
COUNTER_KEYS = (
    "requests_total",
    "duration_sum",
    "requests_timed_out",
    "tls_handshake_failures",
    "wait_sum",
    "loop_lag_sum",
)
GAUGE_KEYS = ("requests_in_flight", "open_connections", "websocket_connections", "requests_queued")
_INT_KEYS = ("requests_total", "requests_timed_out", "tls_handshake_failures") + GAUGE_KEYS
_FLOAT_KEYS = ("duration_sum", "wait_sum", "loop_lag_sum")


def empty_snapshot() -> dict[str, Any]:
    snap: dict[str, Any] = {key: 0 for key in _INT_KEYS}
    snap.update({key: 0.0 for key in _FLOAT_KEYS})
    snap["responses"] = {}
    snap["responses_503"] = {reason: 0 for reason in UNAVAILABLE_REASONS}
    for key, (_, bounds, _) in HISTOGRAMS.items():
        snap[key] = [0] * (len(bounds) + 1)
    return snap


def merge_snapshots(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum several workers' snapshots into one (counters, gauges and histograms all add)."""
    merged = empty_snapshot()
    for snap in snapshots:
        for key in COUNTER_KEYS + GAUGE_KEYS:
            merged[key] += snap[key]
        for dict_key in ("responses", "responses_503"):
            into = merged[dict_key]
            for label, count in snap[dict_key].items():
                into[label] = into.get(label, 0) + count
        for key in HISTOGRAMS:
            merged[key] = [a + b for a, b in zip(merged[key], snap[key])]
    return merged


def counters_of(snapshot: dict[str, Any]) -> dict[str, Any]:
    """``snapshot`` with its gauges zeroed: what a worker that is gone still contributes."""
    counters = dict(snapshot, responses=dict(snapshot["responses"]))
    counters["responses_503"] = dict(snapshot["responses_503"])
    for key in HISTOGRAMS:
        counters[key] = list(snapshot[key])
    for key in GAUGE_KEYS:
        counters[key] = 0
    return counters


def encode_snapshot(snapshot: dict[str, Any]) -> bytes:
    """A snapshot as one line of JSON (no newline) for the supervisor."""
    return json.dumps(snapshot, separators=(",", ":")).encode()


def decode_snapshot(data: bytes) -> dict[str, Any]:
    """The inverse of ``encode_snapshot``; ValueError when ``data`` is not a snapshot."""
    try:
        raw = json.loads(data)
        snap = {key: int(raw[key]) for key in _INT_KEYS}
        snap.update({key: float(raw[key]) for key in _FLOAT_KEYS})
        snap["responses"] = {int(k): int(v) for k, v in raw["responses"].items()}
        snap["responses_503"] = {str(k): int(v) for k, v in raw["responses_503"].items()}
        for key, (_, bounds, _) in HISTOGRAMS.items():
            snap[key] = [int(v) for v in raw[key]]
            if len(snap[key]) != len(bounds) + 1:
                raise ValueError("not a metrics snapshot: wrong number of buckets")
    except (KeyError, TypeError, AttributeError) as exc:  # JSON errors are ValueErrors
        raise ValueError(f"not a metrics snapshot: {exc!r}") from None
    return snap


def _bound(value: float) -> str:
    return repr(float(value))  # 0.005 -> "0.005", 1 -> "1.0"


def _labelled(name: str, *labels: str) -> str:
    """``name{a="1",b="2"}`` from the non-empty label texts (``a="1"``), or just ``name``."""
    text = ",".join(label for label in labels if label)
    return f"{name}{{{text}}}" if text else name


def render_request_families(
    series: list[tuple[str, dict[str, Any]]], prefix: str = "ferrocorn_", scope: str = ""
) -> list[str]:
    """The request families' lines, one sample set per ``(labels, snapshot)`` of ``series``
    (``labels``: ``""`` or text like ``worker="0",pid="12"``); ``scope`` ends the HELP texts
    (``", per worker"``)."""
    lines: list[str] = []

    def family(name: str, kind: str, text: str) -> str:
        full = prefix + name
        lines.extend((f"# HELP {full} {text}{scope}.", f"# TYPE {full} {kind}"))
        return full

    name = family("requests_total", "counter", "Requests handed to the application")
    for labels, snap in series:
        lines.append(f"{_labelled(name, labels)} {snap['requests_total']}")
    name = family("responses_total", "counter", "Finished requests by response status code")
    for labels, snap in series:
        for status in sorted(snap["responses"]):
            sample = _labelled(name, labels, f'status="{status}"')
            lines.append(f"{sample} {snap['responses'][status]}")
    for key, text in (
        ("requests_in_flight", "Application calls in progress"),
        ("open_connections", "Open client connections"),
        ("websocket_connections", "WebSocket sessions the application is serving"),
        ("requests_queued", "Requests waiting in the admission queue"),
    ):
        name = family(key, "gauge", text)
        for labels, snap in series:
            lines.append(f"{_labelled(name, labels)} {snap[key]}")
    for key, text in (
        ("requests_timed_out", "Application calls cancelled by --timeout-request"),
        ("tls_handshake_failures", "TLS handshakes that failed or timed out"),
    ):
        name = family(key + "_total", "counter", text)
        for labels, snap in series:
            lines.append(f"{_labelled(name, labels)} {snap[key]}")
    name = family(
        "responses_503_total", "counter", "503 responses the server made itself, by reason"
    )
    for labels, snap in series:
        for reason in sorted(snap["responses_503"]):
            sample = _labelled(name, labels, f'reason="{reason}"')
            lines.append(f"{sample} {snap['responses_503'][reason]}")
    for key, (base, bounds, text) in HISTOGRAMS.items():
        name = family(base, "histogram", text)
        for labels, snap in series:
            cumulative = 0
            for bound, count in zip((*map(_bound, bounds), "+Inf"), snap[key]):
                cumulative += count
                le = f'le="{bound}"'
                lines.append(f"{_labelled(name + '_bucket', labels, le)} {cumulative}")
            lines.append(f"{_labelled(name + '_sum', labels)} {snap[_sum_key(key)]!r}")
            lines.append(f"{_labelled(name + '_count', labels)} {cumulative}")
    return lines


def render(snapshot: dict[str, Any]) -> str:
    """The Prometheus text exposition format (0.0.4) of a snapshot."""
    return "\n".join(render_request_families([("", snapshot)])) + "\n"


def log_endpoint(address: tuple[Any, ...]) -> None:
    """The "Metrics on ..." line (tests wait for it to learn the port)."""
    host, port = address[:2]
    shown = f"[{host}]" if ":" in host else host
    logger.info("Metrics on http://%s:%d/metrics and /health", shown, port)


def open_metrics_socket(host: str, port: int) -> socket.socket:
    """``bind_metrics_socket`` with the one-line error of a configuration problem."""
    try:
        return bind_metrics_socket(host, port)
    except OSError as exc:
        raise ConfigError(f"Could not bind the metrics endpoint to {host}:{port}: {exc}") from exc


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


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}
_HEAD_TIMEOUT = 10.0


class MetricsServer:
    """Answers ``GET /metrics``, ``GET /health`` (``200 ok``) and the probes ``GET /livez`` and
    ``GET /readyz`` (``ready()``: 200, else 503); one request per connection. Served by the
    Python loop (or the supervisor's): ``--health-port`` has probes that never wait for it.

    The supervisor's endpoint (``supervisor_metrics``) overrides ``metrics_body`` and ``health``.
    """

    def __init__(
        self,
        metrics: RequestMetrics | None,
        sock: socket.socket,
        open_connections: Callable[[], int] = lambda: 0,
        server_counts: Callable[[], dict[str, Any] | None] = lambda: None,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.metrics = metrics
        self.sock = sock
        self.open_connections = open_connections
        self.server_counts = server_counts
        self.ready = ready
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
        assert self.metrics is not None
        try:
            connections, counts = self.open_connections(), self.server_counts()
        except Exception:  # the core is gone (shutting down)
            connections, counts = 0, None
        return render(self.metrics.snapshot(connections, counts)).encode()

    async def metrics_body(self) -> bytes:
        return self.body()

    def health(self) -> tuple[int, bytes]:
        """(status, body) of ``GET /health``: this process serves, or it would not answer."""
        return 200, b"ok"

    async def respond(self, head: bytes) -> tuple[int, str, bytes, bool]:
        """(status, content type, body, send the body?) for a request head."""
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, "text/plain", b"bad request\n", True
        method, path = parts[0], parts[1].split(b"?", 1)[0]
        if path not in (b"/metrics", b"/health", b"/livez", b"/readyz"):
            return 404, "text/plain", b"not found\n", method != b"HEAD"
        if method not in (b"GET", b"HEAD"):
            return 405, "text/plain", b"method not allowed\n", True
        if path == b"/health":
            status, body = self.health()
            return status, "text/plain", body, method == b"GET"
        if path == b"/livez":
            return 200, "text/plain", b"ok\n", method == b"GET"
        if path == b"/readyz":
            if self.ready():
                return 200, "text/plain", b"ready\n", method == b"GET"
            return 503, "text/plain", b"not ready\n", method == b"GET"
        return 200, CONTENT_TYPE, await self.metrics_body(), method == b"GET"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
                return
            status, content_type, body, with_body = await self.respond(head)
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


# The channel protocol (one line each way): the supervisor writes ``<id>\n`` (decimal digits), the
# worker answers ``<id> <snapshot JSON>\n``; once its core is closed it also writes
# ``final <snapshot JSON>\n``, unasked, so that what it counted since the last scrape is not lost.
FINAL_TAG = b"final"


class MetricsChannel:
    """A worker's side of its socket pair with the supervisor: answers snapshot requests."""

    def __init__(self, sock: socket.socket, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.sock = sock
        self.snapshot = snapshot
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.sock.setblocking(False)
        reader, self._writer = await asyncio.open_connection(sock=self.sock)
        self._task = asyncio.ensure_future(self._answer(reader, self._writer))

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line.endswith(b"\n"):
                    return  # EOF: the supervisor is gone
                tag = line.strip()
                if tag.isdigit():
                    writer.write(tag + b" " + encode_snapshot(self.snapshot()) + b"\n")
                    await writer.drain()
        except (OSError, ValueError) as exc:  # ValueError: an overlong line (not ours)
            logger.debug("Metrics channel: %s", exc)

    async def send_final(self, timeout: float = 1.0) -> None:
        """Tell the supervisor the last counts (after the core closed: they are final)."""
        writer = self._writer
        if writer is None:
            return
        try:
            writer.write(FINAL_TAG + b" " + encode_snapshot(self.snapshot()) + b"\n")
            await asyncio.wait_for(writer.drain(), timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            logger.debug("Metrics channel: %s", exc)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        else:
            self.sock.close()
