"""A template process for cheap worker starts when recycling (``--limit-max-requests``).

This is the supervisor's side; the process itself is ``template_process.py``.

A fresh worker interpreter imports ferrocorn and the app before it serves, which costs a
hundred-odd milliseconds of CPU on the very cores the workers serve on; at a low request limit
the workers recycle several times a second. The template (``python -m ferrocorn.template_process
--channel-fd N``, started by the supervisor) imports ferrocorn once and then forks a worker per
request; the worker imports the app, as gunicorn's workers do. With ``--recycle-fork``
(``--preload-app`` here) the template imports the app too, as gunicorn's ``--preload`` does. It
forks only while it is a single thread (no tokio runtime, no app thread: ``fork()`` would copy
those threads' locks but not the threads); if importing started a thread, it says so and the
supervisor goes on starting fresh interpreters. The forked worker runs lifespan startup and
serves like any worker; its code is the template's, so SIGHUP (a code reload) retires the
template (it exits once its workers have) and starts a new one.

The workers are the template's children: it reports each one's pid when forked and its exit
status when it exits, over the same ``SOCK_SEQPACKET`` channel that carries the requests
(``spawn`` with the worker's descriptors over ``SCM_RIGHTS``, ``retire``)."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

from ._process_contract import PAYLOAD_ENV

MAX_MESSAGE = 4096
# The supervisor waits this long for the pid of a worker the template forks.
SPAWN_REPLY_TIMEOUT = 5.0


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

    def __init__(self, payload: str, preload_app: bool) -> None:
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env[PAYLOAD_ENV] = payload
        argv = [
            sys.executable,
            "-m",
            "ferrocorn.template_process",
            "--channel-fd",
            str(theirs.fileno()),
            *(["--preload-app"] if preload_app else []),
        ]
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
                data = self.channel.recv(MAX_MESSAGE)
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
