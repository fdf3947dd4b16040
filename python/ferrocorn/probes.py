"""``--health-port``: ``GET /livez`` and ``GET /readyz`` for load balancers and orchestrators,
answered by Rust on a thread of their own (``_ferrocorn.ProbeServer``, src/server/probes.rs),
so they answer while the app blocks the Python loop.

- ``/livez``: 200 while the process runs (and its probe thread answers).
- ``/readyz``: 503 until lifespan startup completed and the server accepts, 200 while
  serving, 503 again as soon as a graceful shutdown begins (the signal handler flips it, before
  the drain), so a load balancer stops sending before connections are closed.
- Any other path is 404, any other method 405; one request per connection (``Connection:
  close``), heads of at most 8 KiB, 5 s per exchange, 64 connections at once.

One process: the server (server.py) owns the probes. With a supervisor (``--workers N``,
``--reload``), the supervisor serves them (supervisor.py): ready while at least one worker has
reported ``ready`` and is not being stopped, and not once the supervisor stops; workers bind no
probe port. The metrics endpoint (``--metrics``) stays where it is, on its own port, and
answers the same two paths from the loop that serves it (metrics.py).
"""

from __future__ import annotations

import logging

from ._ferrocorn import ProbeServer
from .config import ConfigError
from .metrics import bind_metrics_socket

__all__ = ["open_probes"]

logger = logging.getLogger("ferrocorn.error")


def open_probes(host: str, port: int) -> ProbeServer:
    """Bind the probe port and serve it (not ready yet); ConfigError when it cannot be bound."""
    try:
        sock = bind_metrics_socket(host, port)
    except OSError as exc:
        raise ConfigError(f"Could not bind the health probes to {host}:{port}: {exc}") from exc
    bound_host, bound_port = sock.getsockname()[:2]
    probes = ProbeServer(sock.detach())
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    logger.info("Probes on http://%s:%d/livez and /readyz", shown, bound_port)
    return probes
