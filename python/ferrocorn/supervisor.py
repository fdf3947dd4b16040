"""The supervisor: with ``--workers N`` (N > 1) or ``--reload`` the command binds the listening
socket and runs worker processes that serve it.

- Workers are fresh interpreters (``python -m ferrocorn.worker``): the Rust runtime's threads
  do not survive ``fork()``, and spawning works the same on CPython and PyPy.  The exception:
  with ``--limit-max-requests`` the replacements of recycled workers are forked from a
  template process that imported ferrocorn (and the app too with ``--recycle-fork``) and
  never started a thread (``template.py``).
  A worker inherits its listening socket and the write end of a pipe on which it writes
  ``ready`` once it is serving (lifespan started, accepting) and ``recycle`` when it reaches
  ``--limit-max-requests``.
- TCP: one ``SO_REUSEPORT`` socket per worker *slot*, all bound to the address; the supervisor
  keeps every slot's socket open and hands it to the slot's worker, and to its replacement.
  Measured with ``wrk -t2 -c128 -d5s`` against 2 workers on 2 cores (plain-text app, release
  build, 6 alternating runs on a busy machine): one shared socket (``--fd``) gave
  48k/54k/35k/50k/50k/43k requests/s (median 49k; the kernel wakes every worker, and the one
  whose tokio thread is already running takes the burst: in one run a worker accepted nearly
  all 128 connections), SO_REUSEPORT sockets 59k/58k/55k/59k/52k/56k (median 57k, the CPU split
  evenly every time).  A socket that stays open in the supervisor loses nothing when its
  worker stops (SIGHUP, recycling, a crash): the kernel keeps queueing on it, and the next
  worker of the slot (during SIGHUP and recycling, already serving) accepts from the same
  queue.  While a slot has no worker serving (after a crash, until the replacement serves),
  the supervisor hands its socket to a live worker, which accepts on it meanwhile
  (``slot_handover.py``).  Only
  SIGTTOU, which closes a slot, can reset connections queued on that slot's socket in the
  instant between its worker's last accept and its close (the supervisor lets go of the socket
  first, and the worker holds it only while it accepts).
- ``--uds``, ``--fd`` and systemd socket activation: every worker shares the one socket.
- Off Linux (and in a build with the ``portable`` feature: ``LINUX_FAST_PATHS``), TCP too:
  macOS and the BSDs accept SO_REUSEPORT but do not balance connections over the sockets.
- A worker that dies is replaced at once.  A start fails when the worker exits before it is
  serving, or abnormally within ``START_WINDOW`` seconds of being started;
  ``MAX_FAILED_STARTS`` failed starts in a row stop the supervisor (exit code 3 when the workers
  failed lifespan startup, else 1).  With ``--reload`` there is no such limit: the supervisor waits
  for the next file change instead.
- A worker at its request limit keeps serving until its replacement serves, then is stopped;
  workers of different slots due at the same time are replaced at the same time.
- ``--metrics``: the supervisor serves the endpoint and collects the workers' counts over a
  socket pair per worker (``supervisor_metrics.py``).
- Signals: SIGTERM/SIGINT stop the workers gracefully and exit 0 (a second SIGINT kills them);
  SIGHUP replaces the workers one at a time (start a new one, wait until it is serving, then
  stop the old one); SIGTTIN/SIGTTOU add/remove a worker.

The loop is single-threaded: signals arrive as bytes on a pipe (``signal.set_wakeup_fd``), the
workers' lines on their pipes, file changes from the watcher thread as a zero byte on the
signal pipe; exits are found by polling the workers whenever the loop wakes (SIGCHLD wakes it).
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Callable

from ._ferrocorn import LINUX_FAST_PATHS
from ._process_contract import (
    EXIT_CONFIG_ERROR,
    EXIT_OK,
    EXIT_STARTUP_FAILED,
    PAYLOAD_ENV,
    READY_LINE,
    RECYCLE_LINE,
    encode_payload,
    log_listening,
)
from .config import Config, ConfigError, socket_kind
from .metrics import log_endpoint, open_metrics_socket
from .probes import open_probes
from .slot_handover import SlotCovers, channel_pair
from .supervisor_metrics import SupervisorMetrics
from .template import ForkedProcess, Template

if TYPE_CHECKING:
    from ._ferrocorn import ProbeServer

logger = logging.getLogger("ferrocorn.error")

START_WINDOW = 5.0
MAX_FAILED_STARTS = 5
# Pause before the next start after a failed one: 0.1 s, doubling, at most 1 s.
_RETRY_DELAY_FIRST = 0.1
_RETRY_DELAY_MAX = 1.0
# Beyond timeout_graceful_shutdown: lifespan shutdown and interpreter exit of the workers.
SHUTDOWN_MARGIN = 5.0
_IDLE_WAKEUP = 1.0  # the loop wakes at least this often

_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGTTIN", "SIGTTOU", "SIGCHLD")
    if hasattr(signal, name)
)
_WAKE = b"\0"  # not a signal number: "look at the reloader's changes"

# Also excluded: the directories watchfiles' DefaultFilter ignores (.git, __pycache__, ...).
DEFAULT_RELOAD_INCLUDES = ("*.py",)
DEFAULT_RELOAD_EXCLUDES = (".*", "*.py[cod]", "*.sw?", "*~")


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"was killed by signal {name}"
    return f"exited with code {code}"


class _Worker:
    __slots__ = (
        "control",
        "for_sighup",
        "judged",
        "pid",
        "pipe_fd",
        "proc",
        "ready",
        "recycle",
        "replaces",
        "retire_reason",
        "retiring",
        "slot",
        "started",
    )

    def __init__(
        self,
        proc: subprocess.Popen[bytes] | ForkedProcess,
        pipe_fd: int,
        slot: int,
        control: socket.socket | None,
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.pipe_fd: int | None = pipe_fd  # read end of its pipe until EOF
        self.slot = slot
        self.started = time.monotonic()
        self.ready = False  # it wrote "ready"
        self.recycle = False  # it wrote "recycle": wants a replacement
        self.retiring = False  # asked to stop (SIGTERM sent)
        self.retire_reason: str | None = None  # why, when it is a restart ("recycled", ...)
        self.judged = False  # its start was counted as a success
        self.replaces: _Worker | None = None  # the worker it replaces once it serves
        self.for_sighup = False  # ... as part of a SIGHUP restart
        self.control = control  # our end of its slot-handover channel (slot_handover.py)


class Supervisor:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.target = config.workers
        self.workers: list[_Worker] = []
        self.exit_code = EXIT_OK
        self._sockets: list[socket.socket] = []  # per slot; one shared socket if not _reuse_port
        self._reuse_port = False
        self._payload = ""
        self._selector = selectors.DefaultSelector()
        self._wake_fd: int | None = None
        self._stopping = False
        self._stop_deadline: float | None = None
        # --shutdown-delay: when the lame-duck period a stop signal began ends.
        self._stop_at: float | None = None
        self._failed_starts = 0
        self._next_start = 0.0  # no start before this (after a failed start)
        self._roll_queue: list[_Worker] = []  # old workers SIGHUP still has to replace
        self._rolling = False
        # Started to replace another worker, not serving yet: one at a time for SIGHUP, one
        # per worker at its request limit (slots recycle in parallel).
        self._replacements: list[_Worker] = []
        self._reloader: _Reloader | None = None
        self._reload_at: float | None = None
        self._changes: set[str] = set()
        self._wait_for_change = False  # --reload: the app failed to start; wait for an edit
        self._metrics: SupervisorMetrics | None = None  # --metrics: the endpoint
        self._probes: ProbeServer | None = None  # --health-port (probes.py)
        self._covers = SlotCovers()  # slots with no worker serving, covered by a sibling
        # --limit-max-requests: forks the replacements of recycled workers (template.py);
        # retired ones (SIGHUP) until they exit.
        self._template: Template | None = None
        self._old_templates: list[Template] = []

    # ------------------------------------------------------------------ running

    def run(self) -> int:
        """Bind, run the workers until told to stop; the process exit code."""
        config = self.config
        try:
            config.configure_logging()
            if threading.current_thread() is not threading.main_thread():
                raise ConfigError("workers > 1 and reload need the main thread (for signals).")
            self._payload = self._make_payload()
            if config.reload:
                self._reloader = _Reloader(config, self._wake)
            self._bind()
            self._start_template()
            if config.metrics:
                sock = open_metrics_socket(config.metrics_host, config.metrics_port)
                self._metrics = SupervisorMetrics(sock, lambda: self.target)
            if config.health_port is not None:
                self._probes = open_probes(config.health_host, config.health_port)
        except ConfigError as exc:
            logger.error("%s", exc)
            self._close_sockets()
            return EXIT_CONFIG_ERROR
        try:
            with self._signals():
                self._log_started()
                if self._metrics is not None:
                    self._metrics.start()
                    log_endpoint(self._metrics.address)
                if self._reloader is not None:
                    self._reloader.start()
                self._loop()
        finally:
            if self._reloader is not None:
                self._reloader.stop()
            for worker in self.workers:  # only after an unexpected error
                worker.proc.kill()
                worker.proc.wait()
            self._stop_templates()
            if self._metrics is not None:
                self._metrics.stop()
            if self._probes is not None:
                self._probes.close()
            self._close_sockets()
            self._selector.close()
        return self.exit_code

    def _make_payload(self) -> str:
        payload = {
            "app": self.config.app,
            "options": self.config.init_kwargs,
            "sys_path": list(sys.path),
            "supervisor_pid": os.getpid(),
            # With --reload an app that fails to load is served by a 503 stand-in.
            "stand_in_on_failure": self.config.reload,
        }
        try:
            return encode_payload(payload)
        except Exception as exc:  # pickle raises several types; a log_config with objects...
            raise ConfigError(f"Could not pass the configuration to the workers: {exc}") from exc

    def _bind(self) -> None:
        config = self.config
        wanted = (
            config.fd is None
            and config.uds is None
            and LINUX_FAST_PATHS
            and hasattr(socket, "SO_REUSEPORT")
        )
        sock = config.bind_socket(reuse_port=wanted)
        self._sockets.append(sock)
        # Not for a socket systemd passed (bind_socket then set config.fd).
        self._reuse_port = wanted and config.fd is None and socket_kind(sock) == "tcp"

    def _socket_for(self, slot: int) -> socket.socket:
        """The listening socket of ``slot`` (binding the slot's SO_REUSEPORT socket if new)."""
        if not self._reuse_port:
            return self._sockets[0]
        while len(self._sockets) <= slot:
            first = self._sockets[0]
            sock = socket.socket(first.family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                sock.bind(first.getsockname())
                sock.listen(self.config.backlog)
                sock.setblocking(False)
            except OSError:
                sock.close()
                raise
            self._sockets.append(sock)
        return self._sockets[slot]

    def _close_sockets_beyond_target(self) -> None:
        """After SIGTTOU: close the sockets of the slots that are gone.  Their worker holds
        the socket only until it stops accepting, so the kernel stops queueing on it then."""
        if self._reuse_port:
            while len(self._sockets) > max(self.target, 1):
                self._sockets.pop().close()

    def _close_sockets(self) -> None:
        path = None
        if self._sockets and self.config.uds is not None:
            path = self._sockets[0].getsockname()
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def _log_started(self) -> None:
        sock = self._sockets[0]
        if socket_kind(sock) == "unix":
            log_listening([(sock.getsockname(),)])
        else:
            log_listening([sock.getsockname()[:2]])
        if self.config.reload:
            assert self._reloader is not None
            logger.info(
                "Started reloader process [%d] using WatchFiles, watching %s",
                os.getpid(),
                ", ".join(f"'{d}'" for d in self._reloader.dirs),
            )
        else:
            logger.info(
                "Started supervisor process [%d] with %d workers (%s)",
                os.getpid(),
                self.target,
                "a SO_REUSEPORT socket each" if self._reuse_port else "one shared socket",
            )

    def _loop(self) -> None:
        while True:
            for key, _ in self._selector.select(self._timeout()):
                if key.data is None:
                    self._read_signals(key.fd)
                elif isinstance(key.data, Template):
                    key.data.read()
                else:
                    self._read_pipe(key.data)
            self._check_templates()
            self._reap()
            self._update_probes()
            if self._reuse_port and not self._stopping:
                self._covers.update(self.workers, self._sockets, self.target)
            if self._stopping:
                if not self.workers:
                    return
                if self._stop_at is not None and time.monotonic() >= self._stop_at:
                    self._stop_workers()
                self._enforce_stop_deadline()
                continue
            now = time.monotonic()
            self._check_reload(now)
            self._judge_starts(now)
            self._step_replacements(now)
            self._keep_count(now)

    def _update_probes(self) -> None:
        """/readyz: ready while one worker serves and is not being stopped, and never once
        the supervisor stops (the workers are told in the same loop step)."""
        ready = not self._stopping and any(w.ready and not w.retiring for w in self.workers)
        if self._probes is not None:
            self._probes.set_ready(ready)
        if self._metrics is not None:
            self._metrics.ready = ready  # /readyz on the metrics port too

    def _timeout(self) -> float:
        """Seconds until the next timed step (the loop also wakes on signals and pipes)."""
        now = time.monotonic()
        deadlines = [now + _IDLE_WAKEUP]
        if self._stopping:
            if self._stop_deadline is not None:
                deadlines.append(self._stop_deadline)
            if self._stop_at is not None:
                deadlines.append(self._stop_at)
        else:
            if self._reload_at is not None:
                deadlines.append(self._reload_at)
            if self._next_start > now:
                deadlines.append(self._next_start)
            deadlines.extend(
                w.started + START_WINDOW for w in self.workers if w.ready and not w.judged
            )
        return max(0.0, min(deadlines) - now)

    # ------------------------------------------------------------------ signals

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        previous_handlers: dict[int, Any] = {}
        previous_wakeup = signal.set_wakeup_fd(write_fd)
        try:
            for sig in _SIGNALS:
                # The handler does nothing: set_wakeup_fd writes the signal number on the pipe.
                previous_handlers[sig] = signal.signal(sig, _ignore_signal)
            self._wake_fd = write_fd
            self._selector.register(read_fd, selectors.EVENT_READ, None)
            yield
        finally:
            self._wake_fd = None
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_wakeup)
            with contextlib.suppress(KeyError):
                self._selector.unregister(read_fd)
            os.close(read_fd)
            os.close(write_fd)

    def _wake(self) -> None:
        """From the reloader thread: make the loop look at the changes."""
        fd = self._wake_fd
        if fd is not None:
            with contextlib.suppress(OSError):  # full pipe: the loop is awake anyway
                os.write(fd, _WAKE)

    def _read_signals(self, fd: int) -> None:
        try:
            data = os.read(fd, 1024)
        except BlockingIOError:
            return
        for number in data:
            if number in (signal.SIGINT, signal.SIGTERM):
                self._stop(number)
            elif number == getattr(signal, "SIGHUP", None):
                self._begin_roll()
            elif number == getattr(signal, "SIGTTIN", None):
                self.target += 1
                logger.info("Received SIGTTIN: increasing to %d workers.", self.target)
            elif number == getattr(signal, "SIGTTOU", None):
                if self.target > 1:
                    self.target -= 1
                    logger.info("Received SIGTTOU: decreasing to %d workers.", self.target)
                else:
                    logger.info("Received SIGTTOU: keeping the last worker.")

    def _stop(self, sig: int | None) -> None:
        if self._stopping and self._stop_at is not None:
            # A second signal in the lame-duck period: the workers stop now.
            self._stop_workers()
            return
        if self._stopping:
            if sig == signal.SIGINT:
                logger.warning("Forced quit: killing %d worker(s).", len(self.workers))
                for worker in self.workers:
                    with contextlib.suppress(OSError):
                        worker.proc.kill()
            return
        self._stopping = True
        self._reload_at = None
        if sig is not None:
            logger.info(
                "Received %s: stopping %d worker(s).", signal.Signals(sig).name, len(self.workers)
            )
        if self._reloader is not None:
            self._reloader.stop()
        delay = self.config.shutdown_delay
        if sig is not None and delay > 0:
            # The lame duck: /readyz says 503 from now on (`_update_probes`), the workers
            # serve on until `_loop` sees the time up.
            self._stop_at = time.monotonic() + delay
            logger.info(
                "Not ready (/readyz answers 503); serving on for %ss before stopping.", delay
            )
            return
        self._stop_workers()

    def _stop_workers(self) -> None:
        self._stop_at = None
        # No worker will be started on them again: once each worker's core has stopped
        # accepting (and taken what was queued), a new connection is refused, not queued on
        # our copy of the socket for nobody. Closed before the workers are signalled, so a
        # worker's close is the socket's last: had we been descheduled between the signals and
        # this close, a worker could stop accepting first and what the kernel queued in between
        # would be reset.
        self._close_sockets()
        for worker in self.workers:
            self._terminate(worker)
        timeout = self.config.timeout_graceful_shutdown
        if timeout is not None:
            self._stop_deadline = time.monotonic() + timeout + SHUTDOWN_MARGIN

    def _enforce_stop_deadline(self) -> None:
        if self._stop_deadline is None or time.monotonic() < self._stop_deadline:
            return
        self._stop_deadline = None
        logger.warning("Workers did not stop in time: killing %d worker(s).", len(self.workers))
        for worker in self.workers:
            with contextlib.suppress(OSError):
                worker.proc.kill()

    # ------------------------------------------------------------------ workers

    # ------------------------------------------------------------------ the template

    def _start_template(self) -> None:
        """With --limit-max-requests (and slot sockets: Linux): a template process to fork the
        replacements of recycled workers from, which has imported the app too with
        --recycle-fork; none with --reload."""
        config = self.config
        if config.limit_max_requests is None or config.reload or not self._reuse_port:
            return
        try:
            template = Template(self._payload, preload_app=config.recycle_fork)
        except OSError as exc:
            logger.warning(
                "Could not start the template process (%s): recycling starts fresh interpreters.",
                exc,
            )
            return
        self._template = template
        self._selector.register(template.channel, selectors.EVENT_READ, template)

    def _check_templates(self) -> None:
        template = self._template
        if template is not None and template.gone:
            why = template.unusable or "the template process is gone"
            logger.warning("Recycled workers start as fresh interpreters: %s.", why)
            self._old_templates.append(template)
            self._template = None
        for old in list(self._old_templates):
            if old.reap():
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(old.channel)
                self._old_templates.remove(old)

    def _renew_template(self) -> None:
        """SIGHUP: new code, so a new template (the old one exits once its workers have)."""
        if self._template is not None:
            self._template.retire()
            self._old_templates.append(self._template)
            self._template = None
        self._start_template()

    def _stop_templates(self) -> None:
        if self._template is not None:
            self._old_templates.append(self._template)
            self._template = None
        for template in self._old_templates:
            template.retire()
            try:
                template.proc.wait(SHUTDOWN_MARGIN)
            except subprocess.TimeoutExpired:
                template.proc.kill()
                template.proc.wait()
            template.channel.close()
        self._old_templates.clear()

    # ------------------------------------------------------------------ workers

    def _spawn(self, slot: int, forked: bool = False) -> _Worker | None:
        """A new worker for ``slot``: forked from the template when ``forked`` and it is
        ready, else a fresh interpreter."""
        try:
            listen_fd = self._socket_for(slot).fileno()
        except OSError as exc:
            logger.error("Could not bind the socket of a new worker: %s", exc)
            self._note_failed_start(EXIT_CONFIG_ERROR)
            return None
        limit = self.config.limit_max_requests
        if limit is not None and self.config.limit_max_requests_jitter:
            limit += random.randint(0, self.config.limit_max_requests_jitter)
        read_fd, write_fd = os.pipe()
        argv = [
            sys.executable,
            "-m",
            "ferrocorn.worker",
            "--fd",
            str(listen_fd),
            "--ready-fd",
            str(write_fd),
        ]
        named_fds = [("listen", listen_fd), ("ready", write_fd)]
        template = self._template if forked else None
        if template is not None and (not template.ready or template.gone):
            template = None
        if limit is not None:
            argv += ["--limit-max-requests", str(limit)]
        env = dict(os.environ)
        env[PAYLOAD_ENV] = self._payload
        pass_fds = [listen_fd, write_fd]
        ours = theirs = None  # --metrics: the socket pair (our end, the worker's end)
        control = control_theirs = None  # the slot-handover channel (our end, theirs)
        try:
            if self._reuse_port:
                control, control_theirs = channel_pair()
                argv += ["--control-fd", str(control_theirs.fileno())]
                pass_fds.append(control_theirs.fileno())
                named_fds.append(("control", control_theirs.fileno()))
            if self._metrics is not None:
                ours, theirs = socket.socketpair()
                argv += ["--metrics-fd", str(theirs.fileno())]
                pass_fds.append(theirs.fileno())
                named_fds.append(("metrics", theirs.fileno()))
            proc: subprocess.Popen[bytes] | ForkedProcess | None = None
            if template is not None:
                try:
                    proc = template.spawn(named_fds, limit)
                except OSError as exc:
                    logger.warning("The template process did not fork a worker: %s.", exc)
            if proc is None:
                proc = subprocess.Popen(argv, env=env, pass_fds=pass_fds)
        except OSError as exc:
            os.close(read_fd)
            if ours is not None:
                ours.close()
            if control is not None:
                control.close()
            logger.error("Could not start a worker: %s", exc)
            self._note_failed_start(EXIT_CONFIG_ERROR)
            return None
        finally:
            os.close(write_fd)
            if theirs is not None:
                theirs.close()
            if control_theirs is not None:
                control_theirs.close()
        os.set_blocking(read_fd, False)
        worker = _Worker(proc, read_fd, slot, control)
        self._selector.register(read_fd, selectors.EVENT_READ, worker)
        self.workers.append(worker)
        if self._metrics is not None and ours is not None:
            self._metrics.add_worker(slot, proc.pid, ours)
        return worker

    def _read_pipe(self, worker: _Worker) -> None:
        fd = worker.pipe_fd
        if fd is None:
            return
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # EOF: the worker exited
            self._close_pipe(worker)
            return
        for line in data.splitlines(keepends=True):
            if line == READY_LINE and not worker.ready:
                worker.ready = True
                if self._metrics is not None:
                    self._metrics.worker_ready(worker.pid)
            elif line == RECYCLE_LINE and not worker.recycle:
                worker.recycle = True
                logger.info("Worker [%d] reached its request limit: replacing it.", worker.pid)

    def _close_pipe(self, worker: _Worker) -> None:
        fd, worker.pipe_fd = worker.pipe_fd, None
        if fd is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(fd)
            os.close(fd)

    def _terminate(self, worker: _Worker, reason: str | None = None) -> None:
        """SIGTERM ``worker``; ``reason``: why, when it is a restart (see supervisor_metrics)."""
        if worker.retiring:
            # Signalled already. Another SIGTERM changes nothing for a worker that is stopping,
            # except in its last moments, once its own handlers are gone: it would die of it.
            return
        worker.retire_reason = reason
        worker.retiring = True
        with contextlib.suppress(OSError):
            worker.proc.send_signal(signal.SIGTERM)

    def _reap(self) -> None:
        for worker in list(self.workers):
            code = worker.proc.poll()
            if code is None:
                continue
            if worker.pipe_fd is not None:
                self._read_pipe(worker)  # a line still in the pipe counts
            self._close_pipe(worker)
            if worker.control is not None:
                worker.control.close()
                worker.control = None
            self.workers.remove(worker)
            if self._metrics is not None:
                self._metrics.worker_exited(worker.pid, self._restart_reason(worker))
            self._on_exit(worker, code)

    def _restart_reason(self, worker: _Worker) -> str | None:
        """Why ``worker`` (which just exited) is replaced; None when it is not."""
        if self._stopping:
            return None
        if worker.retiring:
            return worker.retire_reason  # None after SIGTTOU
        return "crashed"

    def _on_exit(self, worker: _Worker, code: int) -> None:
        how = _describe_exit(code)
        for other in self.workers:
            if other.replaces is worker:
                other.replaces = None
        was_replacement = worker in self._replacements
        if was_replacement:
            self._replacements.remove(worker)
        if worker.retiring or self._stopping:
            level = logging.INFO if code in (0, -signal.SIGTERM) else logging.WARNING
            logger.log(level, "Worker [%d] stopped: it %s.", worker.pid, how)
            return
        if was_replacement and not worker.ready:
            if worker.for_sighup:
                self._roll_queue.clear()
                self._rolling = False
                logger.error(
                    "Worker [%d] %s before it was serving: SIGHUP restart abandoned, "
                    "the other workers keep serving.",
                    worker.pid,
                    how,
                )
            else:
                logger.error(
                    "Worker [%d] %s before it was serving; the worker it replaces keeps serving.",
                    worker.pid,
                    how,
                )
            if not self.config.reload:  # with reload, the old workers serve until the next edit
                self._note_failed_start(code)
            return
        if self.config.reload and not worker.ready:
            logger.error(
                "Worker [%d] %s before it was serving; waiting for file changes before restarting.",
                worker.pid,
                how,
            )
            self._note_failed_start(code)
            return
        lived = time.monotonic() - worker.started
        if not self.config.reload and (not worker.ready or (code != 0 and lived < START_WINDOW)):
            when = "before it was serving" if not worker.ready else f"{lived:.1f}s after start"
            last_try = self._failed_starts + 1 >= MAX_FAILED_STARTS
            then = "" if last_try else "; starting a new one"
            logger.error("Worker [%d] %s %s%s.", worker.pid, how, when, then)
            self._note_failed_start(code)
            return
        if code == 0:
            logger.info("Worker [%d] %s; starting a new one.", worker.pid, how)
            self._failed_starts = 0
        else:
            logger.warning("Worker [%d] %s; starting a new one.", worker.pid, how)

    def _note_failed_start(self, code: int) -> None:
        if self.config.reload:
            self._wait_for_change = True  # no crash-loop limit: the next edit retries
            return
        self._failed_starts += 1
        if self._failed_starts >= MAX_FAILED_STARTS:
            if code == EXIT_STARTUP_FAILED:
                self.exit_code = EXIT_STARTUP_FAILED
                reason = "application startup failed"
            else:
                self.exit_code = EXIT_CONFIG_ERROR
                reason = f"the worker {_describe_exit(code)}"
            logger.error(
                "Workers failed to start %d times in a row (last: %s); stopping.",
                self._failed_starts,
                reason,
            )
            self._stop(None)
            return
        delay = min(_RETRY_DELAY_FIRST * 2 ** (self._failed_starts - 1), _RETRY_DELAY_MAX)
        self._next_start = time.monotonic() + delay

    def _judge_starts(self, now: float) -> None:
        for worker in self.workers:
            if not worker.judged and worker.ready and now - worker.started >= START_WINDOW:
                worker.judged = True
                self._failed_starts = 0

    def _keep_count(self, now: float) -> None:
        """Start a worker for every slot below ``target`` that has none, stop the workers of
        slots beyond it (SIGTTOU)."""
        if self._wait_for_change:
            return
        if self.config.reload and any(w.retiring for w in self.workers):
            return  # reloading: the old code stops before the new one starts
        active = [w for w in self.workers if not w.retiring]
        for worker in active:
            if worker.slot >= self.target:
                logger.info("Stopping worker [%d].", worker.pid)
                self._terminate(worker)
        self._close_sockets_beyond_target()
        filled = {w.slot for w in active}
        if now < self._next_start:
            return
        for slot in range(self.target):
            if slot not in filled and self._spawn(slot) is None:
                return

    # ------------------------------------------------------------------ replacing workers

    def _begin_roll(self) -> None:
        # A replacement still starting (recycling) started before the signal: it is replaced
        # too, last (by then it probably serves), so that no old code survives the roll.
        olds = [w for w in self.workers if not w.retiring]
        olds.sort(key=lambda w: w in self._replacements)
        logger.info("Received SIGHUP: replacing %d worker(s) one at a time.", len(olds))
        self._renew_template()
        self._roll_queue = olds
        self._rolling = True
        self._wait_for_change = False

    def _step_replacements(self, now: float) -> None:
        """Start each new worker in the old one's slot; once it serves, stop the old one.
        SIGHUP replaces one worker at a time; every worker at its request limit gets its
        replacement at once (each slot's old worker serves on meanwhile)."""
        for new in [w for w in self._replacements if w.ready]:
            self._replacements.remove(new)
            old, new.replaces = new.replaces, None
            if old is not None and old in self.workers and not old.retiring:
                logger.info("Worker [%d] is serving: stopping worker [%d].", new.pid, old.pid)
                self._terminate(old, "reloaded" if new.for_sighup else "recycled")
        sighup_pending = any(w.for_sighup for w in self._replacements)
        if self._rolling and not self._roll_queue and not sighup_pending:
            self._rolling = False
            logger.info("All workers replaced.")
        if self._wait_for_change or now < self._next_start:
            return
        being_replaced = {id(w.replaces) for w in self._replacements}
        while self._roll_queue and not sighup_pending:
            old = self._roll_queue.pop(0)
            if old not in self.workers or old.retiring or id(old) in being_replaced:
                continue
            if not self._start_replacement(old, for_sighup=True):
                return
            being_replaced.add(id(old))
            sighup_pending = True
        for old in list(self.workers):
            if old.recycle and not old.retiring and id(old) not in being_replaced:
                if not self._start_replacement(old, for_sighup=False, forked=True):
                    return

    def _start_replacement(self, old: _Worker, for_sighup: bool, forked: bool = False) -> bool:
        new = self._spawn(old.slot, forked)
        if new is None:
            return False
        new.replaces, new.for_sighup = old, for_sighup
        self._replacements.append(new)
        return True

    # ------------------------------------------------------------------ reload

    def _check_reload(self, now: float) -> None:
        if self._reloader is None:
            return
        changes = self._reloader.take_changes()
        if changes:
            self._changes |= changes
            if self._reload_at is None:
                # Wait a little: editors write several files (or one file several times).
                self._reload_at = now + self.config.reload_delay
        if self._reload_at is None or now < self._reload_at:
            return
        shown = ", ".join(f"'{self._reloader.relative(p)}'" for p in sorted(self._changes))
        logger.warning("WatchFiles detected changes in %s. Reloading...", shown)
        self._reload_at = None
        self._changes.clear()
        self._wait_for_change = False
        self._failed_starts = 0
        self._roll_queue.clear()
        self._rolling = False
        for worker in self.workers:
            if not worker.retiring:
                self._terminate(worker, "reloaded")


def _ignore_signal(sig: int, frame: Any) -> None:
    """The Python-level handler; the wake-up fd carries the signal to the loop."""


class _Reloader:
    """Watches the reload directories in a thread (watchfiles) and collects changed paths."""

    def __init__(self, config: Config, wake: Callable[[], None]) -> None:
        try:
            import watchfiles
        except ImportError as exc:
            raise ConfigError(
                f"reload needs watchfiles ({exc}): pip install watchfiles "
                '(or "ferrocorn[standard]").'
            ) from exc
        self._watchfiles = watchfiles
        self.dirs = list(config.reload_dirs)
        self._wake = wake
        includes = list(DEFAULT_RELOAD_INCLUDES) + list(config.reload_includes)
        # An explicitly included pattern is no longer excluded by default.
        excludes = [p for p in DEFAULT_RELOAD_EXCLUDES if p not in includes]
        self._includes = includes
        self._excludes = excludes + list(config.reload_excludes)
        self._default_filter = watchfiles.DefaultFilter()
        self._lock = threading.Lock()
        self._changes: set[str] = set()
        self._stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ferrocorn-reload", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop_event.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def take_changes(self) -> set[str]:
        with self._lock:
            changes, self._changes = self._changes, set()
        return changes

    def relative(self, path: str) -> str:
        """``path`` relative to the (innermost) reload directory holding it."""
        for directory in sorted(self.dirs, key=len, reverse=True):
            if os.path.commonpath([path, directory]) == directory:
                return os.path.relpath(path, directory)
        return path

    def wanted(self, change: Any, path: str) -> bool:
        if not self._default_filter(change, path):
            return False
        relative = PurePath(self.relative(path))
        for pattern in self._excludes:
            if relative.match(pattern) or any(fnmatch.fnmatch(p, pattern) for p in relative.parts):
                return False
        return any(relative.match(pattern) for pattern in self._includes)

    def _run(self) -> None:
        try:
            for changes in self._watchfiles.watch(
                *self.dirs,
                watch_filter=self.wanted,
                stop_event=self._stop_event,
                raise_interrupt=False,
            ):
                with self._lock:
                    self._changes.update(path for _, path in changes)
                self._wake()
        except Exception:  # the watcher must not die silently
            logger.exception("The file watcher failed; reload is off from now on.")
