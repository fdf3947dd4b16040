"""The ASGI lifespan protocol: startup before serving, shutdown after draining."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger("ferrocorn.error")

LIFESPAN_SPEC_VERSION = "2.0"


class Lifespan:
    """Runs the app's lifespan scope as a task and talks to it through a queue.

    ``mode`` is "on" (a failure to start is fatal) or "auto" (an app that raises before
    acknowledging startup is taken not to support lifespan, and is served anyway).
    """

    def __init__(self, app: Any, mode: str, asgi_version: str, state: dict) -> None:
        self.app = app
        self.mode = mode
        self.asgi_version = asgi_version
        self.state = state
        self._queue: asyncio.Queue[dict] = asyncio.Queue()
        self._startup_done = asyncio.Event()
        self._shutdown_done = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.startup_failed = False
        self.shutdown_failed = False
        self.unsupported = False
        self.error_message: str | None = None

    async def startup(self) -> bool:
        """True when the server may serve."""
        logger.info("Waiting for application startup.")
        self._task = asyncio.get_running_loop().create_task(self._main())
        await self._queue.put({"type": "lifespan.startup"})
        await self._startup_done.wait()
        if self.startup_failed:
            return False
        if not self.unsupported:
            logger.info("Application startup complete.")
        return True

    async def shutdown(self) -> None:
        if self.unsupported or self._task is None or self._task.done():
            return
        logger.info("Waiting for application shutdown.")
        await self._queue.put({"type": "lifespan.shutdown"})
        await self._shutdown_done.wait()
        if not self.shutdown_failed:
            logger.info("Application shutdown complete.")

    async def _main(self) -> None:
        scope = {
            "type": "lifespan",
            "asgi": {"version": self.asgi_version, "spec_version": LIFESPAN_SPEC_VERSION},
            "state": self.state,
        }
        try:
            await self.app(scope, self._receive, self._send)
        except BaseException as exc:
            if self._startup_done.is_set() and not self._shutdown_done.is_set():
                self.shutdown_failed = True
                logger.error("Exception in 'lifespan' protocol during shutdown", exc_info=exc)
            elif not self._startup_done.is_set():
                if self.mode == "auto":
                    self.unsupported = True
                    logger.info("ASGI 'lifespan' protocol appears unsupported.")
                else:
                    self.startup_failed = True
                    self.error_message = f"{type(exc).__name__}: {exc}"
                    logger.error("Exception in 'lifespan' protocol", exc_info=exc)
        else:
            if not self._startup_done.is_set():
                # Returned without acknowledging startup: nothing more to expect from it.
                self.unsupported = self.mode == "auto"
                if not self.unsupported:
                    self.startup_failed = True
                    logger.error("ASGI 'lifespan' app returned before completing startup.")
        finally:
            self._startup_done.set()
            self._shutdown_done.set()

    async def _receive(self) -> dict:
        return await self._queue.get()

    async def _send(self, message: dict) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "lifespan.startup.complete":
            self._check(not self._startup_done.is_set(), kind)
            self._startup_done.set()
        elif kind == "lifespan.startup.failed":
            self._check(not self._startup_done.is_set(), kind)
            self.startup_failed = True
            self.error_message = str(message.get("message", ""))
            logger.error("Application startup failed. %s", self.error_message)
            self._startup_done.set()
        elif kind == "lifespan.shutdown.complete":
            self._check(self._startup_done.is_set(), kind)
            self._shutdown_done.set()
        elif kind == "lifespan.shutdown.failed":
            self._check(self._startup_done.is_set(), kind)
            self.shutdown_failed = True
            logger.error("Application shutdown failed. %s", message.get("message", ""))
            self._shutdown_done.set()
        else:
            raise ValueError(f"Unexpected ASGI lifespan message type {kind!r}")

    @staticmethod
    def _check(ok: bool, kind: str) -> None:
        if not ok:
            raise RuntimeError(f"Unexpected ASGI lifespan message {kind!r} at this point")
