"""Typed stub for the Rust extension ``ferrocorn._ferrocorn``.

The extension owns the network (tokio + hyper on background threads) and the per-request
hot path.  Python owns configuration, sockets, lifespan, signals and logging.
"""

import asyncio
import os
from typing import Any, Awaitable, Callable, Literal, final

from typing_extensions import Self

__all__ = [
    "__version__",
    "LINUX_FAST_PATHS",
    "ClientDisconnected",
    "Core",
    "ProbeServer",
    "HttpProtocol",
    "WebSocketProtocol",
    "Ready",
    "AppRun",
    "promote_request_task",
    "TlsConfig",
]

__version__: str
# Linux-only calls in use (eventfd, preadv2, sendfile, /proc, SO_REUSEPORT balancing); false
# on other systems and in a Linux build with the ``portable`` feature.
LINUX_FAST_PATHS: bool

class ClientDisconnected(OSError):
    """Raised by ``send()`` once the client has gone away or the response is complete."""

@final
class HttpProtocol:
    """One HTTP request/response exchange; created by the core, never by users."""

    def receive(self) -> Awaitable[dict[str, Any]]: ...
    def send(self, message: dict[str, Any]) -> Awaitable[None]:
        """``http.response.start`` / ``http.response.body`` / ``http.response.trailers``.

        ``trailers: True`` on the start (a bool, else ``TypeError``) makes the response end
        with ``http.response.trailers`` (``more_trailers`` accumulates) instead of the last
        body message.  Trailers go out only on HTTP/2, where the scope advertises
        ``extensions["http.response.trailers"]``; elsewhere (HTTP/1.x, HEAD, 204, 304) they are
        accepted and dropped.  ``RuntimeError`` for trailers that were not promised or that
        come before the last body message; ``ValueError`` for pseudo-headers and fields not
        allowed in trailers (content-length, transfer-encoding, host, connection, te, ...).
        An app that returns without the promised trailers gets its body ended without them
        (and a logged fault); one that raises instead gets its HTTP/2 stream reset.
        """
    def receive_ready(self) -> bytearray | bool | None:
        """``receive()``'s message taken apart, when it is ready now (PyPy builds only): the body of
        an ``http.request`` (its ``more_body`` is ``more_body_pending()``), False for
        ``http.disconnect``; None when it has to wait (then call ``receive``)."""
    def more_body_pending(self) -> bool:
        """``more_body`` of the body ``receive_ready`` just returned (PyPy builds only)."""
    def send_start_packed(
        self, status: int, headers: bytes, count: int, trailers: bool
    ) -> Awaitable[None] | None:
        """``send()`` of an ``http.response.start`` taken apart in Python (PyPy builds only):
        ``count`` header pairs packed ``name\\0value\\0...``.  None, with nothing changed,
        when the packing or a header does not check out: pass the message to ``send`` then."""
    def send_body_bytes(self, body: bytes | bytearray, more_body: bool) -> Awaitable[None]:
        """``send()`` of an ``http.response.body`` taken apart in Python (PyPy builds only)."""
    def complete(self) -> str | None:
        """Called when the app returned; a str names a protocol fault to log."""
    def fail(self, exc: BaseException) -> bool:
        """Called when the app raised; returns True when the error should be logged."""
    def access_info(self) -> tuple[str, str, str, str, int, int, float]:
        """(client "host:port", method, path with query, http_version, status, body bytes,
        seconds since the request arrived)."""
    def set_access_client(self, client: str) -> None:
        """The client the core's access line names (the proxy headers' rewrite); first call wins."""
    def waited(self) -> float:
        """Seconds from the request's arrival (before any admission queue) to now."""
    def timed_out(self) -> None:
        """``--timeout-request`` cancels the app: an unanswered request gets 503 + Retry-After."""

@final
class AppRun:
    """The task body of one request: ``asyncio.Task(AppRun(app, scope, proto))`` calls
    ``app(scope, proto.receive, proto.send)``, steps the result like a coroutine, and reports
    the return or the exception to ``proto`` (logging faults and tracebacks on
    ``ferrocorn.error``).  Registered as a ``collections.abc.Coroutine``; ``await`` works."""

    def __new__(cls, app: Any, scope: dict[str, Any], proto: Any) -> Self:
        """``proto``: the request's ``HttpProtocol``/``WebSocketProtocol`` (or any object with
        their ``receive``, ``send``, ``complete`` and ``fail``)."""
    def __await__(self) -> AppRun: ...
    def __next__(self) -> Any: ...
    def send(self, value: Any) -> Any: ...
    def throw(self, typ: Any, val: Any = ..., tb: Any = ...) -> Any: ...
    def close(self) -> None: ...
    @property
    def cr_frame(self) -> Any: ...
    @property
    def cr_await(self) -> Any: ...
    @property
    def cr_code(self) -> Any: ...
    @property
    def cr_running(self) -> bool: ...
    @property
    def __qualname__(self) -> Any:  # type: ignore[override]
        """The app's coroutine's ``__qualname__`` (introspection sees the app, not the
        wrapper)."""

@final
class Ready:
    """An awaitable that is already complete: ``await`` gives its value (None when it has
    none) without a loop iteration; created by the core, never by users."""

    def __await__(self) -> Ready: ...
    def __iter__(self) -> Ready: ...
    def __next__(self) -> Any:
        """Finishes at once: ``StopIteration`` carries the value."""
    def send(self, _value: Any) -> Any: ...
    def throw(self, exc: Any, _value: Any = None, _tb: Any = None) -> None: ...
    def close(self) -> None: ...

