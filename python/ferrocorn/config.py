"""Server configuration: validated options, app loading, the listening socket and logging.

``Config`` holds no running state.  Constructing one validates every option (raising
``ConfigError`` with a one-line message), loads ``env_file`` and configures logging, like
uvicorn does; ``load()`` imports the app and ``bind_socket()`` creates the listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib.util
import inspect
import io
import json
import logging
import logging.config
import os
import platform
import re
import socket
import stat
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from .accesslog import DEFAULT_ACCESS_LOG_FORMAT, AccessLogFormat
from .importer import ImportFromStringError, import_from_string
from .jsonlog import JsonFormatter
from .path_policy import UNSET, PathPolicy, parse_policies
from .proxy_headers import TrustedHosts
from .static_routes import StaticRoute, parse_routes

__all__ = [
    "HTTP_MODES",
    "SENDFILE_MODES",
    "INTERFACES",
    "LIFESPAN_MODES",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "LOOP_CHOICES",
    "SSL_CERT_REQS",
    "SSL_MIN_VERSIONS",
    "TRACE_LOG_LEVEL",
    "Config",
    "ConfigError",
    "DefaultFormatter",
    "socket_kind",
]

TRACE_LOG_LEVEL = 5
logging.addLevelName(TRACE_LOG_LEVEL, "TRACE")

LOG_LEVELS: dict[str, int] = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": TRACE_LOG_LEVEL,
}
LOG_FORMATS = ("text", "json")
LOOP_CHOICES = ("auto", "asyncio", "uvloop")
LIFESPAN_MODES = ("auto", "on", "off")
INTERFACES = ("auto", "asgi3", "asgi2")
HTTP_MODES = ("auto", "1", "2")
SENDFILE_MODES = ("auto", "on", "off")
SSL_CERT_REQS = ("none", "optional", "required")
SSL_MIN_VERSIONS = ("1.2", "1.3")
PROXY_PROTOCOL_MODES = ("off", "v1", "v2", "auto")
# HTTP/2 limits from RFC 9113 §6.5.2 (window sizes and frame sizes).
_H2_MAX_WINDOW = 2**31 - 1
_H2_MIN_FRAME, _H2_MAX_FRAME = 2**14, 2**24 - 1

# Loggers owned by the server; the parent carries the stderr handler.
_LOGGER_NAMES = ("ferrocorn", "ferrocorn.error", "ferrocorn.access")

logger = logging.getLogger("ferrocorn.error")

# "Name:Value" or a (name, value) pair of str or latin-1 bytes.
HeaderItem = Any


class ConfigError(Exception):
    """An invalid option, or an app / socket that cannot be set up; ``str()`` is one line."""


# --------------------------------------------------------------------------- logging


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


class _StdStreamHandler(logging.StreamHandler):
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
        if isinstance(handler, _StdStreamHandler):
            target.removeHandler(handler)
    handler = _StdStreamHandler(stream_name)
    formatter: logging.Formatter
    if json_lines:
        formatter = JsonFormatter()
    else:
        formatter = DefaultFormatter(use_colours=_wants_colour(getattr(sys, stream_name)))
    handler.setFormatter(formatter)
    target.addHandler(handler)


# --------------------------------------------------------------------------- env files


def _parse_env(text: str) -> dict[str, str]:
    """A minimal ``.env`` reader, used when python-dotenv (full syntax) is not installed.

    Supports ``KEY=VALUE``, ``export KEY=VALUE``, ``#`` comments and single or double quotes.
    """
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        else:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


# --------------------------------------------------------------------------- ASGI apps


class _ASGI2Adapter:
    """Runs an ASGI2 app (``app(scope)`` returns ``instance(receive, send)``) as ASGI3."""

    __slots__ = ("app",)

    def __init__(self, app: Callable[[dict[str, Any]], Any]) -> None:
        self.app = app

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        instance = self.app(scope)
        await instance(receive, send)


def _is_coroutine_function(obj: Any) -> bool:
    if inspect.iscoroutinefunction(obj):
        return True
    # Before 3.12 code marked "async" by hand (asgiref, AsyncMock) set asyncio's private
    # marker instead of the inspect flag; asyncio.iscoroutinefunction is deprecated in 3.14.
    marker = getattr(asyncio.coroutines, "_is_coroutine", None)
    return marker is not None and getattr(obj, "_is_coroutine", None) is marker


def _looks_like_asgi3(app: Any) -> bool:
    """uvicorn's rule: an awaitable class, a coroutine function or an async ``__call__``."""
    if inspect.isclass(app):
        return hasattr(app, "__await__")
    if _is_coroutine_function(app):
        return True
    # The call syntax looks ``__call__`` up on the type, so that is the one to inspect.
    return _is_coroutine_function(type(app).__call__)


def _accepts(app: Any, count: int) -> bool | None:
    """Whether ``app`` can be called with ``count`` positional args; None when unknowable."""
    try:
        signature = inspect.signature(app)
    except (TypeError, ValueError):  # some builtins and extension types have none
        return None
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True


# --------------------------------------------------------------------------- sockets


