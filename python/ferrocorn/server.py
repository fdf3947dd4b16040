"""One worker: load the app, run lifespan, hand the socket to the Rust core, serve until
told to stop, then drain gracefully (ARCHITECTURE.md; uvicorn's Server is the model for the API)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Coroutine

from ._access_fastpath import CoreAccessLog, log_through_python
from ._asgi import select_runner
from ._ferrocorn import Core, ProbeServer
from ._process_contract import EXIT_CONFIG_ERROR, EXIT_OK, EXIT_STARTUP_FAILED, log_listening
from ._stand_in import failure_app
from .config import Config, ConfigError
from .lifespan import Lifespan
from .metrics import (
    LoopLag,
    MetricsServer,
    RequestMetrics,
    log_endpoint,
    open_metrics_socket,
)
from .probes import open_probes
from .proxy_headers import ProxyHeadersMiddleware
from .static_served import served_callback
from .supervisor import Supervisor
from .tls_reload import TlsReloader

logger = logging.getLogger("ferrocorn.error")

_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_TICK = 0.05
# The loop thread's freed memory goes back to the system once a second (Core.release_memory).
_RELEASE_MEMORY_TICKS = 20
# How long app calls cancelled at the graceful shutdown timeout get to finish their cleanup
# (except/finally blocks that await) before lifespan shutdown starts.
_CANCEL_GRACE = 1.0


class Server:
    # A worker binds its --http3 UDP socket with SO_REUSEPORT, beside its siblings'.
    _udp_reuse_port = False

    def __init__(self, config: Config) -> None:
        self.config = config
        self.should_exit = False
        # --shutdown-delay: when the lame-duck period that a stop signal began ends.
        self._stop_at: float | None = None
        self._lame_duck_logged = False
        self.force_exit = False
        self.started = False
        self.exit_code = EXIT_OK
        self.bound_addresses: list[tuple[Any, ...]] = []
        self._core: Core | None = None
        self._unix_path: str | None = None
        self.metrics: RequestMetrics | None = None  # with --metrics: what the wrapper counts
        self._metrics_server: MetricsServer | None = None
        # While set, the core writes the access lines (default logging configuration).
        self._core_access_log: CoreAccessLog | None = None
        # A worker of the --reload supervisor: an app that fails to import or start is
        # replaced by a 503 stand-in until the next change (_stand_in.py), not an exit.
        self.stand_in_on_failure = False
        # With TLS: reloads the certificate on SIGHUP and --ssl-reload-interval.
        self._tls_reloader: TlsReloader | None = None
        self._closed_counts: dict[str, Any] | None = None  # the core's, once it closed
        self._probes: ProbeServer | None = None  # --health-port (probes.py)

    def _use_stand_in(self, reason: str, exc: BaseException | None) -> None:
        """--reload: serve 503s naming ``reason`` until the next change replaces this worker."""
        if exc is not None:
            logger.error("%s", reason, exc_info=None if isinstance(exc, ConfigError) else exc)
        logger.warning("Answering 503 until the next change: %s", reason)
        self.config.use_stand_in(failure_app(reason))

    # ------------------------------------------------------------------ running

    def run(self) -> int:
        """Blocking: serve in a new event loop until shutdown; returns the exit code."""
        return _run_in_new_loop(self.serve(), self.config.get_loop_factory())

    async def serve(self) -> int:
        """Serve inside the running loop until ``should_exit``; returns the exit code."""
        config = self.config
        try:
            config.load()
        except Exception as exc:
            # A TLS file that fails to load leaves nothing a stand-in could serve on.
            if not self.stand_in_on_failure or (config.is_ssl and config.tls is None):
                if not isinstance(exc, ConfigError):
                    raise
                logger.error("%s", exc)
                self.exit_code = EXIT_CONFIG_ERROR
                return self.exit_code
            self._use_stand_in(_failure_text(exc), exc)
        try:
            # Before lifespan startup: /readyz says 503 until the server serves.
            self._probes = self._open_probes()
        except ConfigError as exc:
            logger.error("%s", exc)
            self.exit_code = EXIT_CONFIG_ERROR
            return self.exit_code
        try:
            return await self._serve_loaded()
        finally:
            if self._probes is not None:
                self._probes.close()
                self._probes = None

    async def _serve_loaded(self) -> int:
        config = self.config
        # uvicorn's first line, which log pipelines and process managers already look for.
        logger.info("Started server process [%d]", os.getpid())
        loop = asyncio.get_running_loop()
        logger.debug("Event loop: %s.%s", type(loop).__module__, type(loop).__qualname__)

        state: dict[str, Any] = {}
        lifespan: Lifespan | None = None
        if config.lifespan != "off":
            lifespan = Lifespan(config.loaded_app, config.lifespan, config.asgi_version, state)
            if not await lifespan.startup():
                if not self.stand_in_on_failure:
                    logger.error("Application startup failed. Exiting.")
                    self.exit_code = EXIT_STARTUP_FAILED
                    return self.exit_code
                self._use_stand_in("Application startup failed (see the server's log).", None)
                lifespan = None

        with _SignalCapture(self):
            try:
                self._start(state if lifespan is not None and not lifespan.unsupported else None)
            except ConfigError as exc:
                logger.error("%s", exc)
                self.exit_code = EXIT_CONFIG_ERROR
            else:
                await self._start_metrics()
                loop_lag = None
                if self.metrics is not None:
                    loop_lag = LoopLag(self.metrics, loop)
                    loop_lag.start()
                self.started = True
                if self._probes is not None and not self._stopping():
                    self._probes.set_ready(True)  # before the line that says it serves
                self._log_started()
                ticks = 0
                while not self.should_exit and not self._max_requests_reached():
                    await asyncio.sleep(_TICK)
                    self._check_lame_duck()
                    self._check_access_log()
                    if self._tls_reloader is not None:
                        self._tls_reloader.tick()
                    ticks += 1
                    if ticks % _RELEASE_MEMORY_TICKS == 0 and self._core is not None:
                        self._core.release_memory()
                await self._shutdown()
                if loop_lag is not None:
                    loop_lag.stop()

        if lifespan is not None:
            await lifespan.shutdown()
        return self.exit_code

    def _start(self, state: dict[str, Any] | None) -> None:
        config = self.config
        sock = config.bind_socket()
        kind = config.socket_kind(sock)
        if kind == "unix":
            # Unlinked on shutdown only when this process created it (not an inherited socket).
            self._unix_path = sock.getsockname() if config.uds is not None else None
            self.bound_addresses.append((sock.getsockname(),))
        else:
            self.bound_addresses.append(sock.getsockname()[:2])
        if config.metrics:
            self.metrics = RequestMetrics()
            try:
                self._open_metrics_endpoint()
            except ConfigError:
                sock.close()
                raise
        # The default access line is the core's to write, unless metrics need the runner.
        fast_log = None
        if self.metrics is None:
            fast_log = CoreAccessLog.detect(
                config.access_log, config.compiled_access_log_format is not None
            )
        # The runner for the features that are on (each app call runs inside it). With proxy
        # headers, a second pair that applies them: the core picks it only for requests that
        # carry a forwarding header, so the others pay nothing for the feature.
        wrapper_options = {
            "access_log": config.access_log,
            "log_format": config.compiled_access_log_format,
            "metrics": self.metrics,
            "core_log": fast_log is not None,
            "timeout": config.timeout_request,
            "json_access": config.log_format == "json",
            "path_timeouts": config.path_timeouts,
            "root_path": config.root_path,
        }
        app, runner = select_runner(config.loaded_app, **wrapper_options)
        forwarded_app = forwarded_runner = None
        if config.proxy_headers:
            forwarded_app, forwarded_runner = select_runner(
                config.loaded_app,
                proxy=ProxyHeadersMiddleware(config.loaded_app, config.trusted_hosts),
                **wrapper_options,
            )
        udp = None
        if config.http3 and kind == "tcp":
            try:
                udp = config.bind_udp(sock.getsockname(), reuse_port=self._udp_reuse_port)
            except ConfigError:
                sock.close()
                raise
        loop = asyncio.get_running_loop()
        core = Core(
            app,
            loop,
            runner,
            self._core_config(),
            forwarded_app=forwarded_app,
            forwarded_runner=forwarded_runner,
            state=state,
            access_log=fast_log.core_args() if fast_log is not None else None,
            http3_port=udp.getsockname()[1] if udp is not None else None,
        )
        self._core_access_log = fast_log
        if config.static_routes:
            on_served = served_callback(self.metrics, config.access_log)
            if on_served is not None:
                core.on_static_served(on_served)
        # The core owns the descriptor from here on; our socket object lets go of it.
        fd = sock.detach()
        if kind == "unix":
            core.listen_unix(fd, str(self.bound_addresses[-1][0]))
        else:
            core.listen_tcp(fd)
        if udp is not None:
            core.listen_udp(udp.detach())
        core.start()
        self._core = core
        if config.is_ssl:
            self._tls_reloader = TlsReloader(config, core)

    def _check_access_log(self) -> None:
        """Hand the access lines back to Python's logging once its configuration changed."""
        fast_log = self._core_access_log
        if fast_log is None or fast_log.still_default() or self._core is None:
            return
        self._core_access_log = None
        self._core.divert_access_log(log_through_python)
        logger.debug("Logging reconfigured: access lines go through Python's logging now.")

    def _connections(self) -> int:
        return self._core.active_connections() if self._core is not None else 0

    def _server_counts(self) -> dict[str, Any] | None:
        """The core's counts for a metrics snapshot (after it closed: its last ones, which a
        worker's final snapshot carries)."""
        return self._core.server_counts() if self._core is not None else self._closed_counts

    def _core_config(self) -> Config:
        """The configuration the core reads (overridden by worker.WorkerServer)."""
        return self.config

    def _open_probes(self) -> ProbeServer | None:
        """The --health-port probes (overridden by worker.WorkerServer: the supervisor's)."""
        if self.config.health_port is None:
            return None
        return open_probes(self.config.health_host, self.config.health_port)

    def _not_ready(self) -> None:
        if self._probes is not None:
            self._probes.set_ready(False)

    def _open_metrics_endpoint(self) -> None:
        """Bind the endpoint (overridden by worker.WorkerServer: the supervisor serves it)."""
        sock = open_metrics_socket(self.config.metrics_host, self.config.metrics_port)
        self._metrics_server = MetricsServer(
            self.metrics,
            sock,
            self._connections,
            self._server_counts,
            ready=lambda: self.started and not self._stopping(),
        )

    async def _stop_metrics(self) -> None:
        """After the core closed (overridden by worker.WorkerServer)."""
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None

    async def _start_metrics(self) -> None:
        metrics_server = self._metrics_server
        if metrics_server is None:
            return
        await metrics_server.start()
        log_endpoint(metrics_server.address)

    def _max_requests_reached(self) -> bool:
        limit = self.config.limit_max_requests
        if limit is None or self._core is None or self._core.total_requests() < limit:
            return False
        logger.warning("Maximum request limit of %d exceeded. Terminating process.", limit)
        return True

    def _log_started(self) -> None:
        # Overridden by worker.WorkerServer (the supervisor logs the address once).
        log_listening(self.bound_addresses, "https" if self.config.is_ssl else "http")

    async def _shutdown(self) -> None:
        core = self._core
        if core is None:
            return
        logger.info("Shutting down")
        self._not_ready()
        core.stop_accepting()
        if self._unix_path:
            try:
                os.unlink(self._unix_path)
            except OSError:
                pass
        # Connections are counted from their accept, and one that has not started a request
        # yet gets a short grace to start it (src/server/connection.rs: FIRST_REQUEST_GRACE).
        core.shutdown()
        timeout = self.config.timeout_graceful_shutdown
        deadline = None if timeout is None else time.monotonic() + timeout
        await self._drain_connections(core, deadline)
        # Then the app's work that outlives its connection (background tasks after the
        # response, work after a WebSocket disconnect), within the same deadline. The core
        # keeps dispatching meanwhile: the events that end those calls' receive() or send()
        # (a disconnect) still reach them.
        app_calls = _AppCalls(core.app_task_name())
        await self._wait_for_app_calls(app_calls, deadline)
        core.close()
        self._closed_counts = core.server_counts()
        self._core = None
        await self._stop_metrics()
        # Give app tasks whose connections were just closed a moment to observe it.
        await asyncio.sleep(0)
        await self._cancel_app_calls(app_calls)

    async def _drain_connections(self, core: Core, deadline: float | None) -> None:
        if core.active_connections():
            logger.info("Waiting for connections to close. (CTRL+C to force quit)")
        while core.active_connections() and not self.force_exit:
            if _passed(deadline):
                logger.warning(
                    "Graceful shutdown timed out after %ss; closing %d connection(s).",
                    self.config.timeout_graceful_shutdown,
                    core.active_connections(),
                )
                return
            await asyncio.sleep(_TICK)

    async def _wait_for_app_calls(self, app_calls: _AppCalls, deadline: float | None) -> None:
        """Until every app call has returned, the deadline passed or a forced quit."""
        running = app_calls.running()
        if not running or self.force_exit or _passed(deadline):
            return
        logger.info(
            "Waiting for %d background task(s) to complete. (CTRL+C to force quit)", len(running)
        )
        while app_calls.running() and not self.force_exit and not _passed(deadline):
            await asyncio.sleep(_TICK)

    async def _cancel_app_calls(self, app_calls: _AppCalls) -> None:
        """Cancel the app calls still running (past the deadline, or a forced quit), so that
        lifespan shutdown runs after them; give them a moment to run their cleanup."""
        running = app_calls.running()
        if not running:
            return
        for task in running:
            task.cancel()
        if self.force_exit:
            logger.warning("Cancelled %d task(s): forced quit.", len(running))
            await asyncio.sleep(0)  # their except/finally blocks run up to their next await
            return
        logger.warning(
            "Cancelled %d task(s) after the graceful shutdown timeout of %ss.",
            len(running),
            self.config.timeout_graceful_shutdown,
        )
        await asyncio.wait(running, timeout=_CANCEL_GRACE)

    # ------------------------------------------------------------------ signals

    def handle_reload(self, sig: int, frame: Any = None) -> None:
        """SIGHUP with TLS: reload the certificate files (tls_reload.py)."""
        if self._tls_reloader is not None:
            self._tls_reloader.request()

    def handle_exit(self, sig: int, frame: Any = None) -> None:
        # /readyz fails from this instant, even while the app blocks the loop.
        self._not_ready()
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        elif self._stop_at is None and not self.should_exit and self._shutdown_delay() > 0:
            # The lame duck: serving on, unready, until the serving loop sees the time up.
            self._stop_at = time.monotonic() + self._shutdown_delay()
        else:
            self.should_exit = True  # a second signal ends the lame duck at once

    def _shutdown_delay(self) -> float:
        """--shutdown-delay (overridden by worker.WorkerServer: the supervisor keeps it)."""
        return self.config.shutdown_delay

    def _stopping(self) -> bool:
        """A stop signal came: in the lame-duck period or shutting down."""
        return self.should_exit or self._stop_at is not None

    def _check_lame_duck(self) -> None:
        """In the serving loop: log the lame duck's start, and end it when its time is up."""
        if self._stop_at is None:
            return
        if not self._lame_duck_logged:
            self._lame_duck_logged = True
            logger.info(
                "Not ready (/readyz answers 503); serving on for %ss before shutting down.",
                self.config.shutdown_delay,
            )
        if time.monotonic() >= self._stop_at:
            self.should_exit = True


