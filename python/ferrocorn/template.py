"""A template process for cheap worker starts when recycling (``--limit-max-requests``).

A fresh worker interpreter imports ferrocorn and the app before it serves, which costs a
hundred-odd milliseconds of CPU on the very cores the workers serve on; at a low request
limit the workers recycle several times a second.  The template (``python -m
ferrocorn.template --channel-fd N``, started by the supervisor) imports all that once and
then forks a worker per request, as gunicorn's ``--preload`` does.  It forks only while it
is a single thread (no tokio runtime, no app thread: ``fork()`` would copy those threads'
locks but not the threads); if importing the app started a thread, it says so and the
supervisor goes on starting fresh interpreters.  The forked worker runs lifespan startup
and serves like any worker; its code is the template's, so SIGHUP (a code reload) retires
the template (it exits once its workers have) and starts a new one.

The workers are the template's children: it reports each one's pid when forked and its exit
status when it exits, over the same ``SOCK_SEQPACKET`` channel that carries the requests
(``spawn`` with the worker's descriptors over ``SCM_RIGHTS``, ``retire``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from ._process_contract import PAYLOAD_ENV, decode_payload

_MAX_MESSAGE = 4096
# The supervisor waits this long for the pid of a worker the template forks.
SPAWN_REPLY_TIMEOUT = 5.0


# ------------------------------------------------------------------ the template process


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 2  # cannot tell: do not fork


def _send(channel: socket.socket, message: dict[str, Any]) -> None:
    channel.send(json.dumps(message).encode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ferrocorn.template")
    parser.add_argument("--channel-fd", type=int, required=True)
    args = parser.parse_args(argv)
    channel = socket.socket(fileno=args.channel_fd)
    channel.set_inheritable(False)
    payload = decode_payload(os.environ.pop(PAYLOAD_ENV))
    sys.path[:] = payload["sys_path"]
    supervisor = payload["supervisor_pid"]
    from . import worker  # noqa: F401 - the worker's code, imported once for every fork

    app = payload["app"]
    try:
        if isinstance(app, str):
            importlib.import_module(app.partition(":")[0])
    except BaseException as exc:  # the workers will report it properly
        _send(channel, {"unusable": f"the app failed to import: {exc!r}"})
        return 0
    if _threads() != 1:
        _send(channel, {"unusable": "importing the app started a thread"})
        return 0
    # What was imported stays out of the workers' garbage collections: a collection writes
    # to every object it visits, which would copy the pages the fork shares.
    gc.collect()
    if hasattr(gc, "freeze"):  # not on PyPy
        gc.freeze()
    _send(channel, {"ready": os.getpid()})
    return _serve(channel, payload, supervisor)


def _serve(channel: socket.socket, payload: dict[str, Any], supervisor: int) -> int:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: None)  # stop when told on the channel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the supervisor's
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    children: set[int] = set()
    retiring = False
    orphaned = False
    while not (retiring and not children):
        if os.getppid() != supervisor and not orphaned:
            orphaned = retiring = True  # the supervisor is gone: so are its workers
            for pid in children:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
        for key, _ in selector.select(1.0):
            if key.fileobj is channel:
                try:
                    message, fds, _, _ = socket.recv_fds(channel, _MAX_MESSAGE, 4)
                except OSError:
                    message, fds = b"", []
                if not message:
                    retiring = True
                    selector.unregister(channel)
                    continue
                request = json.loads(message)
                if request.get("spawn") and not retiring:
                    pid = _fork_worker(channel, payload, request, fds, wake_r, wake_w)
                    children.add(pid)
                    _send(channel, {"spawned": pid})
                elif request.get("retire"):
                    retiring = True
                for fd in fds:
                    os.close(fd)
            else:
                with contextlib.suppress(OSError):
                    os.read(wake_r, 4096)
        for pid, code in _reaped():
            children.discard(pid)
            with contextlib.suppress(OSError):
                _send(channel, {"exited": pid, "code": code})
    return 0


def _reaped() -> list[tuple[int, int]]:
    exits: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return exits
        if pid == 0:
            return exits
        exits.append((pid, os.waitstatus_to_exitcode(status)))


def _fork_worker(
    channel: socket.socket,
    payload: dict[str, Any],
    request: dict[str, Any],
    fds: list[int],
    wake_r: int,
    wake_w: int,
) -> int:
    pid = os.fork()
    if pid:
        return pid
    # The worker: nothing of the template's loop survives in it.
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        channel.close()
        os.close(wake_r)
        os.close(wake_w)
        from .worker import WorkerFds, serve

        names = request["fds"]  # which descriptor is which, in the order sent
        given = dict(zip(names, fds))
        for fd in fds:
            os.set_inheritable(fd, False)
        worker_fds = WorkerFds(
            given["listen"], given["ready"], given.get("metrics"), given.get("control")
        )
        code = serve(payload, worker_fds, request.get("limit"), os.getppid())
    except BaseException:  # noqa: BLE001 - a forked child must never return into the template
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# ------------------------------------------------------------------ the supervisor's side


class ForkedProcess:
    """A worker the template forked, with the part of ``subprocess.Popen`` the supervisor uses."""

    def __init__(self, template: Template, pid: int) -> None:
        self.template = template
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("worker", timeout or 0.0)
            self.template.read(block=min(left, 1.0) if left is not None else 1.0)
        return self.returncode


class Template:
    """The supervisor's handle on one template process."""

    def __init__(self, payload: str) -> None:
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env[PAYLOAD_ENV] = payload
        argv = [sys.executable, "-m", "ferrocorn.template", "--channel-fd", str(theirs.fileno())]
        try:
            self.proc = subprocess.Popen(argv, env=env, pass_fds=[theirs.fileno()])
        finally:
            theirs.close()
        self.channel.setblocking(False)
        self.ready = False
        self.gone = False  # unusable, retired or dead: fork nothing more
        self.unusable: str | None = None
        self.children: dict[int, ForkedProcess] = {}
        self._spawned: list[int] = []

    def fileno(self) -> int:
        return self.channel.fileno()

    def read(self, block: float = 0.0) -> None:
        """Handle what the template said (waiting up to ``block`` seconds for a message)."""
        if block:
            selectors_ = selectors.DefaultSelector()
            selectors_.register(self.channel, selectors.EVENT_READ)
            try:
                selectors_.select(block)
            finally:
                selectors_.close()
        while True:
            try:
                data = self.channel.recv(_MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._closed()
                return
            message = json.loads(data)
            if "ready" in message:
                self.ready = True
            elif "unusable" in message:
                self.unusable = message["unusable"]
                self.gone = True
            elif "spawned" in message:
                self._spawned.append(message["spawned"])
            elif "exited" in message:
                child = self.children.pop(message["exited"], None)
                if child is not None:
                    child.returncode = message["code"]

    def _closed(self) -> None:
        self.gone = True
        for child in self.children.values():
            if child.returncode is None:
                child.returncode = -signal.SIGKILL  # its parent died: it stops by itself
        self.children.clear()

    def spawn(self, named_fds: list[tuple[str, int]], limit: int | None) -> ForkedProcess:
        """Fork a worker with these descriptors; OSError when the template does not answer."""
        request = {"spawn": True, "fds": [n for n, _ in named_fds], "limit": limit}
        socket.send_fds(self.channel, [json.dumps(request).encode()], [fd for _, fd in named_fds])
        deadline = time.monotonic() + SPAWN_REPLY_TIMEOUT
        while not self._spawned:
            if self.gone or time.monotonic() > deadline:
                self.gone = True
                raise OSError("the template process did not fork the worker")
            self.read(block=0.1)
        process = ForkedProcess(self, self._spawned.pop(0))
        self.children[process.pid] = process
        return process

    def retire(self) -> None:
        """Fork nothing more; the template exits once its workers have."""
        self.gone = True
        with contextlib.suppress(OSError):
            self.channel.send(json.dumps({"retire": True}).encode())

    def reap(self) -> bool:
        """True once the template process exited (then its channel is closed)."""
        if self.proc.poll() is None:
            return False
        self.read()
        self._closed()
        self.channel.close()
        return True


if __name__ == "__main__":
    sys.exit(main())
