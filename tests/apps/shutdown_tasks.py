"""Apps whose work outlives the response or the socket, for tests/test_shutdown_tasks.py.

Every event is appended as ``<event> <pid>`` to the file ``$TEST_TASKS_MARKER``, so a test reads
what ran, in which process and in which order (the lifespan shutdown writes its line too).

- ``app`` (Starlette): ``GET /bg?sleep=S`` answers at once, then its BackgroundTask sleeps S
  seconds and writes ``task-done``; ``GET /bg?gate=PATH`` waits for the file ``PATH`` to exist
  instead. The task writes ``task-started`` first and ``task-cancelled`` when it gets
  ``CancelledError``.
- ``GET /detach`` starts a task of its own that sleeps a minute and answers at once: not an app
  call, so shutdown does not wait for it.
- ``ws_app`` (raw ASGI): a WebSocket that, once it has received ``websocket.disconnect``, writes
  ``ws-disconnected``, sleeps ``?sleep=S`` seconds and writes ``ws-done``.

Runs in the server (CPython or PyPy 3.9): 3.9 syntax.
"""

import asyncio
import contextlib
import os
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.responses import PlainTextResponse
from starlette.routing import Route

_GATE_LIMIT = 120.0  # seconds: a forgotten gate must not hold a worker forever


def mark(event):
    path = os.environ.get("TEST_TASKS_MARKER")
    if path:
        with open(path, "a") as f:
            f.write("%s %d\n" % (event, os.getpid()))


async def _wait_for_file(path):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _GATE_LIMIT
    while not os.path.exists(path) and loop.time() < deadline:
        await asyncio.sleep(0.02)


async def background_work(sleep, gate):
    mark("task-started")
    try:
        if gate:
            await _wait_for_file(gate)
        else:
            await asyncio.sleep(sleep)
    except asyncio.CancelledError:
        mark("task-cancelled")  # the cancellation itself, not any other error
        raise
    mark("task-done")


async def bg(request):
    sleep = float(request.query_params.get("sleep", "1"))
    gate = request.query_params.get("gate")
    return PlainTextResponse("accepted", background=BackgroundTask(background_work, sleep, gate))


_DETACHED = set()  # asyncio holds tasks weakly


async def detach(request):
    task = asyncio.ensure_future(asyncio.sleep(60))
    _DETACHED.add(task)
    return PlainTextResponse("detached")


@contextlib.asynccontextmanager
async def lifespan(app):
    yield
    mark("lifespan-shutdown")


app = Starlette(routes=[Route("/bg", bg), Route("/detach", detach)], lifespan=lifespan)


async def _lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            mark("lifespan-shutdown")
            await send({"type": "lifespan.shutdown.complete"})
            return


async def ws_app(scope, receive, send):
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    assert scope["type"] == "websocket"
    query = parse_qs(scope["query_string"].decode("latin-1"))
    sleep = float(query.get("sleep", ["1"])[0])
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    mark("ws-open")
    while (await receive())["type"] != "websocket.disconnect":
        pass
    mark("ws-disconnected")
    await asyncio.sleep(sleep)
    mark("ws-done")