class _AppCalls:
    """The asyncio tasks of a core's app calls that are still running: every one is named
    by the core (``Core.app_task_name``; src/asgi/spawn.rs ``task_name``), which is what
    sets them apart from the server's own tasks, the metrics endpoint's and any task the app
    starts by itself (none of which a shutdown waits for). Looked up only while shutting
    down: counting costs the requests nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def running(self) -> list[asyncio.Task[Any]]:
        return [task for task in asyncio.all_tasks() if task.get_name() == self.name]


def _passed(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


class _SignalCapture:
    """Installs SIGINT/SIGTERM handlers (and with TLS, SIGHUP's: reload the certificate)
    while serving (main thread only) and restores the previous ones afterwards."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalCapture:
        if threading.current_thread() is not threading.main_thread():
            return self
        handlers: dict[int, Any] = dict.fromkeys(_HANDLED_SIGNALS, self.server.handle_exit)
        if self.server.config.is_ssl and hasattr(signal, "SIGHUP"):
            handlers[signal.SIGHUP] = self.server.handle_reload
        for sig, handler in handlers.items():
            try:
                self.previous[sig] = signal.signal(sig, handler)
            except (OSError, ValueError):
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.previous.items():
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass


def _run_in_new_loop(
    coro: Coroutine[Any, Any, int], loop_factory: Callable[[], asyncio.AbstractEventLoop]
) -> int:
    """asyncio.run with a loop factory, for Python 3.9+ (Runner only exists from 3.11)."""
    loop = loop_factory()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        try:
            _cancel_all_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def run_config(config: Config) -> int:
    """Configure logging, serve until shutdown; the process exit code (0, 1 or 3).

    With ``workers > 1`` or ``reload`` this process becomes the supervisor of worker processes.
    """
    if config.workers > 1 or config.reload:
        return Supervisor(config).run()
    return run_server(Server(config))


def _failure_text(exc: BaseException) -> str:
    """What the stand-in says of a failed load: the one-line ConfigError as it is, any other
    exception (a SyntaxError in the module, say) with its type."""
    if isinstance(exc, ConfigError):
        return str(exc)
    return f"Error loading ASGI app. {type(exc).__name__}: {exc}"


def run_server(server: Server) -> int:
    """Configure logging and run ``server`` in a new event loop; the process exit code."""
    try:
        server.config.configure_logging()
    except ConfigError as exc:
        logger.error("%s", exc)
        return EXIT_CONFIG_ERROR
    try:
        return server.run()
    except ConfigError as exc:
        logger.error("%s", exc)
        return EXIT_CONFIG_ERROR
    except KeyboardInterrupt:
        return EXIT_OK


def run(app: Any, **options: Any) -> None:
    """Serve ``app`` (an ASGI callable or "module:attr") until interrupted, like uvicorn.run."""
    code = run_config(Config(app, **options))
    if code != EXIT_OK:
        raise SystemExit(code)


__all__ = ["Server", "log_listening", "run", "run_config", "run_server"]
