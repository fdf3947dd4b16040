"""Every option of the server, declared once.

From this table come ``Config``'s keywords, defaults and checks (config.py), the command's
flags, variables and ``--help`` sections (cli.py), the ``--config`` file's keys
(config_file.py) and the docs' Settings page (page.py). An option's place here is its place
in ``--help`` and on the page; ``group`` is its section. Adding an option: a row here, the
code that uses the value (the Rust core reads ``Config``'s attributes: src/core/options.rs),
and a test.
"""

from __future__ import annotations

from . import checks
from .spec import Choice, Flag, Int, Many, Option, Path, Seconds, Switch, Text

HTTP_MODES = ("auto", "1", "2")
SENDFILE_MODES = ("auto", "on", "off")
INTERFACES = ("auto", "asgi3", "asgi2")
LIFESPAN_MODES = ("auto", "on", "off")
LOG_FORMATS = ("text", "json")
LOOP_CHOICES = ("auto", "asyncio", "uvloop")
PROXY_PROTOCOL_MODES = ("off", "v1", "v2", "auto")
SSL_CERT_REQS = ("none", "optional", "required")
SSL_MIN_VERSIONS = ("1.2", "1.3")
WS_MODES = ("auto", "none", "websockets", "wsproto")
# HTTP/2 limits from RFC 9113 §6.5.2 (window sizes and frame sizes).
_H2_MAX_WINDOW = 2**31 - 1
_H2_MIN_FRAME, _H2_MAX_FRAME = 2**14, 2**24 - 1
_U32 = 2**32 - 1