def socket_kind(sock: socket.socket) -> str:
    """``"unix"`` for a Unix-domain socket, else ``"tcp"``: which ``Core.listen_*`` to call."""
    return "unix" if sock.family == getattr(socket, "AF_UNIX", None) else "tcp"


@contextlib.contextmanager
def _nonblocking_socket_objects() -> Iterator[None]:
    """Socket objects created inside start non-blocking, whatever the descriptor they wrap.

    O_NONBLOCK belongs to the open file description, which every process holding an inherited
    listener shares (the workers of a slot, all workers with ``--fd``/``--uds``). PyPy's socket
    constructor applies the default timeout to the descriptor, and with no default timeout that
    makes it *blocking* until our ``setblocking(False)`` a moment later. A sibling worker whose
    tokio accept() falls in that moment blocks its whole I/O thread in the kernel: its accepted
    connections go unanswered, and at shutdown it hangs. With a default timeout of 0, both
    CPython and PyPy set non-blocking (as the socket already is) instead."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(0.0)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _remove_stale_unix_socket(path: str) -> None:
    """Unlink a socket file nobody listens on; refuse to touch a live socket or other file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(errno.EEXIST, "path exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # left behind by a server that did not shut down cleanly
        return
    except socket.timeout:
        pass  # a listener whose backlog is full is still a live server
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, "another server is listening on this socket")


def _uvloop_installed() -> bool:
    """Checked without importing it, so a bad --loop fails before anything starts."""
    try:
        return importlib.util.find_spec("uvloop") is not None
    except ValueError:  # already imported without a __spec__ (a stand-in module)
        return True


def _module_installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ValueError:  # already imported without a __spec__
        return True


SD_LISTEN_FDS_START = 3  # sd_listen_fds(3): the first socket systemd passes


def _take_systemd_socket() -> int | None:
    """The socket systemd passed to this very process (socket activation), or None.

    Consumes ``LISTEN_PID``/``LISTEN_FDS``/``LISTEN_FDNAMES`` (like ``sd_listen_fds(1)``), so
    that child processes never take the descriptor for theirs.
    """
    try:
        pid = int(os.environ.get("LISTEN_PID", ""))
        count = int(os.environ.get("LISTEN_FDS", ""))
    except ValueError:
        return None
    if pid != os.getpid() or count < 1:
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    if count > 1:
        logger.warning("systemd passed %d sockets; serving only the first one (fd 3).", count)
    return SD_LISTEN_FDS_START


# --------------------------------------------------------------------------- validation


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        allowed = ", ".join(f'"{c}"' for c in choices)
        raise ConfigError(f"Invalid {name} {value!r}: expected one of {allowed}.")
    return str(value)


def _check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"Invalid {name} {value!r}: expected an integer.")
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and <= {maximum}" if maximum is not None else ""
        raise ConfigError(f"Invalid {name} {value}: must be >= {minimum}{upper}.")
    return value


def _check_optional_int(name: str, value: Any, minimum: int) -> int | None:
    return None if value is None else _check_int(name, value, minimum)


def _check_seconds(name: str, value: Any, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(f"Invalid {name} {value!r}: expected a number of seconds.")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"Invalid {name} {value}: must be {'>=' if allow_zero else '>'} 0.")
    return float(value)


def _check_http(value: Any) -> str:
    # uvicorn-style aliases: "1.1" and the ints 1 and 2.
    text = {"1.1": "1", 1: "1", 2: "2"}.get(value, value)
    return _check_choice("http", text, HTTP_MODES)


def _check_cert_reqs(value: Any) -> str:
    # The ssl module's ints (ssl.CERT_NONE/OPTIONAL/REQUIRED are 0/1/2), as uvicorn takes them.
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 3:
        return SSL_CERT_REQS[value]
    if isinstance(value, str):
        value = value.lower()
    return _check_choice("ssl_cert_reqs", value, SSL_CERT_REQS)


def _check_min_version(value: Any) -> str:
    text = str(value).lower().replace("tlsv", "").replace("_", ".")
    return _check_choice("ssl_min_version", text, SSL_MIN_VERSIONS)


def _optional_path(value: Any) -> str | None:
    return os.fspath(value) if value is not None else None


