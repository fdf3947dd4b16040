"""A worker process of the supervisor: ``python -m ferrocorn.worker --fd N --ready-fd M``.

Not a public entry point: the supervisor (supervisor.py) starts it with the listening socket on
fd ``N``, the write end of a pipe on fd ``M`` and the configuration in an environment variable.
The worker serves like the single-process server, except that it logs ``Started worker [pid]``
instead of the address, writes ``ready`` on the pipe once it is serving, asks for a replacement
(``recycle``) instead of exiting when it reaches ``--limit-max-requests`` (the supervisor stops
it once the replacement serves), and stops by itself when the supervisor goes away.

With ``--metrics`` the supervisor serves the endpoint; the worker counts as usual and answers
the supervisor's snapshot requests on its end of a socket pair (``--metrics-fd``), binding no
port of its own.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

from ._ferrocorn import Core
from ._process_contract import (
    EXIT_CONFIG_ERROR,
    PAYLOAD_ENV,
    READY_LINE,
    RECYCLE_LINE,
    decode_payload,
)
from .app_loading import uvloop_module
from .config import Config, ConfigError
from .metrics import MetricsChannel
from .server import Server, run_server
from .slot_handover import serve_channel

logger = logging.getLogger("ferrocorn.error")

_PARENT_CHECK_INTERVAL = 0.5


class WorkerServer(Server):
    """A ``Server`` that talks to the supervisor through a pipe instead of printing the address
    (the supervisor printed it once) and of exiting at the request limit."""

    _udp_reuse_port = True

    def __init__(
        self,
        config: Config,
        pipe_fd: int | None,
        listen_fd: int | None = None,
        metrics_fd: int | None = None,
        control_fd: int | None = None,
    ) -> None:
        super().__init__(config)
        self._control_fd = control_fd
        self._pipe_fd = pipe_fd
        self._listen_fd = listen_fd
        self._metrics_fd = metrics_fd
        self._metrics_channel: MetricsChannel | None = None
        self._recycle_asked = False

    def _open_probes(self) -> None:
        return None  # the supervisor serves the probes

    def _core_config(self) -> Config:
        # Under a supervisor the worker serves on past --limit-max-requests until its
        # replacement serves (the supervisor then stops it): the core must not start its own
        # drain at the limit, which would leave the slot's connections queued meanwhile.
        if self._pipe_fd is None or self.config.limit_max_requests is None:
            return self.config
        config = copy.copy(self.config)
        config.limit_max_requests = None
        return config

    def _shutdown_delay(self) -> float:
        return 0.0  # the supervisor waits out --shutdown-delay before it stops the workers

    def _open_metrics_endpoint(self) -> None:
        fd, self._metrics_fd = self._metrics_fd, None
        if fd is None:
            return  # not started by a supervisor that collects: count, serve nothing
        metrics = self.metrics
        assert metrics is not None
        self._metrics_channel = MetricsChannel(
            socket.socket(fileno=fd),
            lambda: metrics.snapshot(self._connections(), self._server_counts()),
        )

    async def _start_metrics(self) -> None:
        if self._metrics_channel is not None:
            await self._metrics_channel.start()

    async def _stop_metrics(self) -> None:
        channel, self._metrics_channel = self._metrics_channel, None
        if channel is not None:
            await channel.send_final()
            channel.close()

    def _tell_supervisor(self, line: bytes) -> bool:
        """Write ``line`` on the pipe; False when the supervisor cannot hear it."""
        if self._pipe_fd is None:
            return False
        try:
            os.write(self._pipe_fd, line)
        except OSError:  # the supervisor is gone; _watch_parent stops this worker
            os.close(self._pipe_fd)
            self._pipe_fd = None
            return False
        return True

    def _log_started(self) -> None:
        # Serving: the core has its own descriptor of the socket.  Close the inherited one, so
        # that the socket leaves this process as soon as the core stops accepting.
        fd, self._listen_fd = self._listen_fd, None
        if fd is not None:
            os.close(fd)
        logger.info("Started worker [%d]", os.getpid())
        control, self._control_fd = self._control_fd, None
        if control is not None:
            # From now on the supervisor may hand this worker a sibling slot's socket.
            serve_channel(socket.socket(fileno=control), self._serving_core)
        self._tell_supervisor(READY_LINE)

    def _serving_core(self) -> Core | None:
        """The core while it accepts (for slot handover), else None."""
        return None if self.should_exit else self._core

    def _max_requests_reached(self) -> bool:
        if self._recycle_asked:
            return False  # serving on until the supervisor stops this worker
        limit = self.config.limit_max_requests
        core = self._core
        if limit is None or core is None or core.total_requests() < limit:
            return False
        if not self._tell_supervisor(RECYCLE_LINE):
            return super()._max_requests_reached()  # nobody to ask: exit like a lone server
        self._recycle_asked = True
        logger.info(
            "Maximum request limit of %d reached; worker [%d] finishes its requests in flight "
            "and stops once its replacement serves.",
            limit,
            os.getpid(),
        )
        return False


def _watch_parent(parent_pid: int) -> None:
    """Stop this worker (SIGTERM to itself: graceful once serving) when its parent dies."""
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_CHECK_INTERVAL)
    logger.warning("Supervisor [%d] is gone; worker [%d] stops.", parent_pid, os.getpid())
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ferrocorn.worker",
        description="A ferrocorn worker process (started by the ferrocorn supervisor).",
    )
    parser.add_argument("--fd", type=int, required=True, help="the listening socket")
    parser.add_argument("--ready-fd", type=int, required=True, help="pipe for the ready line")
    parser.add_argument("--limit-max-requests", type=int, default=None)
    parser.add_argument("--metrics-fd", type=int, default=None, help="socket for metrics")
    parser.add_argument("--control-fd", type=int, default=None, help="slot handover channel")
    args = parser.parse_args(argv)
    os.set_inheritable(args.ready_fd, False)  # not for the app's own subprocesses
    for fd in (args.metrics_fd, args.control_fd):
        if fd is not None:
            os.set_inheritable(fd, False)

    encoded = os.environ.pop(PAYLOAD_ENV, None)
    try:
        if encoded is None:
            raise ValueError(f"{PAYLOAD_ENV} is not set")
        payload = decode_payload(encoded)
    except Exception as exc:  # a broken payload is a bug or a manual start: say so briefly
        print(
            f"Error: ferrocorn.worker is started by the ferrocorn supervisor ({exc}).",
            file=sys.stderr,
        )
        return EXIT_CONFIG_ERROR
    # The supervisor's import path, as multiprocessing's spawn does: the app imports the same.
    sys.path[:] = payload["sys_path"]
    fds = WorkerFds(args.fd, args.ready_fd, args.metrics_fd, args.control_fd)
    return serve(payload, fds, args.limit_max_requests, payload["supervisor_pid"])


class WorkerFds:
    """The descriptors a worker gets: its listening socket, its pipe to the supervisor, and
    (optional) its metrics socket and slot-handover channel."""

    __slots__ = ("control", "listen", "metrics", "ready")

    def __init__(self, listen: int, ready: int, metrics: int | None, control: int | None):
        self.listen = listen
        self.ready = ready
        self.metrics = metrics
        self.control = control


# Modules a worker imports only once it serves (the core imports the request task class as it
# starts; asyncio's default executor, concurrent.futures' threads).
_IMPORTED_WHILE_SERVING = ("ferrocorn._request_task", "concurrent.futures.thread")


def import_ahead(payload: dict[str, Any]) -> None:
    """Import what ``serve`` would import as each worker starts, for a template to fork from:
    a fork then shares these modules instead of importing them again."""
    try:
        uvloop_module(payload["options"].get("loop", "auto"))
    except ConfigError:
        pass  # each worker reports it as it starts, as without a template
    for name in _IMPORTED_WHILE_SERVING:
        importlib.import_module(name)


def serve(payload: dict[str, Any], fds: WorkerFds, limit: int | None, parent_pid: int) -> int:
    """Serve as a worker until stopped; the exit code.  ``parent_pid``: the process whose
    death stops this worker (the supervisor, or the template it was forked from)."""
    options = dict(payload["options"])
    options.update(
        fd=fds.listen,
        uds=None,
        workers=1,
        reload=False,
        limit_max_requests=limit,
        limit_max_requests_jitter=0,
        env_file=None,  # the supervisor loaded it; its environment is inherited
    )
    try:
        config = Config(payload["app"], **options)
    except ConfigError as exc:
        logger.error("%s", exc)
        return EXIT_CONFIG_ERROR
    server = WorkerServer(config, fds.ready, fds.listen, fds.metrics, fds.control)
    server.stand_in_on_failure = bool(payload.get("stand_in_on_failure"))
    threading.Thread(
        target=_watch_parent,
        args=(parent_pid,),
        name="ferrocorn-parent-watch",
        daemon=True,
    ).start()
    return run_server(server)


if __name__ == "__main__":
    sys.exit(main())
