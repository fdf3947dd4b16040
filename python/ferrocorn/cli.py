"""The ``ferrocorn`` command line.

Every option is also read from ``FERROCORN_<OPTION>`` (``--timeout-keep-alive`` from
``FERROCORN_TIMEOUT_KEEP_ALIVE``) and the app from ``FERROCORN_APP``, and from the TOML file
of ``--config`` (config_file.py); flags given on the command line win over the environment,
which wins over the file.
"""

from __future__ import annotations

import importlib
import inspect
import platform
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

import click

from ._process_contract import EXIT_CONFIG_ERROR
from .config import (
    HTTP_MODES,
    INTERFACES,
    LIFESPAN_MODES,
    LOG_FORMATS,
    LOG_LEVELS,
    LOOP_CHOICES,
    PROXY_PROTOCOL_MODES,
    SENDFILE_MODES,
    SSL_CERT_REQS,
    SSL_MIN_VERSIONS,
    Config,
    ConfigError,
)
from .config_file import ConfigFileError, file_keys, read_config_file
from .path_policy import parse_policies

# Config is the single source of the defaults shown in --help.
_DEFAULTS: dict[str, Any] = {
    name: param.default
    for name, param in inspect.signature(Config.__init__).parameters.items()
    if param.default is not inspect.Parameter.empty
}

# How --help groups the options: (section title, parameter names).  Anything not listed
# lands in "Other options".
_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Binding", ("host", "port", "uds", "uds_permissions", "fd", "backlog")),
    (
        "Application",
        ("config", "factory", "app_dir", "interface", "lifespan", "root_path", "env_file"),
    ),
    (
        "HTTP",
        (
            "server_header",
            "date_header",
            "header",
            "timeout_keep_alive",
            "timeout_graceful_shutdown",
            "shutdown_delay",
            "timeout_request",
        ),
    ),
    (
        "Limits",
        (
            "limit_concurrency",
            "limit_concurrency_queue",
            "timeout_queue",
            "limit_websockets",
            "limit_max_requests",
            "limit_request_body",
            "limit_request_line",
            "max_header_size",
            "max_headers",
            "body_preread_limit",
            "limit_response_buffer",
            "header_read_timeout",
            "timeout_request_body",
            "path_policy",
        ),
    ),
    (
        "TLS",
        (
            "ssl_certfile",
            "ssl_keyfile",
            "ssl_keyfile_password",
            "ssl_ca_certs",
            "ssl_cert_reqs",
            "ssl_min_version",
            "ssl_ciphers",
            "ssl_handshake_timeout",
        ),
    ),
    (
        "HTTP/2",
        (
            "http",
            "http2_max_concurrent_streams",
            "http2_initial_stream_window_size",
            "http2_initial_connection_window_size",
            "http2_max_frame_size",
            "http2_max_header_list_size",
            "http2_connection_buffer",
            "http2_keep_alive_interval",
            "http2_keep_alive_timeout",
        ),
    ),
    ("HTTP/3", ("http3", "http3_max_concurrent_streams")),
    (
        "Static files",
        (
            "static_path_route",
            "static_path_mount",
            "static_path_expires",
            "static_path_index",
            "static_path_follow_symlinks",
            "static_path_cache_size",
            "sendfile",
        ),
    ),
    ("Logging", ("log_level", "log_config", "log_format", "access_log", "access_log_format")),
    ("Proxy", ("proxy_headers", "forwarded_allow_ips")),
    ("Metrics", ("metrics", "metrics_host", "metrics_port")),
    ("Health probes", ("health_port", "health_host")),
    ("Runtime", ("loop", "runtime_threads")),
    (
        "WebSocket",
        (
            "ws",
            "ws_max_size",
            "ws_max_queue",
            "ws_ping_interval",
            "ws_ping_timeout",
            "ws_per_message_deflate",
        ),
    ),
    ("Worker", ("workers", "limit_max_requests_jitter")),
    ("Reload", ("reload", "reload_dirs", "reload_includes", "reload_excludes", "reload_delay")),
)


