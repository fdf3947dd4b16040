"""Reloading the TLS certificate, key and CA bundle while serving.

Two triggers: SIGHUP to a single-process server (``request()``, from the signal handler), and
with ``--ssl-reload-interval`` a look every so many seconds at the files' modification time,
size and inode, reloading when one changed.  (With ``--workers`` the supervisor answers SIGHUP
by replacing the workers, which load the files as they start; each worker runs its own
interval check.)  The files are read and checked in a thread, off the event loop; the core
then hands the new configuration to new handshakes (``Core.reload_tls``), while established
connections keep theirs.  A reload that fails keeps the current certificate and logs one error
naming the file and the reason: once per change of the files, not once per look.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from .config import ConfigError

if TYPE_CHECKING:
    from ._ferrocorn import Core
    from .config import Config

__all__ = ["TlsReloader"]

logger = logging.getLogger("ferrocorn.error")

# Per file: (path, mtime_ns, size, inode), or (path,) when it cannot be read.
_Signature = tuple[tuple[Any, ...], ...]


def _signature(paths: list[str]) -> _Signature:
    looks: list[tuple[Any, ...]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            looks.append((path,))
        else:
            looks.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(looks)


class TlsReloader:
    """Driven by the server's tick (``tick()``); at most one reload runs at a time."""

    def __init__(self, config: Config, core: Core) -> None:
        self.config = config
        self.core = core
        self.paths = [
            os.fspath(p)
            for p in (config.ssl_certfile, config.ssl_keyfile, config.ssl_ca_certs)
            if p is not None
        ]
        self.interval: float | None = config.ssl_reload_interval
        # What the files looked like when they were last loaded (or tried).
        self.loaded = _signature(self.paths)
        self.next_look = time.monotonic() + self.interval if self.interval else None
        self.requested = False
        self.running: asyncio.Task[None] | None = None

    def request(self) -> None:
        """Reload at the next tick, changed or not (SIGHUP; safe in a signal handler)."""
        self.requested = True

    def tick(self) -> None:
        if self.running is not None and not self.running.done():
            return
        force = self.requested
        now = time.monotonic()
        due = self.next_look is not None and now >= self.next_look
        if not force and not due:
            return
        self.requested = False
        if self.interval and due:
            self.next_look = now + self.interval
        self.running = asyncio.get_running_loop().create_task(self._reload(force))

    async def _reload(self, force: bool) -> None:
        loop = asyncio.get_running_loop()
        signature = await loop.run_in_executor(None, _signature, self.paths)
        if not force and signature == self.loaded:
            return
        self.loaded = signature
        try:
            # The config's own loader: the same checks and messages as at start-up.
            tls = await loop.run_in_executor(None, self.config._load_tls)
        except ConfigError as exc:
            logger.error("TLS reload failed, still serving the previous certificate: %s", exc)
            return
        self.core.reload_tls(tls)
        logger.info("TLS certificate reloaded from %s", self.config.ssl_certfile)
