"""The template process (``python -m ferrocorn.template_process``): imports ferrocorn (and with
``--preload-app`` the app) once, then forks workers as the supervisor asks (see template.py, the
supervisor's side).
Its own module, so that running it does not import it twice (the package imports template.py).
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
import sys
from typing import Any

from ._process_contract import PAYLOAD_ENV, decode_payload
from .template import MAX_MESSAGE


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
    parser.add_argument("--preload-app", action="store_true")
    args = parser.parse_args(argv)
    channel = socket.socket(fileno=args.channel_fd)
    channel.set_inheritable(False)
    payload = decode_payload(os.environ.pop(PAYLOAD_ENV))
    sys.path[:] = payload["sys_path"]
    supervisor = payload["supervisor_pid"]
    from . import worker  # the worker's code, imported once for every fork

    worker.import_ahead(payload)

    app = payload["app"]
    if args.preload_app:
        try:
            if isinstance(app, str):
                importlib.import_module(app.partition(":")[0])
        except BaseException as exc:  # the workers will report it properly
            _send(channel, {"unusable": f"the app failed to import: {exc!r}"})
            return 0
    # Without --preload-app each forked worker imports the app itself, as a fresh interpreter
    # would: only ferrocorn and what it imports are shared.
    if _threads() != 1:
        what = "importing the app" if args.preload_app else "importing ferrocorn"
        _send(channel, {"unusable": f"{what} started a thread"})
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
                    message, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, 4)
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
    # The supervisor may signal the worker as soon as it hears its pid: until the worker has
    # its own dispositions, a SIGTERM must neither reach the template's no-op handler (and be
    # lost: the worker would serve on after the stop) nor run it; blocked, it waits for them.
    stops = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    pid = os.fork()
    if pid:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        return pid
    # The worker: nothing of the template's loop survives in it.
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)  # a stop already sent ends it here
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


if __name__ == "__main__":
    sys.exit(main())