class _SectionedCommand(click.Command):
    """A command whose ``--help`` lists options in titled sections."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records: dict[str, tuple[str, str]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.name is not None:
                records[param.name] = record
        for title, names in _SECTIONS:
            rows = [records.pop(name) for name in names if name in records]
            if rows:
                with formatter.section(f"{title} options"):
                    formatter.write_dl(rows)
        if records:
            with formatter.section("Other options"):
                formatter.write_dl(list(records.values()))


class _Seconds(click.ParamType):
    """A non-negative number of seconds, or ``none`` for no limit."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, (int, float)):
            return value
        if str(value).strip().lower() == "none":
            return None
        try:
            return float(value)
        except ValueError:
            self.fail(f"{value!r} is not a number of seconds or 'none'.", param, ctx)


def _check_path_policies(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A bad --path-policy ends the command here: one line, exit code 2 (a usage error)."""
    try:
        parse_policies(list(value))
    except ValueError as exc:
        click.echo(f"Error: Invalid --path-policy {exc}.", err=True)
        ctx.exit(2)
    return list(value)


def _option(*decls: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``click.option`` that shows its FERROCORN_* variable in --help, and whole-number
    defaults of float options the same way as int ones (``30``, not ``30.0``)."""
    kwargs.setdefault("show_envvar", True)
    default = kwargs.get("default")
    if isinstance(default, float) and default.is_integer():
        # The option's type converts it back to a float; only --help reads it as given.
        kwargs["default"] = int(default)
    return click.option(*decls, **kwargs)


def _version() -> str:
    try:
        return metadata.version("ferrocorn")
    except metadata.PackageNotFoundError:
        pass
    try:
        # Running from a source tree: the extension carries the crate's version.
        from ferrocorn._ferrocorn import __version__
    except ImportError:
        return "unknown"
    return __version__


def _load_config_file(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--config``: the file's values become the defaults the other parameters fall back to
    (click reads the command line, then the environment, then ``default_map``)."""
    if value is None or ctx.resilient_parsing:
        return
    try:
        values = read_config_file(value, file_keys(ctx.command.params), ctx)
    except ConfigFileError as exc:
        click.echo(f"Error: {exc}", err=True)
        ctx.exit(EXIT_CONFIG_ERROR)
    ctx.default_map = {**(ctx.default_map or {}), **values}


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(
        f"ferrocorn {_version()} ({platform.python_implementation()} "
        f"{platform.python_version()}) on {platform.system()}"
    )
    ctx.exit()


@click.command(
    cls=_SectionedCommand,
    epilog=(
        "\b\nSignals:\n"
        "  SIGTERM, SIGINT  graceful shutdown: /readyz answers 503, --shutdown-delay passes,\n"
        "                   then no new connections, requests in flight finish within\n"
        "                   --timeout-graceful-shutdown; a second signal ends the delay, a\n"
        "                   further SIGINT quits at once\n"
        "  SIGHUP           with --workers > 1: replace the workers one at a time (each new one\n"
        "                   serves before the old one stops); one process with TLS: reload the\n"
        "                   certificate files\n"
        "  SIGTTIN/SIGTTOU  with --workers > 1: one worker more / fewer"
    ),
    context_settings={
        "auto_envvar_prefix": "FERROCORN",
        "help_option_names": ["-h", "--help"],
        "max_content_width": 100,
        "show_default": True,
    },
)
@click.argument("app", envvar="FERROCORN_APP")
@_option(
    "--config",
    type=click.Path(dir_okay=False),
    default=None,
    is_eager=True,
    expose_value=False,
    callback=_load_config_file,
    help="Read options from this TOML file (keys: option names without '--', and app); "
    "the command line and FERROCORN_* variables override it.",
)
# Binding
@_option("--host", default=_DEFAULTS["host"], help="Bind the socket to this host.")
@_option("--port", type=int, default=_DEFAULTS["port"], help="Bind the socket to this port.")
@_option("--uds", type=str, default=None, help="Bind to a Unix domain socket at this path.")
@_option(
    "--uds-permissions",
    metavar="OCTAL",
    default=None,
    help="File mode of the --uds socket, in octal (e.g. 660).",
)
@_option("--fd", type=int, default=None, help="Serve an inherited socket file descriptor.")
@_option(
    "--backlog",
    type=int,
    default=_DEFAULTS["backlog"],
    help="Maximum number of connections waiting to be accepted.",
)
# Application
@_option(
    "--factory",
    is_flag=True,
    default=False,
    help="Treat APP as a factory: call it with no arguments to get the ASGI app.",
)
@_option(
    "--app-dir",
    default=_DEFAULTS["app_dir"],
    show_default=False,
    help="Import APP from this directory (put first on sys.path). [default: current directory]",
)
@_option(
    "--interface",
    type=click.Choice(INTERFACES),
    default=_DEFAULTS["interface"],
    help="Application interface; 'auto' inspects the app.",
)
@_option(
    "--lifespan",
    type=click.Choice(LIFESPAN_MODES),
    default=_DEFAULTS["lifespan"],
    help="Lifespan protocol: 'auto' uses it when the app supports it.",
)
@_option(
    "--root-path",
    default=_DEFAULTS["root_path"],
    help="ASGI root_path, for an app mounted below a path prefix (e.g. behind a proxy).",
)
@_option(
    "--env-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Load KEY=VALUE environment variables from this file before importing APP.",
)
# HTTP
@_option(
    "--server-header/--no-server-header",
    default=_DEFAULTS["server_header"],
    help="Send a 'Server: ferrocorn' header.",
)
@_option(
    "--date-header/--no-date-header",
    default=_DEFAULTS["date_header"],
    help="Send a 'Date' header.",
)
@_option(
    "--header",
    metavar="NAME:VALUE",
    multiple=True,
    show_default=False,
    help="Add a response header; repeatable. The variable takes space-separated headers.",
)
@_option(
    "--timeout-keep-alive",
    type=float,
    default=_DEFAULTS["timeout_keep_alive"],
    help="Close idle keep-alive connections after this many seconds.",
)
@_option(
    "--timeout-graceful-shutdown",
    type=_Seconds(),
    default=_DEFAULTS["timeout_graceful_shutdown"],
    help="On shutdown, wait at most this long for requests in flight ('none': no limit).",
)
@_option(
    "--shutdown-delay",
    type=float,
    default=_DEFAULTS["shutdown_delay"],
    help=(
        "On SIGTERM/SIGINT, answer /readyz with 503 at once but go on serving normally for "
        "this many seconds before the graceful shutdown starts, so that load balancers "
        "checking /readyz stop sending first (a second signal starts it at once)."
    ),
)
@_option(
    "--timeout-request",
    type=_Seconds(),
    default=None,
    help=(
        "Cancel an HTTP app call still running this many seconds after its request arrived "
        "(503 with Retry-After if no response started, else the response is aborted; "
        "WebSockets are exempt). Default: no limit."
    ),
)
# Limits
@_option(
    "--limit-concurrency",
    type=int,
    default=None,
    help="Answer 503 to requests beyond this many in flight at once (WebSocket sessions "
    "are not counted: see --limit-websockets).",
)
@_option(
    "--limit-concurrency-queue",
    type=int,
    default=None,
    help="Let this many requests beyond --limit-concurrency wait for a slot, first come "
    "first served (503 with Retry-After beyond them). Default: none wait.",
)
@_option(
    "--timeout-queue",
    type=float,
    default=_DEFAULTS["timeout_queue"],
    help="A request waiting in the --limit-concurrency-queue gets 503 with Retry-After "
    "after this long.",
)
@_option(
    "--limit-websockets",
    type=int,
    default=None,
    help="Answer 503 to WebSocket handshakes beyond this many open sessions. Default: no limit.",
)
@_option(
    "--limit-max-requests",
    type=int,
    default=None,
    help="Exit after serving this many requests (a supervisor restarts the worker).",
)
@_option(
    "--limit-request-body",
    type=int,
    default=_DEFAULTS["limit_request_body"],
    help="Answer 413 to request bodies larger than this many bytes (0: no limit).",
)
@_option(
    "--limit-request-line",
    type=int,
    default=_DEFAULTS["limit_request_line"],
    help="Answer 414 to request-targets (path and query) longer than this many bytes "
    "(0: no limit).",
)
@_option(
    "--max-header-size",
    type=int,
    default=_DEFAULTS["max_header_size"],
    help="Largest accepted request head, in bytes.",
)
@_option(
    "--max-headers",
    type=int,
    default=_DEFAULTS["max_headers"],
    help="Most request headers accepted.",
)
@_option(
    "--body-preread-limit",
    type=int,
    default=_DEFAULTS["body_preread_limit"],
    help="Read request bodies up to this size before calling the app.",
)
@_option(
    "--limit-response-buffer",
    type=int,
    default=_DEFAULTS["limit_response_buffer"],
    help=(
        "Response body bytes one response may hold in memory; send() waits while they are "
        "not yet written (a slow client slows the app instead of filling memory)."
    ),
)
@_option(
    "--header-read-timeout",
    type=float,
    default=_DEFAULTS["header_read_timeout"],
    help=(
        "Seconds a client has to send a request head, counted from its first byte (an idle "
        "keep-alive connection is held to --timeout-keep-alive instead)."
    ),
)
@_option(
    "--path-policy",
    metavar="PREFIX:KEY=VALUE,...",
    multiple=True,
    show_default=False,
    callback=_check_path_policies,
    help="Override body (bytes, K/M/G suffixes, or off), body-timeout and timeout (seconds "
    "or off) for paths under PREFIX, e.g. '/upload/*:body=10G,timeout=600'; repeatable, "
    "the first match wins.",
)
@_option(
    "--timeout-request-body",
    type=_Seconds(),
    default=_DEFAULTS["timeout_request_body"],
    help="Answer 408 when the next piece of a request body takes longer than this while "
    "the app waits for it (0 or 'none': no limit).",
)
# Static files
@_option(
    "--static-path-route",
    metavar="PREFIX",
    multiple=True,
    show_default=False,
    help="Serve the files of the n-th --static-path-mount under this URL prefix, without "
    "calling the app; repeatable. [default: /static, with one mount]",
)
@_option(
    "--static-path-mount",
    metavar="DIR",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    show_default=False,
    help="Directory whose files the n-th --static-path-route serves; repeatable.",
)
@_option(
    "--static-path-expires",
    type=click.IntRange(min=0),
    default=_DEFAULTS["static_path_expires"],
    help="Cache-Control max-age (seconds) of static files (0: no Cache-Control).",
)
@_option(
    "--static-path-index",
    "--static-path-dir-to-file",  # granian's name
    "static_path_index",
    metavar="NAME",
    default=None,
    help="File served for a request naming a directory of a mount, e.g. index.html "
    "[default: none, a directory is 404]",
)
@_option(
    "--static-path-follow-symlinks",
    is_flag=True,
    default=False,
    help="Serve files that symlinks in a mount point to outside it (default: 404).",
)
@_option(
    "--static-path-cache-size",
    type=click.IntRange(min=0),
    default=_DEFAULTS["static_path_cache_size"],
    help="Bytes of small static files (up to 256 KiB each) kept in memory, checked with a "
    "stat per request (0: read every file afresh).",
)
@_option(
    "--sendfile",
    type=click.Choice(SENDFILE_MODES),
    default=_DEFAULTS["sendfile"],
    help="File bodies (static files, pathsend, zerocopysend) on cleartext HTTP/1.1: 'on' sends "
    "them by sendfile(2), 'off' reads and writes them, 'auto' uses sendfile except to peers on "
    "this host (loopback or this host's own address), where copying costs the machine less.",
)
# TLS
@_option(
    "--ssl-certfile",
    type=click.Path(dir_okay=False),
    default=None,
    help="Serve HTTPS with this PEM certificate (chain, leaf first).",
)
@_option(
    "--ssl-keyfile",
    type=click.Path(dir_okay=False),
    default=None,
    help="PEM private key (PKCS#8, PKCS#1 or SEC1); default: read from --ssl-certfile.",
)
@_option(
    "--ssl-keyfile-password",
    default=None,
    help="Password of an encrypted PKCS#8 key file.",
)
@_option(
    "--ssl-ca-certs",
    type=click.Path(dir_okay=False),
    default=None,
    help="PEM CA certificates that client certificates are verified against.",
)
@_option(
    "--ssl-cert-reqs",
    type=click.Choice(SSL_CERT_REQS),
    default=_DEFAULTS["ssl_cert_reqs"],
    help="Client certificates: not asked for, optional (verified when sent) or required.",
)
@_option(
    "--ssl-min-version",
    type=click.Choice(SSL_MIN_VERSIONS),
    default=_DEFAULTS["ssl_min_version"],
    help="Lowest TLS version accepted.",
)
@_option(
    "--ssl-ciphers",
    default=None,
    help="Cipher suites to allow, ':'-separated (IANA, OpenSSL or rustls names).",
)
@_option(
    "--ssl-handshake-timeout",
    type=float,
    default=_DEFAULTS["ssl_handshake_timeout"],
    help="Seconds a client has to complete the TLS handshake (and, with --proxy-protocol, "
    "to send its PROXY header first).",
)
@_option(
    "--ssl-reload-interval",
    type=_Seconds(),
    default=None,
    help="Every this many seconds, reload the certificate, key and CA files if they changed "
    "(SIGHUP reloads them at once). [default: none]",
)
# HTTP/2
@_option(
    "--http",
    type=click.Choice(HTTP_MODES),
    default=_DEFAULTS["http"],
    help="Protocols: 'auto' is HTTP/1.1 plus HTTP/2 (ALPN on TLS, prior knowledge on cleartext).",
)
@_option(
    "--http2-max-concurrent-streams",
    type=int,
    default=_DEFAULTS["http2_max_concurrent_streams"],
    help="Streams a client may open at once on one connection.",
)
@_option(
    "--http2-initial-stream-window-size",
    type=int,
    default=_DEFAULTS["http2_initial_stream_window_size"],
    help="Flow-control window of each stream, in bytes.",
)
@_option(
    "--http2-initial-connection-window-size",
    type=int,
    default=_DEFAULTS["http2_initial_connection_window_size"],
    help="Flow-control window of the whole connection, in bytes.",
)
@_option(
    "--http2-max-frame-size",
    type=int,
    default=_DEFAULTS["http2_max_frame_size"],
    help="Largest frame payload the server accepts, in bytes.",
)
@_option(
    "--http2-max-header-list-size",
    type=int,
    default=_DEFAULTS["http2_max_header_list_size"],
    help="Largest request header list (decoded), in bytes.",
)
@_option(
    "--http2-connection-buffer",
    type=int,
    default=_DEFAULTS["http2_connection_buffer"],
    help=(
        "Response body bytes all streams of one HTTP/2 connection may hold in memory; "
        "their send() calls wait beyond it."
    ),
)
@_option(
    "--http2-keep-alive-interval",
    type=_Seconds(),
    default=None,
    help="Send a PING this often on idle HTTP/2 connections ('none': never).",
)
@_option(
    "--http2-keep-alive-timeout",
    type=float,
    default=_DEFAULTS["http2_keep_alive_timeout"],
    help="Close the connection when a PING is not answered within this many seconds.",
)
# HTTP/3
@_option(
    "--http3/--no-http3",
    default=_DEFAULTS["http3"],
    help="Also serve HTTP/3 (QUIC) on UDP at the same host and port (needs --ssl-certfile); "
    "HTTP/1.1 and HTTP/2 responses then advertise it with Alt-Svc.",
)
@_option(
    "--http3-max-concurrent-streams",
    type=int,
    default=None,
    help="Request streams a client may open at once on one HTTP/3 connection. "
    "[default: --http2-max-concurrent-streams]",
)
# Logging
@_option(
    "--log-level",
    type=click.Choice(list(LOG_LEVELS), case_sensitive=False),
    default=None,
    show_default=False,
    help="Log level. [default: info, or as set by --log-config]",
)
@_option(
    "--log-config",
    type=click.Path(dir_okay=False),
    default=None,
    help="Logging configuration file: .json or .yaml (dictConfig) or .ini (fileConfig).",
)
@_option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    default=_DEFAULTS["log_format"],
    help="Log records as text lines, or as one JSON object per line (error and access logs).",
)
@_option(
    "--access-log/--no-access-log",
    default=_DEFAULTS["access_log"],
    help="Log one line per request.",
)
@_option(
    "--access-log-format",
    metavar="FORMAT",
    default=None,
    show_default=False,
    help="Access-log line from %(atom)s fields: client, client_host, method, path, query, "
    "full_path, request_line, http_version, scheme, host, status, bytes, duration, duration_ms, "
    "user_agent, referer, request_id (see README). [default: uvicorn's line]",
)
# Proxy
@_option(
    "--proxy-headers/--no-proxy-headers",
    default=_DEFAULTS["proxy_headers"],
    help="Take client address, scheme and host from Forwarded / X-Forwarded-* headers of "
    "trusted peers (--forwarded-allow-ips).",
)
@_option(
    "--forwarded-allow-ips",
    metavar="IPS",
    default=None,
    envvar=["FERROCORN_FORWARDED_ALLOW_IPS", "FORWARDED_ALLOW_IPS"],
    show_default=False,
    help="Comma-separated IPs, CIDR networks or '*' trusted to send proxy headers and "
    "PROXY protocol headers. [default: $FORWARDED_ALLOW_IPS or 127.0.0.1]",
)
@_option(
    "--proxy-protocol",
    type=click.Choice(PROXY_PROTOCOL_MODES),
    default=_DEFAULTS["proxy_protocol"],
    help="Read a PROXY protocol header (HAProxy v1, v2, or 'auto': either or none) from "
    "trusted peers (--forwarded-allow-ips) before TLS/HTTP; other peers are served as sent.",
)
# Metrics
@_option(
    "--metrics/--no-metrics",
    default=_DEFAULTS["metrics"],
    help="Serve Prometheus metrics (GET /metrics) and GET /health on a separate port.",
)
@_option(
    "--metrics-host",
    default=_DEFAULTS["metrics_host"],
    help="Bind the metrics endpoint to this host.",
)
@_option(
    "--metrics-port",
    type=int,
    default=_DEFAULTS["metrics_port"],
    help="Bind the metrics endpoint to this port (0 picks a free one).",
)
# Health probes
@_option(
    "--health-port",
    type=int,
    default=None,
    show_default=False,
    help="Serve GET /livez and GET /readyz on this port, answered by the Rust core even while "
    "the app blocks the event loop (0 picks a free one). Default: off.",
)
@_option(
    "--health-host",
    default=_DEFAULTS["health_host"],
    help="Bind the health probes (--health-port) to this host.",
)
# Runtime
@_option(
    "--loop",
    type=click.Choice(LOOP_CHOICES),
    default=_DEFAULTS["loop"],
    help="Event loop; 'auto' picks uvloop when installed (CPython).",
)
@_option(
    "--runtime-threads",
    type=int,
    default=_DEFAULTS["runtime_threads"],
    help="Threads of the Rust network runtime.",
)
# WebSocket
@_option(
    "--ws",
    type=click.Choice(["auto", "none", "websockets", "wsproto"]),
    default="auto",
    help="WebSocket support: 'none' turns it off (upgrade requests are then plain HTTP); "
    "the other names are accepted for uvicorn compatibility and all mean the Rust core's own.",
)
@_option(
    "--ws-max-size",
    type=int,
    default=16 * 1024 * 1024,
    help="Largest WebSocket message accepted, in bytes (bigger ones close with 1009).",
)
@_option(
    "--ws-max-queue",
    type=int,
    default=32,
    help="Incoming WebSocket messages buffered for the app before reading pauses.",
)
@_option(
    "--ws-ping-interval",
    type=float,
    default=20.0,
    help="Seconds between server pings (0 disables).",
)
@_option(
    "--ws-ping-timeout",
    type=float,
    default=20.0,
    help="Seconds to wait for a pong before the peer is dropped (0 disables).",
)
@_option(
    "--ws-per-message-deflate/--no-ws-per-message-deflate",
    default=_DEFAULTS["ws_per_message_deflate"],
    help="Compress WebSocket messages (permessage-deflate, RFC 7692) when the client offers it.",
)
# Worker
@_option(
    "--workers",
    type=int,
    default=None,
    envvar=["FERROCORN_WORKERS", "WEB_CONCURRENCY"],
    show_default=False,
    help="Number of worker processes; more than 1 runs a supervisor. "
    "[default: $WEB_CONCURRENCY or 1]",
)
@_option(
    "--limit-max-requests-jitter",
    type=int,
    default=_DEFAULTS["limit_max_requests_jitter"],
    help="Add a random 0..N to --limit-max-requests per worker, so they do not all restart "
    "at once.",
)
# Reload
@_option(
    "--reload",
    is_flag=True,
    default=False,
    help="Restart the worker when files change (needs watchfiles).",
)
@_option(
    "--reload-dir",
    "reload_dirs",
    envvar="FERROCORN_RELOAD_DIR",
    multiple=True,
    type=click.Path(file_okay=False),
    show_default=False,
    help="Directory to watch with --reload; repeatable (the variable: a list like PATH). "
    "[default: current directory]",
)
@_option(
    "--reload-include",
    "reload_includes",
    envvar="FERROCORN_RELOAD_INCLUDE",
    metavar="GLOB",
    multiple=True,
    show_default=False,
    help="Also reload when files matching this glob change; repeatable. [default: *.py]",
)
@_option(
    "--reload-exclude",
    "reload_excludes",
    envvar="FERROCORN_RELOAD_EXCLUDE",
    metavar="GLOB",
    multiple=True,
    show_default=False,
    help="Ignore files or directories matching this glob; repeatable. "
    "[default: .*, *.py[cod], *.sw?, *~]",
)
@_option(
    "--reload-delay",
    type=float,
    default=_DEFAULTS["reload_delay"],
    help="Seconds to wait after a change before restarting (more changes are batched).",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def main(app: str, **options: Any) -> None:
    """Serve the ASGI application APP, given as "module:attribute" (or FERROCORN_APP)."""
    # Option names are Config's keyword names; only --header (repeatable) is renamed.
    options["headers"] = list(options.pop("header"))
    try:
        config = Config(app, **options)
    except ConfigError as exc:
        click.echo(f"Error: {str(exc).replace(chr(10), ' ')}", err=True)
        sys.exit(1)
    # Imported late: it loads the Rust core, which --help, --version and bad options don't need.
    server = importlib.import_module("ferrocorn.server")
    sys.exit(server.run_config(config))