def promote_request_task(task: asyncio.Task[Any]) -> None:
    """Set up ``task`` as a real ``asyncio.Task`` if it is the not yet initialised task of
    the request whose first step is running (``_request_task.RequestTask`` calls it)."""

@final
class TlsConfig:
    """A loaded TLS configuration (rustls).  The constructor reads and checks every file and
    raises ``ValueError`` with a one-line message for a missing file, a key that does not
    match the certificate, a wrong password or an unknown cipher suite name."""

    def __new__(
        cls,
        certfile: str | os.PathLike[str],
        keyfile: str | os.PathLike[str] | None = None,
        *,
        password: str | None = None,
        ca_certs: str | os.PathLike[str] | None = None,
        cert_reqs: Literal["none", "optional", "required"] = "none",
        min_version: Literal["1.2", "1.3"] = "1.2",
        ciphers: str | None = None,
        handshake_timeout: float | None = ...,  # 10.0
    ) -> Self: ...
    @property
    def server_cert(self) -> str:
        """The server certificate, PEM-encoded."""

@final
class WebSocketProtocol:
    """One WebSocket connection (ASGI websocket scope); created by the core."""

    def receive(self) -> Awaitable[dict[str, Any]]: ...
    def send(self, message: dict[str, Any]) -> Awaitable[None]: ...
    def complete(self) -> str | None: ...
    def fail(self, exc: BaseException) -> bool: ...
    def access_info(self) -> tuple[str, str, str, str, int, int, float]: ...
    def set_access_client(self, client: str) -> None: ...

@final
class ProbeServer:
    """The ``--health-port`` probes (``GET /livez``, ``GET /readyz``), served by Rust on a
    thread of their own (``probes.py``)."""

    def __new__(cls, fd: int) -> Self:
        """Serve a bound, listening TCP socket (taking ownership of ``fd``), not ready yet."""
    def set_ready(self, ready: bool) -> None:
        """What ``/readyz`` answers from now on: 200 when true, else 503."""
    def is_ready(self) -> bool: ...
    def close(self) -> None:
        """Stop serving; the socket closes."""

@final
class Core:
    """The Rust server core of one worker process."""

    def __new__(
        cls,
        app: Callable[..., Awaitable[None]],
        event_loop: asyncio.AbstractEventLoop,
        runner: Callable[[Any, dict[str, Any], HttpProtocol], Awaitable[None]],
        config: Any,
        *,
        forwarded_app: Callable[..., Awaitable[None]] | None = None,
        forwarded_runner: Callable[[Any, dict[str, Any], Any], Awaitable[None]] | None = None,
        state: dict[str, Any] | None = None,
        access_log: tuple[int, bool, bool] | None = None,
        http3_port: int | None = None,
    ) -> Self:
        """``config``: a validated ``ferrocorn.Config``; the core reads its attributes
        (src/core/options.rs).  ``access_log``: (fd, colour, json) when the core writes the default
        access line to that descriptor itself (``_access_fastpath.py``).  ``http3_port``: the
        UDP port of ``--http3``, which TCP responses advertise in ``Alt-Svc``."""
    def listen_tcp(self, fd: int) -> None:
        """Serve a bound, listening TCP socket; the core takes ownership of ``fd``."""
    def listen_udp(self, fd: int) -> None:
        """Serve HTTP/3 (QUIC) on a bound UDP socket; the core takes ownership of ``fd``."""
    def listen_unix(self, fd: int, path: str) -> None:
        """Serve a bound, listening Unix socket; the core takes ownership of ``fd``."""
    def adopt_tcp(self, fd: int) -> int:
        """While serving: accept on the listening TCP socket ``fd`` too (the core takes
        ownership) until ``release_listener`` with the id returned, or the stop."""
    def release_listener(self, listener_id: int) -> bool:
        """Stop accepting on an adopted listener and close its descriptor here; False when
        ``listener_id`` is unknown."""
    def start(self) -> None:
        """Start accepting and register the wake-up eventfd on the loop."""
    def drain(self) -> None:
        """The eventfd reader callback: dispatch everything tokio queued."""
    def stop_accepting(self) -> None: ...
    def shutdown(self) -> None:
        """Graceful: close idle connections, let in-flight requests finish, then close."""
    def active_connections(self) -> int: ...
    def app_task_name(self) -> str:
        """The name of the asyncio task of every app call this core starts ("ferrocorn.app"
        for the process's first core, "ferrocorn.app-<n>" for the n-th): what a graceful
        shutdown waits for."""
    def reload_tls(self, tls: TlsConfig) -> None:
        """New TLS handshakes present ``tls`` from now on; established connections keep
        theirs.  ``ValueError`` when the server does not serve TLS."""
    def server_counts(self) -> dict[str, Any]:
        """``requests_queued``, ``responses_503`` (by reason) and ``tls_handshake_failures``."""
    def total_requests(self) -> int:
        """Requests received since start (for ``limit_max_requests``)."""
    def release_memory(self) -> None:
        """Hand the calling (loop) thread's freed memory back to the system."""
    def close(self) -> None:
        """Force-close every connection, unregister from the loop and stop the runtime;
        every access line the core buffered is written before it returns."""
    def on_static_served(
        self, callback: Callable[[str, str, str, str, int, int, float, bool], None]
    ) -> None:
        """From now on each response of the static route is told to ``callback(client,
        method, path, http_version, status, bytes, seconds, logged)`` (``logged``: the core
        wrote its access line)."""
    def divert_access_log(self, callback: Callable[[str, str, str, str, int], None]) -> None:
        """From now on the core's access lines go to ``callback(client, method, path,
        http_version, status)`` (the logging configuration changed while serving)."""