def _check_log_level(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        level = LOG_LEVELS.get(value.lower())
        if level is None:
            raise ConfigError(
                f"Invalid log_level {value!r}: expected one of {', '.join(LOG_LEVELS)}."
            )
        return level
    return _check_int("log_level", value, 0)


def _check_globs(name: str, value: Any) -> list[str]:
    patterns = [value] if isinstance(value, str) else list(value or [])
    if not all(isinstance(p, str) and p for p in patterns):
        raise ConfigError(f"Invalid {name} {value!r}: expected glob patterns (strings).")
    return patterns


def _check_reload_dirs(value: Any, reload: bool) -> list[str]:
    """Absolute directories to watch; the current directory when none are given."""
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    dirs = [os.path.abspath(os.fspath(d)) for d in value or []]
    if reload:
        for directory in dirs:
            if not os.path.isdir(directory):
                raise ConfigError(f'Invalid reload_dirs: "{directory}" is not a directory.')
    return dirs or [os.getcwd()]


def _check_permissions(value: Any) -> int | None:
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
    return _check_int("uds_permissions", value, 0, 0o7777)


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")  # RFC 9110 token
_HEADER_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # CTLs except HTAB


def _encode_header(item: Any) -> tuple[bytes, bytes]:
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


# --------------------------------------------------------------------------- Config


class Config:
    def __init__(
        self,
        app: str | Callable[..., Any],
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        uds: str | os.PathLike[str] | None = None,
        uds_permissions: int | str | None = None,
        fd: int | None = None,
        backlog: int = 2048,
        loop: str = "auto",
        lifespan: str = "auto",
        root_path: str = "",
        log_level: str | int | None = "info",
        log_config: dict[str, Any] | str | os.PathLike[str] | None = None,
        log_format: str = "text",
        access_log: bool = True,
        timeout_graceful_shutdown: float | None = 30.0,
        shutdown_delay: float = 0.0,
        timeout_request: float | None = None,
        timeout_keep_alive: float = 5,
        factory: bool = False,
        app_dir: str | None = "",
        server_header: bool = True,
        date_header: bool = True,
        headers: list[HeaderItem] | None = None,
        interface: str = "auto",
        env_file: str | os.PathLike[str] | None = None,
        limit_concurrency: int | None = None,
        limit_concurrency_queue: int | None = None,
        timeout_queue: float = 30.0,
        limit_websockets: int | None = None,
        limit_max_requests: int | None = None,
        limit_request_body: int | None = 1073741824,
        limit_request_line: int | None = 16384,
        timeout_request_body: float | None = 60.0,
        max_header_size: int = 65536,
        max_headers: int = 100,
        body_preread_limit: int = 65536,
        limit_response_buffer: int = 1048576,
        http2_connection_buffer: int = 4194304,
        header_read_timeout: float = 30.0,
        runtime_threads: int = 1,
        ssl_certfile: str | os.PathLike[str] | None = None,
        ssl_keyfile: str | os.PathLike[str] | None = None,
        ssl_keyfile_password: str | None = None,
        ssl_ca_certs: str | os.PathLike[str] | None = None,
        ssl_cert_reqs: str | int = "none",
        ssl_min_version: str = "1.2",
        ssl_ciphers: str | None = None,
        ssl_handshake_timeout: float = 10.0,
        ssl_reload_interval: float | None = None,
        proxy_protocol: str = "off",
        http: str = "auto",
        http2_max_concurrent_streams: int = 100,
        http2_initial_stream_window_size: int = 1048576,
        http2_initial_connection_window_size: int = 2097152,
        http2_max_frame_size: int = 16384,
        http2_max_header_list_size: int = 65536,
        http2_keep_alive_interval: float | None = None,
        http2_keep_alive_timeout: float = 20.0,
        http3: bool = False,
        http3_max_concurrent_streams: int | None = None,
        ws: str = "auto",
        ws_max_size: int = 16 * 1024 * 1024,
        ws_max_queue: int = 32,
        ws_ping_interval: float | None = 20.0,
        ws_ping_timeout: float | None = 20.0,
        ws_per_message_deflate: bool = True,
        proxy_headers: bool = True,
        forwarded_allow_ips: list[str] | str | None = None,
        access_log_format: str | None = None,
        metrics: bool = False,
        metrics_host: str = "127.0.0.1",
        metrics_port: int = 9090,
        health_host: str = "127.0.0.1",
        health_port: int | None = None,
        path_policy: list[str] | str | None = None,
        static_path_route: list[str] | str | None = None,
        static_path_mount: list[str] | str | None = None,
        static_path_expires: int = 86400,
        static_path_index: str | None = None,
        static_path_follow_symlinks: bool = False,
        static_path_cache_size: int = 32 * 1024 * 1024,
        sendfile: str = "auto",
        workers: int | None = None,
        limit_max_requests_jitter: int = 0,
        reload: bool = False,
        reload_dirs: list[str] | str | None = None,
        reload_includes: list[str] | str | None = None,
        reload_excludes: list[str] | str | None = None,
        reload_delay: float = 0.25,
    ) -> None:
        # The keyword arguments as given: the supervisor passes them on to its workers.
        self.init_kwargs: dict[str, Any] = {
            name: value for name, value in locals().items() if name not in ("self", "app")
        }
        if not isinstance(app, str) and not callable(app):
            raise ConfigError(f"Invalid app {app!r}: expected an ASGI app or an import string.")
        self.app = app
        self.host = host
        self.port = _check_int("port", port, 0, 65535)
        self.uds = os.fspath(uds) if uds is not None else None
        self.uds_permissions = _check_permissions(uds_permissions)
        self.fd = _check_optional_int("fd", fd, 0)
        if self.uds is not None and self.fd is not None:
            raise ConfigError("Options uds and fd are mutually exclusive.")
        self.backlog = _check_int("backlog", backlog, 1)
        self.loop = _check_choice("loop", loop, LOOP_CHOICES)
        if self.loop == "uvloop" and not _uvloop_installed():
            raise ConfigError('loop="uvloop" requires uvloop: pip install uvloop.')
        self.lifespan = _check_choice("lifespan", lifespan, LIFESPAN_MODES)
        if root_path and not root_path.startswith("/"):
            raise ConfigError(f"Invalid root_path {root_path!r}: it must start with '/'.")
        # The core builds path = root_path + path, so "/api/" would yield "/api//x".
        self.root_path = root_path.rstrip("/")
        self.log_level = log_level
        self.log_level_no = _check_log_level(log_level)
        self.log_config = log_config
        # "json": one JSON object per record (jsonlog.py); a log_config replaces it.
        self.log_format = _check_choice("log_format", log_format, LOG_FORMATS)
        self.access_log = bool(access_log)
        self.timeout_graceful_shutdown = (
            None
            if timeout_graceful_shutdown is None
            else _check_seconds("timeout_graceful_shutdown", timeout_graceful_shutdown)
        )
        # On SIGTERM/SIGINT: /readyz answers 503 at once, serving goes on this long, then
        # the drain (a load balancer's lame-duck period, long enough for its checks to see).
        self.shutdown_delay = _check_seconds("shutdown_delay", shutdown_delay)
        self.timeout_keep_alive = _check_seconds("timeout_keep_alive", timeout_keep_alive)
        # An HTTP app call still running this long after its request arrived is cancelled
        # (_asgi.py `_with_request_timeout`); None: never.
        self.timeout_request = (
            None
            if timeout_request is None
            else _check_seconds("timeout_request", timeout_request, allow_zero=False)
        )
        self.factory = bool(factory)
        self.app_dir = app_dir
        self.server_header = bool(server_header)
        self.date_header = bool(date_header)
        self.headers: list[HeaderItem] = list(headers or [])
        for item in self.headers:
            _encode_header(item)  # fail at construction, not at the first request
        self.interface = _check_choice("interface", interface, INTERFACES)
        self.env_file = os.fspath(env_file) if env_file is not None else None
        self.limit_concurrency = _check_optional_int("limit_concurrency", limit_concurrency, 1)
        # Requests beyond --limit-concurrency wait for a slot, first come first served, this
        # many at most and each at most timeout_queue seconds (src/server/admission.rs).
        self.limit_concurrency_queue = _check_optional_int(
            "limit_concurrency_queue", limit_concurrency_queue, 1
        )
        if self.limit_concurrency_queue is not None and self.limit_concurrency is None:
            raise ConfigError("--limit-concurrency-queue needs --limit-concurrency.")
        self.timeout_queue = _check_seconds("timeout_queue", timeout_queue, allow_zero=False)
        # WebSocket sessions open at once, counted apart from --limit-concurrency.
        self.limit_websockets = _check_optional_int("limit_websockets", limit_websockets, 1)
        self.limit_max_requests = _check_optional_int("limit_max_requests", limit_max_requests, 1)
        # These three: None or 0 turns the limit off.
        self.limit_request_body = _check_optional_int("limit_request_body", limit_request_body, 0)
        self.limit_request_line = _check_optional_int("limit_request_line", limit_request_line, 0)
        self.timeout_request_body = (
            None
            if timeout_request_body is None
            else _check_seconds("timeout_request_body", timeout_request_body)
        )
        self.max_header_size = _check_int("max_header_size", max_header_size, 1024)
        self.max_headers = _check_int("max_headers", max_headers, 1)
        self.body_preread_limit = _check_int("body_preread_limit", body_preread_limit, 0)
        # Response body bytes held in memory before send() waits (src/bridge/budget.rs).
        self.limit_response_buffer = _check_int(
            "limit_response_buffer", limit_response_buffer, 1024
        )
        self.http2_connection_buffer = _check_int(
            "http2_connection_buffer", http2_connection_buffer, 1024
        )
        self.header_read_timeout = _check_seconds(
            "header_read_timeout", header_read_timeout, allow_zero=False
        )
        self.runtime_threads = _check_int("runtime_threads", runtime_threads, 1)
        self.ws = _check_choice("ws", ws, ("auto", "none", "websockets", "wsproto"))
        self.ws_max_size = _check_int("ws_max_size", ws_max_size, 1)
        self.ws_max_queue = _check_int("ws_max_queue", ws_max_queue, 1)
        self.ws_ping_interval = _check_seconds("ws_ping_interval", ws_ping_interval or 0.0)
        self.ws_ping_timeout = _check_seconds("ws_ping_timeout", ws_ping_timeout or 0.0)
        self.ws_per_message_deflate = bool(ws_per_message_deflate)

        # Worker processes and reload (supervisor.py).
        self.workers = 1 if workers is None else _check_int("workers", workers, 1)
        self.limit_max_requests_jitter = _check_int(
            "limit_max_requests_jitter", limit_max_requests_jitter, 0
        )
        self.reload = bool(reload)
        self.reload_delay = _check_seconds("reload_delay", reload_delay)
        self.reload_includes = _check_globs("reload_includes", reload_includes)
        self.reload_excludes = _check_globs("reload_excludes", reload_excludes)
        self.reload_dirs = _check_reload_dirs(reload_dirs, self.reload)
        if (self.workers > 1 or self.reload) and not isinstance(app, str):
            raise ConfigError(
                "You must pass the application as an import string to enable 'reload' or 'workers'."
            )
        if self.reload and not _module_installed("watchfiles"):
            raise ConfigError(
                "reload=True requires watchfiles: pip install watchfiles "
                '(or "ferrocorn[standard]").'
            )

        # Proxies, access-log format, metrics (proxy_headers.py, accesslog.py, metrics.py).
        self.proxy_headers = bool(proxy_headers)
        if forwarded_allow_ips is None:  # uvicorn reads this variable too
            forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
        self.forwarded_allow_ips = forwarded_allow_ips
        try:
            self.trusted_hosts = TrustedHosts(forwarded_allow_ips)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"Invalid forwarded_allow_ips: {exc}.") from None
        # PROXY protocol headers, read by the core from trusted peers (src/proxy_protocol/).
        self.proxy_protocol = _check_choice("proxy_protocol", proxy_protocol, PROXY_PROTOCOL_MODES)
        self.trusted_peer_networks = self.trusted_hosts.socket_networks()
        self.access_log_format = access_log_format
        # None: the default line, printed by the fast path (_asgi.run_asgi_with_access_log).
        self.compiled_access_log_format: AccessLogFormat | None = None
        if access_log_format is not None and access_log_format != DEFAULT_ACCESS_LOG_FORMAT:
            try:
                self.compiled_access_log_format = AccessLogFormat(access_log_format)
            except ValueError as exc:
                raise ConfigError(f"Invalid access_log_format {exc}.") from None
        self.metrics = bool(metrics)
        self.metrics_host = metrics_host
        self.metrics_port = _check_int("metrics_port", metrics_port, 0, 65535)
        # Health probes served by Rust, off the Python loop (probes.py); None: off.
        self.health_host = health_host
        self.health_port = (
            None if health_port is None else _check_int("health_port", health_port, 0, 65535)
        )
        if self.metrics and self.health_port is not None and self.health_port != 0:
            if self.health_port == self.metrics_port and self.health_host == self.metrics_host:
                raise ConfigError(
                    f"Options health_port and metrics_port are both {self.health_port}: the "
                    "probes need a port of their own."
                )
        # Per path prefix overrides of the body limit and the body/request timeouts.
        self.path_policy = path_policy
        try:
            self.path_policies: list[PathPolicy] = parse_policies(path_policy)
        except ValueError as exc:
            raise ConfigError(f"Invalid path_policy {exc}.") from None
        # Files the core serves itself (static_routes.py, src/server/static_route.rs).
        self.static_path_route = static_path_route
        self.static_path_mount = static_path_mount
        try:
            self.static_routes: list[StaticRoute] = parse_routes(
                static_path_route, static_path_mount
            )
        except ValueError as exc:
            raise ConfigError(f"Invalid {exc}.") from None
        # 0: no Cache-Control header.
        self.static_path_expires = _check_int("static_path_expires", static_path_expires, 0)
        if static_path_index is not None and (
            not isinstance(static_path_index, str)
            or static_path_index in ("", ".", "..")
            or "/" in static_path_index
            or "\\" in static_path_index
            or "\0" in static_path_index
        ):
            raise ConfigError(
                f"Invalid static_path_index {static_path_index!r}: expected a file name."
            )
        self.static_path_index = static_path_index
        self.static_path_follow_symlinks = bool(static_path_follow_symlinks)
        self.static_path_cache_size = _check_int(
            "static_path_cache_size", static_path_cache_size, 0
        )
        self.sendfile = _check_choice("sendfile", sendfile, SENDFILE_MODES)

        self.ssl_certfile = _optional_path(ssl_certfile)
        self.ssl_keyfile = _optional_path(ssl_keyfile)
        self.ssl_keyfile_password = ssl_keyfile_password
        self.ssl_ca_certs = _optional_path(ssl_ca_certs)
        self.ssl_cert_reqs = _check_cert_reqs(ssl_cert_reqs)
        self.ssl_min_version = _check_min_version(ssl_min_version)
        self.ssl_ciphers = ssl_ciphers or None
        self.ssl_handshake_timeout = _check_seconds(
            "ssl_handshake_timeout", ssl_handshake_timeout, allow_zero=False
        )
        # Seconds between looks at the TLS files' modification times (tls_reload.py); None: never.
        self.ssl_reload_interval = (
            None
            if ssl_reload_interval is None
            else _check_seconds("ssl_reload_interval", ssl_reload_interval, allow_zero=False)
        )
        if self.ssl_certfile is None:
            for name in (
                "ssl_keyfile",
                "ssl_keyfile_password",
                "ssl_ca_certs",
                "ssl_ciphers",
                "ssl_reload_interval",
            ):
                if getattr(self, name) is not None:
                    raise ConfigError(f"Option {name} requires ssl_certfile.")
        elif self.ssl_cert_reqs != "none" and self.ssl_ca_certs is None:
            raise ConfigError(
                f'ssl_cert_reqs="{self.ssl_cert_reqs}" requires ssl_ca_certs (the CA that '
                "signs client certificates)."
            )
        self.http = _check_http(http)
        self.http2_max_concurrent_streams = _check_int(
            "http2_max_concurrent_streams", http2_max_concurrent_streams, 1, 2**32 - 1
        )
        self.http2_initial_stream_window_size = _check_int(
            "http2_initial_stream_window_size",
            http2_initial_stream_window_size,
            65535,
            _H2_MAX_WINDOW,
        )
        self.http2_initial_connection_window_size = _check_int(
            "http2_initial_connection_window_size",
            http2_initial_connection_window_size,
            65535,
            _H2_MAX_WINDOW,
        )
        self.http2_max_frame_size = _check_int(
            "http2_max_frame_size", http2_max_frame_size, _H2_MIN_FRAME, _H2_MAX_FRAME
        )
        self.http2_max_header_list_size = _check_int(
            "http2_max_header_list_size", http2_max_header_list_size, 1024, 2**32 - 1
        )
        self.http2_keep_alive_interval = (
            None
            if http2_keep_alive_interval is None
            else _check_seconds("http2_keep_alive_interval", http2_keep_alive_interval)
        ) or None  # 0 means off, like None
        self.http2_keep_alive_timeout = _check_seconds(
            "http2_keep_alive_timeout", http2_keep_alive_timeout, allow_zero=False
        )
        # HTTP/3 over QUIC on a UDP socket at the TCP socket's address (src/server/h3/).
        self.http3 = bool(http3)
        self.http3_max_concurrent_streams = (
            None
            if http3_max_concurrent_streams is None
            else _check_int(
                "http3_max_concurrent_streams", http3_max_concurrent_streams, 1, 2**32 - 1
            )
        )
        if self.http3 and self.ssl_certfile is None:
            raise ConfigError(
                "Option http3 requires ssl_certfile: QUIC is always encrypted (TLS 1.3), and "
                "browsers use HTTP/3 only with a certificate they trust."
            )
        if self.http3 and self.uds is not None:
            raise ConfigError("Option http3 needs a TCP address (host/port), not uds.")
        # The loaded rustls configuration (a ferrocorn._ferrocorn.TlsConfig); set by load().
        self.tls: Any = None

        self.loaded = False
        self.loaded_app: Callable[..., Awaitable[None]] | None = None
        self.asgi_version = "3.0"  # "2.0" once load() has wrapped an ASGI2 app

        self.configure_logging()
        if self.env_file is not None:
            self._load_env_file(self.env_file)

    @property
    def is_ssl(self) -> bool:
        return self.ssl_certfile is not None

    @property
    def error_log_debug(self) -> bool:
        """Whether ``ferrocorn.error`` logs debug lines (the core sends those only then)."""
        return logging.getLogger("ferrocorn.error").isEnabledFor(logging.DEBUG)

    # ------------------------------------------------------------------ headers

    @property
    def encoded_headers(self) -> list[tuple[bytes, bytes]]:
        """Extra response headers as (lowercase name, value) latin-1 bytes."""
        return [_encode_header(item) for item in self.headers]

    # ------------------------------------------------------------------ path policies

    @property
    def encoded_path_policies(self) -> list[tuple[str, int | None, float | None]]:
        """For the core: (prefix, body limit, body timeout) per policy, a key the policy
        leaves unset resolved to the global option (src/config.rs ``PathPolicy``)."""
        return [
            (
                p.prefix,
                self.limit_request_body if p.body is UNSET else p.body,
                self.timeout_request_body if p.body_timeout is UNSET else p.body_timeout,
            )
            for p in self.path_policies
        ]

    @property
    def path_timeouts(self) -> list[tuple[bytes, float | None]] | None:
        """For the runner: (raw prefix, request timeout) per policy, resolved like
        ``encoded_path_policies``; None when no policy sets ``timeout`` (no lookup then)."""
        if all(p.timeout is UNSET for p in self.path_policies):
            return None
        return [
            (p.prefix.encode("ascii"), self.timeout_request if p.timeout is UNSET else p.timeout)
            for p in self.path_policies
        ]

    @property
    def encoded_static_routes(self) -> list[tuple[str, str]]:
        """For the core: (prefix, real mount path) per static route (src/config.rs
        ``StaticRoute``)."""
        return [(r.prefix, r.mount) for r in self.static_routes]

    @property
    def report_static_responses(self) -> bool:
        """Whether the core tells the loop of each static response: for the access line and
        the request metrics."""
        return self.access_log or self.metrics

    # ------------------------------------------------------------------ env / logging

    def _load_env_file(self, path: str) -> None:
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f'Could not read env file "{path}": {exc}') from exc
        logger.info("Loading environment from '%s'", path)
        try:
            import dotenv
        except ImportError:
            # Like python-dotenv's default, the process environment wins over the file.
            for key, value in _parse_env(text).items():
                os.environ.setdefault(key, value)
        else:
            dotenv.load_dotenv(stream=io.StringIO(text))

    def configure_logging(self) -> None:
        """Set up ``ferrocorn``, ``ferrocorn.error`` and ``ferrocorn.access``; idempotent.

        Called by the constructor.  Without ``log_config`` the messages go to stderr and the
        access log to stdout, as text or (``log_format="json"``) JSON lines; ``log_config``
        (a dictConfig dict or a .json/.yaml/.ini path) replaces that default.  ``log_level``
        and ``access_log`` are applied last.
        """
        if self.log_config is None:
            json_lines = self.log_format == "json"
            parent = logging.getLogger("ferrocorn")
            _set_own_handler(parent, "stderr", json_lines)
            parent.propagate = False  # uvicorn-like: no duplicates through the root logger
            access = logging.getLogger("ferrocorn.access")
            _set_own_handler(access, "stdout", json_lines)
            access.propagate = False
            logging.getLogger("ferrocorn.error").propagate = True
            for name in _LOGGER_NAMES:
                logging.getLogger(name).setLevel(logging.INFO)
                logging.getLogger(name).disabled = False
        else:
            self._apply_log_config(self.log_config)

        if self.log_level_no is not None:
            for name in _LOGGER_NAMES:
                logging.getLogger(name).setLevel(self.log_level_no)
        if not self.access_log:
            access = logging.getLogger("ferrocorn.access")
            access.propagate = False
            # A disabled logger answers isEnabledFor() with False, so access lines are
            # neither built nor formatted.
            access.disabled = True

    @staticmethod
    def _apply_log_config(log_config: Any) -> None:
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

    # ------------------------------------------------------------------ app loading

    def _app_name(self) -> str:
        return f'"{self.app}"' if isinstance(self.app, str) else repr(self.app)

    def load(self) -> None:
        """Import (and with ``factory`` call) the app; set ``loaded_app`` to an ASGI3 callable."""
        if self.loaded:
            return
        if self.is_ssl and self.tls is None:
            self.tls = self._load_tls()
        if self.app_dir is not None and sys.path[:1] != [self.app_dir]:
            sys.path.insert(0, self.app_dir)

        app: Any = self.app
        if isinstance(app, str):
            try:
                app = import_from_string(app)
            except ImportFromStringError as exc:
                raise ConfigError(f"Error loading ASGI app. {exc}") from exc

        if self.factory:
            if not callable(app):
                raise ConfigError(
                    f"Error loading ASGI app factory. {self._app_name()} is not callable."
                )
            try:
                app = app()
            except Exception as exc:
                raise ConfigError(
                    f"Error loading ASGI app factory. {self._app_name()} raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if inspect.iscoroutine(app):
                app.close()  # never awaited: close it to avoid a RuntimeWarning
                raise ConfigError(
                    f"Error loading ASGI app factory. {self._app_name()} is a coroutine "
                    "function; the factory must return the app synchronously."
                )

        if not callable(app):
            raise ConfigError(f"Error loading ASGI app. {self._app_name()} is not callable.")

        interface = self.interface
        if interface == "auto":
            if _looks_like_asgi3(app):
                interface = "asgi3"
            elif _accepts(app, 1) is False and _accepts(app, 3) is True:
                # A plain function of (scope, receive, send) returning an awaitable (a
                # decorator without functools.wraps, say) cannot be ASGI2.
                interface = "asgi3"
            else:
                interface = "asgi2"
        arity = 3 if interface == "asgi3" else 1
        if _accepts(app, arity) is False:
            if _accepts(app, 0):
                hint = "it takes no arguments; if it is an application factory, use --factory"
            elif arity == 3:
                hint = "an ASGI3 app must accept (scope, receive, send)"
            else:
                hint = "an ASGI2 app must accept (scope)"
            raise ConfigError(f"Error loading ASGI app. {self._app_name()}: {hint}.")

        if interface == "asgi2":
            self.loaded_app = _ASGI2Adapter(app)
            self.asgi_version = "2.0"
        else:
            self.loaded_app = app
            self.asgi_version = "3.0"
        self.loaded = True

    def use_stand_in(self, app: Any) -> None:
        """Serve ``app`` (an ASGI3 callable) in place of the one that failed to load or start
        (``--reload`` workers: ``_stand_in.py``)."""
        self.loaded_app = app
        self.asgi_version = "3.0"
        self.loaded = True

    def _load_tls(self) -> Any:
        """Read the certificate, key and CA files now, so that a wrong path, a key that does
        not match or a wrong password stops the start-up with a one-line error."""
        # Imported here: it loads the Rust core, which validating options does not need.
        from ._ferrocorn import TlsConfig

        try:
            return TlsConfig(
                self.ssl_certfile,
                self.ssl_keyfile,
                password=self.ssl_keyfile_password,
                ca_certs=self.ssl_ca_certs,
                cert_reqs=self.ssl_cert_reqs,
                min_version=self.ssl_min_version,
                ciphers=self.ssl_ciphers,
                handshake_timeout=self.ssl_handshake_timeout,
            )
        except ValueError as exc:
            raise ConfigError(f"Invalid TLS configuration: {exc}") from exc

    # ------------------------------------------------------------------ event loop

    def _uvloop(self) -> Any:
        """The uvloop module when it should be used, else None."""
        if self.loop == "asyncio":
            return None
        if self.loop == "auto" and platform.python_implementation() != "CPython":
            return None  # uvloop targets CPython; on PyPy asyncio's loop is the safe choice
        try:
            import uvloop
        except ImportError as exc:
            if self.loop == "uvloop":
                raise ConfigError(f'loop="uvloop" requires uvloop: {exc}') from exc
            return None
        return uvloop

    def get_loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        """For ``asyncio.Runner(loop_factory=...)`` / ``asyncio.run(..., loop_factory=...)``."""
        uvloop = self._uvloop()
        return uvloop.new_event_loop if uvloop is not None else asyncio.new_event_loop

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return self.get_loop_factory()()

    def setup_event_loop_policy(self) -> None:
        """Install uvloop's policy when chosen (policies are deprecated from 3.14; prefer
        ``new_event_loop``/``get_loop_factory``)."""
        uvloop = self._uvloop()
        if uvloop is not None:
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

    # ------------------------------------------------------------------ sockets

    socket_kind = staticmethod(socket_kind)

    def bind_socket(self, reuse_port: bool = False) -> socket.socket:
        """A listening, non-blocking socket for ``fd``, ``uds`` or ``host``/``port``.

        Without ``fd`` or ``uds``, a socket passed by systemd (socket activation: ``LISTEN_FDS``
        and ``LISTEN_PID`` naming this process) replaces ``host``/``port``, and ``fd`` is set to
        it.  ``reuse_port``: bind ``host``/``port`` with ``SO_REUSEPORT`` (after checking that
        nothing else is bound there), so that more sockets can join it (the supervisor's
        per-worker sockets); it does not apply to the other kinds.
        """
        if self.fd is None and self.uds is None:
            activated = _take_systemd_socket()
            if activated is not None:
                logger.info(
                    "Using the socket passed by systemd (socket activation, fd %d).", activated
                )
                sock = self._socket_from_fd(activated)
                self.fd = activated  # from now on this configuration serves that socket
                return sock
        if self.fd is not None:
            return self._socket_from_fd(self.fd)
        if self.uds is not None:
            return self._bind_unix(self.uds)
        return self._bind_tcp(reuse_port)

    def _socket_from_fd(self, fd: int) -> socket.socket:
        try:
            # socket(fileno=...) asks the kernel for the family and type; detach so the
            # probe does not close the descriptor.
            with _nonblocking_socket_objects():
                probe = socket.socket(fileno=fd)
                try:
                    family, kind = probe.family, probe.type
                finally:
                    probe.detach()
                if kind != socket.SOCK_STREAM:
                    raise OSError(errno.EPROTOTYPE, "not a stream socket")
                sock = socket.fromfd(fd, family, socket.SOCK_STREAM)
            try:
                if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    sock.listen(self.backlog)
                sock.setblocking(False)
            except OSError:
                sock.close()
                raise
        except OSError as exc:
            raise ConfigError(f"Could not use file descriptor {fd}: {exc}") from exc
        return sock

    def bind_udp(self, address: tuple[Any, ...], reuse_port: bool = False) -> socket.socket:
        """The UDP socket ``--http3`` serves QUIC on, at ``address`` (the TCP socket's).

        ``reuse_port``: with ``SO_REUSEPORT``, as each worker binds its own (the kernel
        spreads clients over them by address, so a connection's packets reach one worker).
        """
        host, port = address[0], address[1]
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ConfigError(f"Could not bind HTTP/3 to UDP {host}:{port}: {exc}") from exc
        return sock

    def _bind_unix(self, path: str) -> socket.socket:
        try:
            _remove_stale_unix_socket(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(path)
                # chmod before listen(): until then connecting is refused, so no client
                # gets in under the umask-derived permissions.
                if self.uds_permissions is not None:
                    os.chmod(path, self.uds_permissions)
                sock.listen(self.backlog)
                sock.setblocking(False)
            except OSError:
                sock.close()
                raise
        except OSError as exc:
            raise ConfigError(f"Could not bind to unix:{path}: {exc}") from exc
        return sock

    def _bind_tcp(self, reuse_port: bool = False) -> socket.socket:
        host = self.host
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]  # accept the URL form "[::1]"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        shown = f"[{host}]:{self.port}" if family == socket.AF_INET6 else f"{host}:{self.port}"
        sock = None
        try:
            infos = socket.getaddrinfo(
                host or None, self.port, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
            )
            af, socktype, proto, _, sockaddr = infos[0]
            sock = socket.socket(af, socktype, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                # A plain bind first fails while anything is bound there, even a server using
                # SO_REUSEPORT itself, which a SO_REUSEPORT bind would silently join.
                sock.bind(sockaddr)
                sockaddr = sock.getsockname()  # port 0: the port the kernel chose
                sock.close()
                sock = socket.socket(af, socktype, proto)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(sockaddr)
            sock.listen(self.backlog)
            sock.setblocking(False)
        except OSError as exc:
            if sock is not None:
                sock.close()
            raise ConfigError(f"Could not bind to {shown}: {exc}") from exc
        return sock
