"""Framework-independent pieces of the framework-matrix apps (stdlib + anyio only).

Every app in this package serves the same routes:

  GET  /plain                 text/plain PLAIN_TEXT % framework
  GET  /json                  json_doc(framework)
  POST /echo                  the request body, unchanged; header x-echo-sha256 = its sha256
  GET  /stream?chunks=&size=  a streamed body: pattern bytes, ``chunks`` pieces of ``size``
  GET  /sse?n=                server-sent events ``tick`` 0..n-1 (data "<framework> <i>")
  GET  /state                 text: the value lifespan startup stored in the app/lifespan state
  GET  /error                 raises RuntimeError (the framework answers 500)
  GET  /timeout               anyio.fail_after(0.2) around anyio.sleep(5): 504 "timed out"
  GET  /disconnect?id=        a slow endless-looking stream; when the client leaves, the
                              handler records how it learnt that in marker file disconnect-<id>
  GET  /background?id=        (frameworks with background tasks) answers at once; the task
                              waits for the test's go-<id> file, then writes bg-<id>
  GET  /file/<name>           the file FW_FILE_DIR/<name> through the framework's own file
                              response (404 for a name outside FILE_NAMES)
  WS   /ws?id=                (frameworks with ASGI WebSockets: not Django) echoes every text
                              and bytes message as the same type; when the client closes, the
                              handler records how it saw that in marker file ws-<id>:
                              ``closed:<code>`` (the close code the framework reported) or
                              ``cancelled:<exception>`` (Quart cancels the handler instead)

The server process gets FW_MARKER_DIR (a temp dir) and FW_STARTUP_TOKEN from the test.
Lifespan startup stores ``startup_value()``; shutdown writes marker ``shutdown``.
"""

import os

import anyio

from tests.apps.common import pattern_chunk

PLAIN_TEXT = "hello from %s"
SSE_INTERVAL = 0.02
DISCONNECT_CHUNKS = 600  # x 0.05 s: the stream would last 30 s if nobody noticed the client left
DISCONNECT_INTERVAL = 0.05
BACKGROUND_WAIT = 20.0
WS_TEXT_MESSAGES = 3  # the WebSocket test sends this many text messages, then one bytes message


FILE_NAMES = ("small.txt", "big.bin", "empty.bin")


def file_path(name):
    """The served file's path, or None for a name the test did not make."""
    if name not in FILE_NAMES:
        return None
    return os.path.join(os.environ["FW_FILE_DIR"], name)


def json_doc(framework):
    return {"framework": framework, "ok": True, "items": [1, 2, 3], "text": "ferr\u00f8 \u2713"}


def startup_value():
    return "startup:" + os.environ.get("FW_STARTUP_TOKEN", "")


def marker_path(name):
    return os.path.join(os.environ["FW_MARKER_DIR"], name)


def record(name, text):
    """Append one line to marker file ``name`` (plain blocking I/O: it is tiny)."""
    with open(marker_path(name), "a") as f:
        f.write(text + "\n")


def record_shutdown(framework):
    record("shutdown", "shutdown:%s:%s" % (framework, os.environ.get("FW_STARTUP_TOKEN", "")))


async def stream_chunks(chunks, size):
    """``chunks`` pieces of ``size`` (<= 1 MiB) bytes of the shared test pattern."""
    for i in range(chunks):
        yield pattern_chunk(i * size, size)
        await anyio.sleep(0)


def sse_text(framework, i):
    return "%s %d" % (framework, i)


async def timeout_probe():
    """(status, text): 504 when the cancel scope fired, as it must."""
    try:
        with anyio.fail_after(0.2):
            await anyio.sleep(5)
    except TimeoutError:
        return 504, "timed out"
    return 200, "not cancelled"


async def disconnect_stream(rid, framework):
    """A stream that only ends early if the client goes away; records how it was stopped."""
    try:
        for i in range(DISCONNECT_CHUNKS):
            yield ("%s chunk %d\n" % (framework, i)).encode() * 64
            await anyio.sleep(DISCONNECT_INTERVAL)
    except BaseException as exc:  # GeneratorExit, CancelledError, OSError from send...
        record("disconnect-" + rid, "generator:" + type(exc).__name__)
        raise
    record("disconnect-" + rid, "completed")


class ClosingStream:
    """Wraps an async generator in an async iterator with the ``close()`` coroutine that Falcon
    awaits when it stops streaming (Falcon does not call ``aclose()`` on async generators)."""

    def __init__(self, agen):
        self._agen = agen

    def __aiter__(self):
        return self

    async def __anext__(self):
        return await self._agen.__anext__()

    async def close(self):
        await self._agen.aclose()


def record_ws_close(rid, code):
    record("ws-" + rid, "closed:%s" % code)


def record_ws_cancel(rid, exc):
    record("ws-" + rid, "cancelled:" + type(exc).__name__)


async def background_task(rid):
    """Runs after the response: waits for the test's go file, then writes bg-<id>."""
    go = marker_path("go-" + rid)
    waited = 0.0
    while not os.path.exists(go) and waited < BACKGROUND_WAIT:
        await anyio.sleep(0.02)
        waited += 0.02
    record("bg-" + rid, "go-seen" if os.path.exists(go) else "no-go")