# fmt: off
OPTIONS: tuple[Option, ...] = (
    # ------------------------------------------------------------------ Binding
    Option("host", "Binding", Text(), "127.0.0.1", "Bind the socket to this host."),
    Option("port", "Binding", Int(0, 65535), 8000, "Bind the socket to this port."),
    Option("uds", "Binding", Path("text"), None, "Bind to a Unix domain socket at this path.",
        optional=True, annotation="str | os.PathLike[str] | None"),
    Option("uds_permissions", "Binding", Text("octal file mode, or none"), None,
        "File mode of the --uds socket, in octal (e.g. 660).",
        check=checks.uds_permissions, metavar="OCTAL", annotation="int | str | None"),
    Option("fd", "Binding", Int(0), None, "Serve an inherited socket file descriptor.",
        optional=True),
    Option("backlog", "Binding", Int(1), 2048,
        "Maximum number of connections waiting to be accepted."),
    # ------------------------------------------------------------------ Application
    Option("config", "Application", Path(), None,
        "Read options from this TOML file (keys: option names without '--', and app); "
        "the command line and FERROCORN_* variables override it.",
        cli_only=True),
    Option("factory", "Application", Flag(), False,
        "Treat APP as a factory: call it with no arguments to get the ASGI app."),
    Option("app_dir", "Application", Text(), "",
        "Import APP from this directory (put first on sys.path).",
        default_text="current directory", annotation="str | None"),
    Option("interface", "Application", Choice(INTERFACES), "auto",
        "Application interface; 'auto' inspects the app."),
    Option("lifespan", "Application", Choice(LIFESPAN_MODES), "auto",
        "Lifespan protocol: 'auto' uses it when the app supports it."),
    Option("root_path", "Application", Text(), "",
        "ASGI root_path, for an app mounted below a path prefix (e.g. behind a proxy).",
        check=checks.root_path),
    Option("env_file", "Application", Path(), None,
        "Load KEY=VALUE environment variables from this file before importing APP.",
        optional=True),
    # ------------------------------------------------------------------ HTTP
    Option("server_header", "HTTP", Switch(), True, "Send a 'Server: ferrocorn' header."),
    Option("date_header", "HTTP", Switch(), True, "Send a 'Date' header."),
    Option("headers", "HTTP", Many(), None,
        "Add a response header; repeatable. The variable takes space-separated headers.",
        check=checks.headers, flags=("--header",), metavar="NAME:VALUE",
        annotation="list[str | tuple[str | bytes, str | bytes]] | None"),
    Option("timeout_keep_alive", "HTTP", Seconds(), 5,
        "Close idle keep-alive connections after this many seconds."),
    Option("timeout_graceful_shutdown", "HTTP", Seconds(), 30.0,
        "On shutdown, wait at most this long for requests in flight ('none': no limit).",
        optional=True),
    Option("shutdown_delay", "HTTP", Seconds(), 0.0,
        "On SIGTERM/SIGINT, answer /readyz with 503 at once but go on serving normally for "
        "this many seconds before the graceful shutdown starts, so that load balancers "
        "checking /readyz stop sending first (a second signal starts it at once)."),
    Option("timeout_request", "HTTP", Seconds(positive=True), None,
        "Cancel an HTTP app call still running this many seconds after its request arrived "
        "(503 with Retry-After if no response started, else the response is aborted; "
        "WebSockets are exempt).",
        optional=True, default_text="no limit"),
    # ------------------------------------------------------------------ Limits
    Option("limit_concurrency", "Limits", Int(1), None,
        "Answer 503 to requests beyond this many in flight at once (WebSocket sessions "
        "are not counted: see --limit-websockets).",
        optional=True),
    Option("limit_concurrency_queue", "Limits", Int(1), None,
        "Let this many requests beyond --limit-concurrency wait for a slot, first come "
        "first served (503 with Retry-After beyond them).",
        optional=True, default_text="none wait"),
    Option("timeout_queue", "Limits", Seconds(positive=True), 30.0,
        "A request waiting in the --limit-concurrency-queue gets 503 with Retry-After "
        "after this long."),
    Option("limit_websockets", "Limits", Int(1), None,
        "Answer 503 to WebSocket handshakes beyond this many open sessions.",
        optional=True, default_text="no limit"),
    Option("limit_max_requests", "Limits", Int(1), None,
        "Recycle the worker after this many requests (when it stops accepting: "
        "docs/workers.md, Workers); a server without a supervisor exits.",
        optional=True),
    Option("limit_request_body", "Limits", Int(0), 1073741824,
        "Answer 413 to request bodies larger than this many bytes (0: no limit).",
        optional=True),
    Option("limit_request_line", "Limits", Int(0), 16384,
        "Answer 414 to request-targets (path and query) longer than this many bytes "
        "(0: no limit).",
        optional=True),
    Option("max_header_size", "Limits", Int(1024), 65536,
        "Largest accepted request head, in bytes."),
    Option("max_headers", "Limits", Int(1), 100, "Most request headers accepted."),
    Option("body_preread_limit", "Limits", Int(0), 65536,
        "Read request bodies up to this size before calling the app."),
    Option("limit_response_buffer", "Limits", Int(1024), 1048576,
        "Response body bytes one response may hold in memory; send() waits while they are "
        "not yet written (a slow client slows the app instead of filling memory)."),
    Option("header_read_timeout", "Limits", Seconds(positive=True), 30.0,
        "Seconds a client has to send a request head, counted from its first byte (an idle "
        "keep-alive connection is held to --timeout-keep-alive instead)."),
    Option("timeout_request_body", "Limits", Seconds(), 60.0,
        "Answer 408 when the next piece of a request body takes longer than this while "
        "the app waits for it (0 or 'none': no limit).",
        optional=True),
    Option("path_policy", "Limits", Many(), None,
        "Override body (bytes, K/M/G suffixes, or off), body-timeout and timeout (seconds "
        "or off) for paths under PREFIX, e.g. '/upload/*:body=10G,timeout=600'; repeatable, "
        "the first match wins.",
        check=checks.as_given, metavar="PREFIX:KEY=VALUE,..."),
    # ------------------------------------------------------------------ TLS
    Option("ssl_certfile", "TLS", Path(), None,
        "Serve HTTPS with this PEM certificate (chain, leaf first).", optional=True),
    Option("ssl_keyfile", "TLS", Path(), None, "PEM private key (PKCS#8, PKCS#1 or SEC1).",
        optional=True, default_text="read from --ssl-certfile"),
    Option("ssl_keyfile_password", "TLS", Text(), None, "Password of an encrypted PKCS#8 key file.",
        optional=True),
    Option("ssl_ca_certs", "TLS", Path(), None,
        "PEM CA certificates that client certificates are verified against.", optional=True),
    Option("ssl_cert_reqs", "TLS", Choice(SSL_CERT_REQS, checks.cert_reqs_alias), "none",
        "Client certificates: not asked for, optional (verified when sent) or required.",
        annotation="str | int"),
    Option("ssl_min_version", "TLS", Choice(SSL_MIN_VERSIONS, checks.tls_version_alias), "1.2",
        "Lowest TLS version accepted."),
    Option("ssl_ciphers", "TLS", Text(), None,
        "Cipher suites to allow, ':'-separated (IANA, OpenSSL or rustls names).",
        check=checks.none_if_empty, annotation="str | None"),
    Option("ssl_handshake_timeout", "TLS", Seconds(positive=True), 10.0,
        "Seconds a client has to complete the TLS handshake (and, with --proxy-protocol, "
        "to send its PROXY header first)."),
    Option("ssl_reload_interval", "TLS", Seconds(positive=True), None,
        "Every this many seconds, reload the certificate, key and CA files if they changed "
        "(SIGHUP reloads them at once).",
        optional=True, default_text="none"),
    # ------------------------------------------------------------------ HTTP/2
    Option("http", "HTTP/2", Choice(HTTP_MODES, checks.http_alias), "auto",
        "Protocols: 'auto' is HTTP/1.1 plus HTTP/2 (ALPN on TLS, prior knowledge on cleartext)."),
    Option("http2_max_concurrent_streams", "HTTP/2", Int(1, _U32), 100,
        "Streams a client may open at once on one connection."),
    Option("http2_initial_stream_window_size", "HTTP/2", Int(65535, _H2_MAX_WINDOW), 1048576,
        "Flow-control window of each stream, in bytes."),
    Option("http2_initial_connection_window_size", "HTTP/2", Int(65535, _H2_MAX_WINDOW), 2097152,
        "Flow-control window of the whole connection, in bytes."),
    Option("http2_max_frame_size", "HTTP/2", Int(_H2_MIN_FRAME, _H2_MAX_FRAME), 16384,
        "Largest frame payload the server accepts, in bytes."),
    Option("http2_max_header_list_size", "HTTP/2", Int(1024, _U32), 65536,
        "Largest request header list (decoded), in bytes."),
    Option("http2_connection_buffer", "HTTP/2", Int(1024), 4194304,
        "Response body bytes all streams of one HTTP/2 connection may hold in memory; "
        "their send() calls wait beyond it."),
    Option("http2_keep_alive_interval", "HTTP/2", Seconds(), None,
        "Send a PING this often on idle HTTP/2 connections ('none': never).",
        optional=True, check=checks.seconds_none_if_zero),
    Option("http2_keep_alive_timeout", "HTTP/2", Seconds(positive=True), 20.0,
        "Close the connection when a PING is not answered within this many seconds."),
    # ------------------------------------------------------------------ HTTP/3
    Option("http3", "HTTP/3", Switch(), False,
        "Also serve HTTP/3 (QUIC) on UDP at the same host and port (needs --ssl-certfile); "
        "HTTP/1.1 and HTTP/2 responses then advertise it with Alt-Svc."),
    Option("http3_max_concurrent_streams", "HTTP/3", Int(1, _U32), None,
        "Request streams a client may open at once on one HTTP/3 connection.",
        optional=True, default_text="--http2-max-concurrent-streams"),
    # ------------------------------------------------------------------ Static files
    Option("static_path_route", "Static files", Many(), None,
        "Serve the files of the n-th --static-path-mount under this URL prefix, without "
        "calling the app; repeatable.",
        check=checks.as_given, metavar="PREFIX", default_text="/static, with one mount"),
    Option("static_path_mount", "Static files", Many("existing-dir"), None,
        "Directory whose files the n-th --static-path-route serves; repeatable.",
        check=checks.as_given, metavar="DIR"),
    Option("static_path_expires", "Static files", Int(0, cli="int>=0"), 86400,
        "Cache-Control max-age (seconds) of static files (0: no Cache-Control)."),
    Option("static_path_index", "Static files", Text("file name, or none"), None,
        "File served for a request naming a directory of a mount, e.g. index.html.",
        check=checks.file_name, flags=("--static-path-index", "--static-path-dir-to-file"),
        metavar="NAME", default_text="none, a directory is 404", annotation="str | None"),
    Option("static_path_follow_symlinks", "Static files", Flag(), False,
        "Serve files that symlinks in a mount point to outside it (default: 404)."),
    Option("static_path_cache_size", "Static files", Int(0, cli="int>=0"), 32 * 1024 * 1024,
        "Bytes of small static files (up to 256 KiB each) kept in memory, checked with a "
        "stat per request (0: read every file afresh)."),
    Option("sendfile", "Static files", Choice(SENDFILE_MODES), "auto",
        "File bodies (static files, pathsend, zerocopysend) on cleartext HTTP/1.1: 'on' sends "
        "them by sendfile(2), 'off' reads and writes them, 'auto' uses sendfile except to peers "
        "on this host (loopback or this host's own address), where copying costs the machine "
        "less."),
    # ------------------------------------------------------------------ Logging
    Option("log_level", "Logging", Choice(tuple(checks.LOG_LEVELS), case_sensitive=False), "info",
        "Log level.",
        check=checks.log_level, cli_default=None, default_text="info, or as set by --log-config",
        annotation="str | int | None"),
    Option("log_config", "Logging", Path(), None,
        "Logging configuration file: .json or .yaml (dictConfig) or .ini (fileConfig).",
        check=checks.as_given, annotation="dict[str, Any] | str | os.PathLike[str] | None"),
    Option("log_format", "Logging", Choice(LOG_FORMATS), "text",
        "Log records as text lines, or as one JSON object per line (error and access logs)."),
    Option("access_log", "Logging", Switch(), True, "Log one line per request."),
    Option("access_log_format", "Logging", Text("format"), None,
        "Access-log line from %(atom)s fields: client, client_host, method, path, query, "
        "full_path, request_line, http_version, scheme, host, status, bytes, duration, "
        "duration_ms, user_agent, referer, request_id (see the Logging page).",
        optional=True, metavar="FORMAT", default_text="uvicorn's line"),
    # ------------------------------------------------------------------ Proxy
    Option("proxy_headers", "Proxy", Switch(), True,
        "Take client address, scheme and host from Forwarded / X-Forwarded-* headers of "
        "trusted peers (--forwarded-allow-ips)."),
    Option("forwarded_allow_ips", "Proxy", Text("comma-separated list"), None,
        "Comma-separated IPs, CIDR networks or '*' trusted to send proxy headers and "
        "PROXY protocol headers.",
        check=checks.forwarded_allow_ips, metavar="IPS",
        env=("FERROCORN_FORWARDED_ALLOW_IPS", "FORWARDED_ALLOW_IPS"),
        default_text="$FORWARDED_ALLOW_IPS or 127.0.0.1", annotation="list[str] | str | None"),
    Option("proxy_protocol", "Proxy", Choice(PROXY_PROTOCOL_MODES), "off",
        "Read a PROXY protocol header (HAProxy v1, v2, or 'auto': either or none) from "
        "trusted peers (--forwarded-allow-ips) before TLS/HTTP; other peers are served as sent."),
    # ------------------------------------------------------------------ Metrics
    Option("metrics", "Metrics", Switch(), False,
        "Serve Prometheus metrics (GET /metrics) and GET /health on a separate port."),
    Option("metrics_host", "Metrics", Text(), "127.0.0.1",
        "Bind the metrics endpoint to this host."),
    Option("metrics_port", "Metrics", Int(0, 65535), 9090,
        "Bind the metrics endpoint to this port (0 picks a free one)."),
    # ------------------------------------------------------------------ Health probes
    Option("health_port", "Health probes", Int(0, 65535), None,
        "Serve GET /livez and GET /readyz on this port, answered by the Rust core even while "
        "the app blocks the event loop (0 picks a free one).",
        optional=True, default_text="off"),
    Option("health_host", "Health probes", Text(), "127.0.0.1",
        "Bind the health probes (--health-port) to this host."),
    # ------------------------------------------------------------------ Runtime
    Option("loop", "Runtime", Choice(LOOP_CHOICES), "auto",
        "Event loop; 'auto' picks uvloop when installed (CPython)."),
    Option("runtime_threads", "Runtime", Int(1), 1, "Threads of the Rust network runtime."),
    # ------------------------------------------------------------------ WebSocket
    Option("ws", "WebSocket", Choice(WS_MODES), "auto",
        "WebSocket support: 'none' turns it off (upgrade requests are then plain HTTP); "
        "the other names are accepted for uvicorn compatibility and all mean the Rust core's own."),
    Option("ws_max_size", "WebSocket", Int(1), 16 * 1024 * 1024,
        "Largest WebSocket message accepted, in bytes (bigger ones close with 1009)."),
    Option("ws_max_queue", "WebSocket", Int(1), 32,
        "Incoming WebSocket messages buffered for the app before reading pauses."),
    Option("ws_ping_interval", "WebSocket", Seconds(), 20.0,
        "Seconds between server pings (0 disables).",
        check=checks.seconds_zero_if_none, annotation="float | None"),
    Option("ws_ping_timeout", "WebSocket", Seconds(), 20.0,
        "Seconds to wait for a pong before the peer is dropped (0 disables).",
        check=checks.seconds_zero_if_none, annotation="float | None"),
    Option("ws_per_message_deflate", "WebSocket", Switch(), True,
        "Compress WebSocket messages (permessage-deflate, RFC 7692) when the client offers it."),
    # ------------------------------------------------------------------ Worker
    Option("workers", "Worker", Int(1), None,
        "Number of worker processes; more than 1 runs a supervisor.",
        check=checks.workers, env=("FERROCORN_WORKERS", "WEB_CONCURRENCY"),
        default_text="$WEB_CONCURRENCY or 1", annotation="int | None"),
    Option("limit_max_requests_jitter", "Worker", Int(0), 0,
        "Add a random 0..N to --limit-max-requests per worker, so they do not all restart "
        "at once."),
    Option("recycle_fork", "Worker", Flag(), False,
        "Import the app once in the template process that recycled workers "
        "(--limit-max-requests) are forked from, as gunicorn's preload_app: cheaper starts, "
        "but what the app set up at import is shared by the workers."),
    # ------------------------------------------------------------------ Reload
    Option("reload", "Reload", Flag(), False,
        "Restart the worker when files change (needs watchfiles)."),
    Option("reload_dirs", "Reload", Many("dir"), None,
        "Directory to watch with --reload; repeatable (the variable: a list like PATH).",
        check=checks.directories, flags=("--reload-dir",), default_text="current directory"),
    Option("reload_includes", "Reload", Many(), None,
        "Also reload when files matching this glob change; repeatable.",
        check=checks.globs, flags=("--reload-include",), metavar="GLOB", default_text="*.py"),
    Option("reload_excludes", "Reload", Many(), None,
        "Ignore files or directories matching this glob; repeatable.",
        check=checks.globs, flags=("--reload-exclude",), metavar="GLOB",
        default_text=".*, *.py[cod], *.sw?, *~"),
    Option("reload_delay", "Reload", Seconds(), 0.25,
        "Seconds to wait after a change before restarting (more changes are batched)."),
)
# fmt: on

CONFIG_OPTIONS: tuple[Option, ...] = tuple(o for o in OPTIONS if not o.cli_only)
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
