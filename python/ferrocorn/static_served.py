"""What the loop does with a response of the core's static route (``--static-path-*``):
count it in the request metrics and, when the core does not write the access log itself
(``logged`` False: another logging configuration), log its line through ``logging`` —
the same line an app response gets (``_asgi.py``)."""

from __future__ import annotations

import logging
from typing import Callable

from .metrics import RequestMetrics

access_logger = logging.getLogger("ferrocorn.access")

# client, method, path, http_version, status, bytes, seconds, logged
ServedCallback = Callable[[str, str, str, str, int, int, float, bool], None]


def served_callback(metrics: RequestMetrics | None, access_log: bool) -> ServedCallback | None:
    """The callback for ``Core.on_static_served``, or None when nothing needs it."""
    if metrics is None and not access_log:
        return None

    def static_served(
        client: str,
        method: str,
        path: str,
        version: str,
        status: int,
        sent: int,
        seconds: float,
        logged: bool,
    ) -> None:
        if metrics is not None:
            metrics.started += 1
            metrics.observe_wait(0.0)  # never queued for the loop
            metrics.observe(status, seconds)
        if access_log and not logged:
            access_logger.info('%s - "%s %s HTTP/%s" %d', client, method, path, version, status)

    return static_served
