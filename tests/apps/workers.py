"""Test app for the supervisor tests: which process served a request, and lifespan switches.

Standard library only, Python 3.9 syntax (it runs in the server, possibly under PyPy).

- ``GET /pid`` answers the worker's pid (``?sleep=S`` waits first, so requests overlap);
- ``GET /env?name=NAME`` answers that environment variable (``-`` when unset);
- ``GET /block?until=PATH`` blocks the worker's event loop (a synchronous wait: nothing else in
  that worker runs) until the file ``PATH`` exists, after creating ``PATH.started``; then
  answers the pid;
- lifespan startup writes ``startup <pid>`` to ``$TEST_WORKERS_MARKER`` (when set), fails when
  ``$TEST_WORKERS_FAIL_STARTUP`` is set and waits for the file ``$TEST_WORKERS_STARTUP_WAIT``
  to exist when that is set;
- importing this module writes ``import <pid>`` to ``$TEST_WORKERS_IMPORT_MARKER`` (when set).
"""

import asyncio
import os
import time
from urllib.parse import parse_qs

_BLOCK_LIMIT = 120.0  # seconds: a forgotten /block must not hang a worker forever


def _wait_for_file(path):
    deadline = time.monotonic() + _BLOCK_LIMIT
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def _mark(text):
    path = os.environ.get("TEST_WORKERS_MARKER")
    if path:
        with open(path, "a") as f:
            f.write(f"{text} {os.getpid()}\n")


_import_marker = os.environ.get("TEST_WORKERS_IMPORT_MARKER")
if _import_marker:
    with open(_import_marker, "a") as _f:
        _f.write(f"import {os.getpid()}\n")


async def _lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if os.environ.get("TEST_WORKERS_FAIL_STARTUP"):
                await send({"type": "lifespan.startup.failed", "message": "startup-refused-7c1"})
                return
            wait_for = os.environ.get("TEST_WORKERS_STARTUP_WAIT")
            while wait_for and not os.path.exists(wait_for):
                await asyncio.sleep(0.02)
            _mark("startup")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            _mark("shutdown")
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    query = parse_qs(scope["query_string"].decode("latin-1"))
    if scope["path"] == "/pid":
        sleep = float(query.get("sleep", ["0"])[0])
        if sleep:
            await asyncio.sleep(sleep)
        body = str(os.getpid()).encode()
    elif scope["path"] == "/block":
        path = query["until"][0]
        with open(path + ".started", "w"):
            pass
        _wait_for_file(path)
        body = str(os.getpid()).encode()
    elif scope["path"] == "/env":
        body = os.environ.get(query["name"][0], "-").encode()
    else:
        body = b"workers test app"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": body})
