"""Server configuration: ``Config``, every option checked, and what a server does with them.

``Config`` holds no running state.  Constructing one checks every option (declared once, in
options/table.py; an invalid one raises ``ConfigError`` with a one-line message), loads
``env_file`` and configures logging, like uvicorn does; ``load()`` imports the app and
``bind_socket()`` creates the listener.  The work is done by logging_setup.py,
app_loading.py and sockets.py; this module holds what ties the options together.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .accesslog import DEFAULT_ACCESS_LOG_FORMAT, AccessLogFormat
from .app_loading import load_app, load_env_file, loop_factory, uvloop_module
from .app_loading import module_installed as _module_installed
from .app_loading import uvloop_installed as _uvloop_installed
from .logging_setup import DefaultFormatter, configure_logging
from .options import (
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
    TRACE_LOG_LEVEL,
    ConfigError,
    check_options,
    config_signature,
    encode_header,
    log_level_number,
)
from .path_policy import UNSET, PathPolicy, parse_policies
from .proxy_headers import TrustedHosts
from .sockets import bind_tcp, bind_udp, bind_unix, socket_from_fd, socket_kind
from .sockets import take_systemd_socket as _take_systemd_socket
from .static_routes import StaticRoute, parse_routes

__all__ = [
    "HTTP_MODES",
    "SENDFILE_MODES",
    "INTERFACES",
    "LIFESPAN_MODES",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "LOOP_CHOICES",
    "PROXY_PROTOCOL_MODES",
    "SSL_CERT_REQS",
    "SSL_MIN_VERSIONS",
    "TRACE_LOG_LEVEL",
    "Config",
    "ConfigError",
    "DefaultFormatter",
    "socket_kind",
]

logger = logging.getLogger("ferrocorn.error")

# "Name:Value" or a (name, value) pair of str or latin-1 bytes.
HeaderItem = Any

# The options that need a TLS certificate to mean anything.
_TLS_OPTIONS = (
    "ssl_keyfile",
    "ssl_keyfile_password",
    "ssl_ca_certs",
    "ssl_ciphers",
    "ssl_reload_interval",
)


class Config:
    """Every option as an attribute of the same name (options/table.py lists them, with
    their defaults), checked; and derived values the server reads."""

    if TYPE_CHECKING:
        # The options are set from the table, so a type checker cannot list them.
        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, app: str | Callable[..., Any], **options: Any) -> None:
        if not isinstance(app, str) and not callable(app):
            raise ConfigError(f"Invalid app {app!r}: expected an ASGI app or an import string.")
        self.app = app
        # init_kwargs: the keyword arguments as given (and the defaults), which the supervisor
        # passes on to its workers.
        self.init_kwargs, checked = check_options(options)
        self.__dict__.update(checked)
        self.log_level_no = log_level_number(self.log_level)
        self._check_together()
        self._derive()

        # The loaded rustls configuration (a ferrocorn._ferrocorn.TlsConfig); set by load().
        self.tls: Any = None
        self.loaded = False
        self.loaded_app: Callable[..., Awaitable[None]] | None = None
        self.asgi_version = "3.0"  # "2.0" once load() has wrapped an ASGI2 app

        self.configure_logging()
        if self.env_file is not None:
            load_env_file(self.env_file)

    def _check_together(self) -> None:
        """The rules that involve more than one option, or the installed packages."""
        if self.uds is not None and self.fd is not None:
            raise ConfigError("Options uds and fd are mutually exclusive.")
        if self.loop == "uvloop" and not _uvloop_installed():
            raise ConfigError('loop="uvloop" requires uvloop: pip install uvloop.')
        if self.limit_concurrency_queue is not None and self.limit_concurrency is None:
            raise ConfigError("--limit-concurrency-queue needs --limit-concurrency.")
        if self.reload:
            for directory in self.reload_dirs:
                if not os.path.isdir(directory):
                    raise ConfigError(f'Invalid reload_dirs: "{directory}" is not a directory.')
        self.reload_dirs: list[str] = self.reload_dirs or [os.getcwd()]
        if (self.workers > 1 or self.reload) and not isinstance(self.app, str):
            raise ConfigError(
                "You must pass the application as an import string to enable 'reload' or 'workers'."
            )
        if self.reload and not _module_installed("watchfiles"):
            raise ConfigError(
                "reload=True requires watchfiles: pip install watchfiles "
                '(or "ferrocorn[standard]").'
            )
        if self.metrics and self.health_port is not None and self.health_port != 0:
            if self.health_port == self.metrics_port and self.health_host == self.metrics_host:
                raise ConfigError(
                    f"Options health_port and metrics_port are both {self.health_port}: the "
                    "probes need a port of their own."
                )
        if self.ssl_certfile is None:
            for name in _TLS_OPTIONS:
                if getattr(self, name) is not None:
                    raise ConfigError(f"Option {name} requires ssl_certfile.")
        elif self.ssl_cert_reqs != "none" and self.ssl_ca_certs is None:
            raise ConfigError(
                f'ssl_cert_reqs="{self.ssl_cert_reqs}" requires ssl_ca_certs (the CA that '
                "signs client certificates)."
            )
        if self.http3 and self.ssl_certfile is None:
            raise ConfigError(
                "Option http3 requires ssl_certfile: QUIC is always encrypted (TLS 1.3), and "
                "browsers use HTTP/3 only with a certificate they trust."
            )
        if self.http3 and self.uds is not None:
            raise ConfigError("Option http3 needs a TCP address (host/port), not uds.")

    def _derive(self) -> None:
        """What the feature modules parse out of their options, once."""
        try:
            self.trusted_hosts = TrustedHosts(self.forwarded_allow_ips)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"Invalid forwarded_allow_ips: {exc}.") from None
        # The networks whose PROXY protocol headers the core reads (src/proxy_protocol/).
        self.trusted_peer_networks = self.trusted_hosts.socket_networks()
        # None: the default line, printed by the fast path (_asgi.run_asgi_with_access_log).
        self.compiled_access_log_format: AccessLogFormat | None = None
        fmt = self.access_log_format
        if fmt is not None and fmt != DEFAULT_ACCESS_LOG_FORMAT:
            try:
                self.compiled_access_log_format = AccessLogFormat(fmt)
            except ValueError as exc:
                raise ConfigError(f"Invalid access_log_format {exc}.") from None
        # Per path prefix overrides of the body limit and the body/request timeouts.
        try:
            self.path_policies: list[PathPolicy] = parse_policies(self.path_policy)
        except ValueError as exc:
            raise ConfigError(f"Invalid path_policy {exc}.") from None
        # Files the core serves itself (static_routes.py, src/server/static_route/).
        try:
            self.static_routes: list[StaticRoute] = parse_routes(
                self.static_path_route, self.static_path_mount
            )
        except ValueError as exc:
            raise ConfigError(f"Invalid {exc}.") from None

    @property
    def is_ssl(self) -> bool:
        return self.ssl_certfile is not None

    @property
    def error_log_debug(self) -> bool:
        """Whether ``ferrocorn.error`` logs debug lines (the core sends those only then)."""
        return logging.getLogger("ferrocorn.error").isEnabledFor(logging.DEBUG)

    # ------------------------------------------------------------------ for the core

    @property
    def encoded_headers(self) -> list[tuple[bytes, bytes]]:
        """Extra response headers as (lowercase name, value) latin-1 bytes."""
        return [encode_header(item) for item in self.headers]

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

    # ------------------------------------------------------------------ logging

    def configure_logging(self) -> None:
        """Set up ``ferrocorn``, ``ferrocorn.error`` and ``ferrocorn.access``; idempotent.

        Called by the constructor.  Without ``log_config`` the messages go to stderr and the
        access log to stdout, as text or (``log_format="json"``) JSON lines; ``log_config``
        (a dictConfig dict or a .json/.yaml/.ini path) replaces that default.  ``log_level``
        and ``access_log`` are applied last.
        """
        configure_logging(self.log_config, self.log_format, self.log_level_no, self.access_log)

    # ------------------------------------------------------------------ app loading

    def load(self) -> None:
        """Import (and with ``factory`` call) the app; set ``loaded_app`` to an ASGI3 callable."""
        if self.loaded:
            return
        if self.is_ssl and self.tls is None:
            self.tls = self._load_tls()
        self.loaded_app, self.asgi_version = load_app(
            self.app, self.factory, self.interface, self.app_dir
        )
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

    def get_loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        """For ``asyncio.Runner(loop_factory=...)`` / ``asyncio.run(..., loop_factory=...)``."""
        return loop_factory(self.loop)

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return self.get_loop_factory()()

    def setup_event_loop_policy(self) -> None:
        """Install uvloop's policy when chosen (policies are deprecated from 3.14; prefer
        ``new_event_loop``/``get_loop_factory``)."""
        uvloop = uvloop_module(self.loop)
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
                sock = socket_from_fd(activated, self.backlog)
                self.fd: int | None = activated  # from now on this configuration serves that socket
                return sock
        if self.fd is not None:
            return socket_from_fd(self.fd, self.backlog)
        if self.uds is not None:
            return bind_unix(self.uds, self.uds_permissions, self.backlog)
        return bind_tcp(self.host, self.port, self.backlog, reuse_port)

    def bind_udp(self, address: tuple[Any, ...], reuse_port: bool = False) -> socket.socket:
        """The UDP socket ``--http3`` serves QUIC on, at ``address`` (the TCP socket's);
        ``reuse_port`` as each worker binds its own."""
        return bind_udp(address, reuse_port)


# Config(app, *, host=..., ...): what help(), inspect and editors show.
Config.__init__.__signature__ = config_signature()  # type: ignore[attr-defined]
