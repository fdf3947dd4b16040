"""``--metrics`` with a supervisor: the supervisor serves the one endpoint for all its workers.

Collection: for every worker the supervisor makes a socket pair and hands one end to the worker
(``--metrics-fd``; ``metrics.MetricsChannel`` answers there), so workers bind no port and a
worker's channel dies with it.  A scrape asks every serving worker at once for its snapshot and
waits at most ``WORKER_TIMEOUT`` for each: a worker whose event loop is blocked is reported with
``ferrocorn_worker_up 0`` instead of holding the scrape.  The endpoint runs on its own event
loop in a thread of the supervisor, so the supervisor's loop (signals, worker pipes) never waits
for it; that loop only hands it events (``add_worker``, ``worker_ready``, ``worker_exited``).

What a scrape returns:

* the request families of ``metrics.py`` under their usual names, summed over the workers: the
  counters and the histogram also include what the workers that are gone had counted (their
  last snapshot; a worker that stops gracefully sends a final one), so they never go back when
  a worker dies or is replaced, and a worker that does not answer counts with its last answer;
  the gauges are the sums over the workers that answered;
* the same families per worker, as ``ferrocorn_worker_<name>{worker="<slot>",pid="<pid>"}`` (a
  separate family, so that ``sum()`` over a family never counts twice); ``worker`` is the slot,
  kept by the worker's replacements, ``pid`` tells the processes apart;
* the supervisor's view: ``ferrocorn_workers`` (worker processes running),
  ``ferrocorn_workers_configured`` (the number it keeps: ``--workers``, SIGTTIN/SIGTTOU),
  ``ferrocorn_worker_restarts_total{reason}`` (``crashed``: ended without being asked, which
  includes failed starts; ``recycled``: at ``--limit-max-requests``; ``reloaded``: SIGHUP or
  ``--reload``), ``ferrocorn_worker_up{worker,pid}`` (1: answered this scrape; 0: starting,
  stopping or stuck) and ``ferrocorn_worker_start_time_seconds{worker,pid}`` (Unix time).

``GET /health`` answers ``200 ok`` while at least one worker serves, else ``503``.

Counts a worker made after the last scrape are lost when it is killed (SIGKILL, a crash): only
a graceful stop sends the final snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from typing import Any, Callable

from .metrics import (
    FINAL_TAG,
    GAUGE_KEYS,
    MetricsServer,
    counters_of,
    decode_snapshot,
    empty_snapshot,
    merge_snapshots,
    render_request_families,
)

__all__ = ["RESTART_REASONS", "SupervisorMetrics", "WORKER_TIMEOUT"]

logger = logging.getLogger("ferrocorn.error")

WORKER_TIMEOUT = 1.0  # seconds a scrape waits for each worker's answer
EXIT_GRACE = 1.0  # after a worker exited: time to read what it wrote last (its final snapshot)
RESTART_REASONS = ("crashed", "recycled", "reloaded")
_START_TIMEOUT = 10.0
_STOP_TIMEOUT = 5.0


_MAX_LINE = 1 << 20  # a snapshot is a few hundred bytes


class _Entry:
    """One worker process, as the endpoint's loop sees it.

    The channel is a plain non-blocking socket read with ``loop.add_reader``: unlike asyncio
    streams, a failed write (the worker just exited) does not discard what it wrote before."""

    __slots__ = (
        "buffer",
        "closed",
        "done",
        "exited",
        "last",
        "pending",
        "pid",
        "ready",
        "slot",
        "sock",
        "start_time",
    )

    def __init__(self, slot: int, pid: int, sock: socket.socket, start_time: float) -> None:
        self.slot = slot
        self.pid = pid
        self.sock = sock  # the supervisor's end of the socket pair
        self.start_time = start_time
        self.ready = False  # serving (it wrote "ready" on its pipe)
        self.exited = False  # the supervisor reaped it
        self.closed = False  # the channel reached EOF (or was closed)
        self.done: asyncio.Future[None] | None = None  # resolved once closed
        self.buffer = bytearray()
        self.last: dict[str, Any] | None = None  # its latest snapshot
        self.pending: dict[bytes, asyncio.Future[dict[str, Any] | None]] = {}

    @property
    def labels(self) -> str:
        return f'worker="{self.slot}",pid="{self.pid}"'


class SupervisorMetrics:
    """The endpoint on ``sock`` (bound by the caller), run in a thread by ``start``/``stop``.

    The ``add_worker``/``worker_ready``/``worker_exited`` calls may come from any thread; the
    state they change lives on the endpoint's loop, where every other method runs.
    """

    def __init__(self, sock: socket.socket, configured: Callable[[], int]) -> None:
        self.sock = sock
        self._configured = configured
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self._workers: dict[int, _Entry] = {}  # by pid, in start order
        self._gone = empty_snapshot()  # the counters of the workers that are gone
        self._restarts = dict.fromkeys(RESTART_REASONS, 0)
        self._next_tag = 0
        self._retiring: set[asyncio.Task[None]] = set()  # strong references to _retire tasks
        # /readyz: set by the supervisor's loop (its own view of the workers, as for
        # --health-port); one bool, read by the endpoint's thread.
        self.ready = False

    @property
    def address(self) -> tuple[Any, ...]:
        return self.sock.getsockname()

    # ------------------------------------------------------------------ thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ferrocorn-metrics", daemon=True)
        self._thread.start()
        if not self._running.wait(_START_TIMEOUT):
            logger.error("The metrics endpoint did not start.")

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(self._request_stop)
            thread.join(_STOP_TIMEOUT)
        else:
            self.sock.close()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except Exception:  # the supervisor goes on without metrics rather than dying
            logger.exception("The metrics endpoint failed.")
        finally:
            self._running.set()  # unblock start() if serving never began
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            for entry in self._workers.values():
                self._close_channel(entry)
            self._loop = None
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.get_running_loop().create_future()
        endpoint = _Endpoint(self, self.sock)
        try:
            await endpoint.start()
            self._running.set()
            await self._stop
        finally:
            endpoint.close()

    def _request_stop(self) -> None:
        if self._stop is not None and not self._stop.done():
            self._stop.set_result(None)

    def _call(self, func: Callable[..., Any], *args: Any) -> bool:
        """Run ``func(*args)`` on the endpoint's loop; False when it is not running."""
        loop = self._loop
        if loop is None:
            return False
        try:
            loop.call_soon_threadsafe(func, *args)
        except RuntimeError:  # closed
            return False
        return True

    # ------------------------------------------------------------------ events (any thread)

    def add_worker(self, slot: int, pid: int, sock: socket.socket) -> None:
        """A worker was started with the other end of ``sock``; the endpoint owns ``sock`` now."""
        if not self._call(self._add, _Entry(slot, pid, sock, time.time())):
            sock.close()

    def worker_ready(self, pid: int) -> None:
        self._call(self._ready, pid)

    def worker_exited(self, pid: int, reason: str | None) -> None:
        """The worker was reaped; ``reason`` (one of ``RESTART_REASONS``) counts a restart."""
        self._call(self._exited, pid, reason)

    # ------------------------------------------------------------------ on the loop

    def _add(self, entry: _Entry) -> None:
        loop = asyncio.get_running_loop()
        self._workers[entry.pid] = entry
        entry.done = loop.create_future()
        entry.sock.setblocking(False)
        loop.add_reader(entry.sock.fileno(), self._readable, entry)

    def _ready(self, pid: int) -> None:
        entry = self._workers.get(pid)
        if entry is not None:
            entry.ready = True

    def _exited(self, pid: int, reason: str | None) -> None:
        if reason is not None:
            self._restarts[reason] += 1
        entry = self._workers.get(pid)
        if entry is not None and not entry.exited:
            entry.exited = True
            task = asyncio.ensure_future(self._retire(entry))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    async def _retire(self, entry: _Entry) -> None:
        """Wait (briefly) for the end of what the worker wrote, then keep only its counters.

        The channel normally ends with the process; a child the app forked may still hold the
        worker's end, hence the grace period instead of waiting for EOF."""
        if entry.done is not None and not entry.done.done():
            await asyncio.wait({entry.done}, timeout=EXIT_GRACE)
        self._close_channel(entry)
        if entry.last is not None:
            self._gone = merge_snapshots([self._gone, counters_of(entry.last)])
        self._workers.pop(entry.pid, None)

    def _readable(self, entry: _Entry) -> None:
        """The worker's lines: answers (``<tag> <snapshot>``) and the final snapshot."""
        try:
            data = entry.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # ECONNRESET comes after the data the worker wrote
            logger.debug("Metrics channel of worker [%d]: %s", entry.pid, exc)
            data = b""
        if not data:
            self._close_channel(entry)
            return
        entry.buffer += data
        *lines, rest = entry.buffer.split(b"\n")
        if len(rest) > _MAX_LINE:
            logger.debug("Worker [%d] sent an overlong metrics line.", entry.pid)
            self._close_channel(entry)
            return
        entry.buffer = bytearray(rest)
        for line in lines:
            tag, _, payload = bytes(line).partition(b" ")
            try:
                snapshot = decode_snapshot(payload)
            except ValueError as exc:
                logger.debug("Worker [%d] sent a bad metrics line: %s", entry.pid, exc)
                continue
            # The worker answers in order, and "final" comes after every answer.
            entry.last = snapshot
            future = entry.pending.pop(tag, None)
            if future is not None and not future.done():
                future.set_result(snapshot)
            elif tag == FINAL_TAG:
                logger.debug("Worker [%d] sent its final metrics.", entry.pid)

    def _close_channel(self, entry: _Entry) -> None:
        if entry.closed:
            return
        entry.closed = True
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(ValueError, OSError):  # never registered, or closed
                loop.remove_reader(entry.sock.fileno())
        entry.sock.close()
        for future in entry.pending.values():
            if not future.done():
                future.set_result(None)
        entry.pending.clear()
        if entry.done is not None and not entry.done.done():
            entry.done.set_result(None)

    async def _ask(self, entry: _Entry) -> dict[str, Any] | None:
        """The worker's snapshot now; None when it does not answer within ``WORKER_TIMEOUT``."""
        if entry.closed:
            return None
        self._next_tag += 1
        tag = str(self._next_tag).encode()
        future: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        entry.pending[tag] = future
        try:
            # A few bytes: they fit unless the worker has not read for a long time (then it
            # would not answer anyway).  A failed send leaves the reading side alone.
            entry.sock.send(tag + b"\n")
            return await asyncio.wait_for(future, WORKER_TIMEOUT)
        except (OSError, asyncio.TimeoutError):
            return None
        finally:
            entry.pending.pop(tag, None)

    async def render(self) -> str:
        """The scrape: ask the serving workers, then sum and render (see the module doc)."""
        asked = [e for e in self._workers.values() if e.ready and not e.exited]
        answers = await asyncio.gather(*(self._ask(e) for e in asked))
        answered = {e.pid for e, answer in zip(asked, answers) if answer is not None}
        # From here on nothing awaits: one consistent state.  A worker that exited while we
        # waited may have moved its counters to _gone already; it is not in _workers then.
        current = list(self._workers.values())
        totals = merge_snapshots(
            [self._gone] + [counters_of(e.last) for e in current if e.last is not None]
        )
        live = [e for e in current if not e.exited]
        serving = [e for e in live if e.pid in answered and e.last is not None]
        for key in GAUGE_KEYS:
            totals[key] = sum(e.last[key] for e in serving if e.last is not None)
        lines = render_request_families([("", totals)])
        lines += render_request_families(
            [(e.labels, e.last) for e in serving if e.last is not None],
            prefix="ferrocorn_worker_",
            scope=", per worker",
        )
        lines += [
            "# HELP ferrocorn_workers Worker processes running.",
            "# TYPE ferrocorn_workers gauge",
            f"ferrocorn_workers {len(live)}",
            "# HELP ferrocorn_workers_configured Worker processes the supervisor keeps.",
            "# TYPE ferrocorn_workers_configured gauge",
            f"ferrocorn_workers_configured {self._configured()}",
            "# HELP ferrocorn_worker_restarts_total Worker processes replaced, by reason.",
            "# TYPE ferrocorn_worker_restarts_total counter",
        ]
        lines += [
            f'ferrocorn_worker_restarts_total{{reason="{reason}"}} {count}'
            for reason, count in self._restarts.items()
        ]
        lines += [
            "# HELP ferrocorn_worker_up Whether the worker answered this scrape.",
            "# TYPE ferrocorn_worker_up gauge",
        ]
        lines += [f"ferrocorn_worker_up{{{e.labels}}} {int(e.pid in answered)}" for e in live]
        lines += [
            "# HELP ferrocorn_worker_start_time_seconds Start time of the worker since the epoch.",
            "# TYPE ferrocorn_worker_start_time_seconds gauge",
        ]
        lines += [
            f"ferrocorn_worker_start_time_seconds{{{e.labels}}} {e.start_time!r}" for e in live
        ]
        return "\n".join(lines) + "\n"

    def serving(self) -> bool:
        return any(e.ready and not e.exited and not e.closed for e in self._workers.values())


class _Endpoint(MetricsServer):
    """``MetricsServer``'s HTTP handling with the supervisor's body and health."""

    def __init__(self, metrics: SupervisorMetrics, sock: socket.socket) -> None:
        super().__init__(None, sock, ready=lambda: metrics.ready)
        self.source = metrics

    async def metrics_body(self) -> bytes:
        return (await self.source.render()).encode()

    def health(self) -> tuple[int, bytes]:
        if self.source.serving():
            return 200, b"ok"
        return 503, b"no worker is serving\n"
