"""Starlette app for the framework matrix (routes: see _shared.py)."""

import contextlib
import hashlib

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route, WebSocketRoute

from tests.frameworks import _shared

NAME = "starlette"


class RecordingStreamingResponse(StreamingResponse):
    """Records how the response learnt that the client left (ASGI >= 2.4: send() raises)."""

    def __init__(self, content, rid, **kwargs):
        super().__init__(content, **kwargs)
        self.rid = rid

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        except BaseException as exc:  # ClientDisconnect (from OSError) or a cancellation
            _shared.record("disconnect-" + self.rid, "response:" + type(exc).__name__)
            raise


async def plain(request):
    return PlainTextResponse(_shared.PLAIN_TEXT % NAME)


async def json_route(request):
    return JSONResponse(_shared.json_doc(NAME))


async def echo(request):
    body = await request.body()
    return Response(
        body,
        media_type="application/octet-stream",
        headers={"x-echo-sha256": hashlib.sha256(body).hexdigest()},
    )


async def stream(request):
    chunks = int(request.query_params.get("chunks", "4"))
    size = int(request.query_params.get("size", "1024"))
    return StreamingResponse(
        _shared.stream_chunks(chunks, size), media_type="application/octet-stream"
    )


async def sse_events(n):
    for i in range(n):
        yield "id: %d\nevent: tick\ndata: %s\n\n" % (i, _shared.sse_text(NAME, i))
        await _shared.anyio.sleep(_shared.SSE_INTERVAL)


async def sse(request):
    n = int(request.query_params.get("n", "100"))
    return StreamingResponse(
        sse_events(n), media_type="text/event-stream", headers={"cache-control": "no-cache"}
    )


async def state(request):
    return PlainTextResponse(request.state.startup_value)


async def error(request):
    raise RuntimeError("starlette app error route")


async def timeout(request):
    status, text = await _shared.timeout_probe()
    return PlainTextResponse(text, status_code=status)


async def disconnect(request):
    rid = request.query_params["id"]
    return RecordingStreamingResponse(
        _shared.disconnect_stream(rid, NAME), rid, media_type="text/plain"
    )


async def background(request):
    rid = request.query_params["id"]
    return JSONResponse({"queued": rid}, background=BackgroundTask(_shared.background_task, rid))


async def ws_echo(websocket):
    """Echo text as text and bytes as bytes until the client closes (records the close)."""
    rid = websocket.query_params["id"]
    await websocket.accept()
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            _shared.record_ws_close(rid, message.get("code"))
            return
        if message.get("text") is not None:
            await websocket.send_text(message["text"])
        else:
            await websocket.send_bytes(message["bytes"])


@contextlib.asynccontextmanager
async def lifespan(app):
    yield {"startup_value": _shared.startup_value()}
    _shared.record_shutdown(NAME)


async def file(request):
    path = _shared.file_path(request.path_params["name"])
    if path is None:
        return PlainTextResponse("no such file", status_code=404)
    return FileResponse(path, media_type="application/octet-stream")


app = Starlette(
    routes=[
        Route("/file/{name}", file),
        Route("/plain", plain),
        Route("/json", json_route),
        Route("/echo", echo, methods=["POST"]),
        Route("/stream", stream),
        Route("/sse", sse),
        Route("/state", state),
        Route("/error", error),
        Route("/timeout", timeout),
        Route("/disconnect", disconnect),
        Route("/background", background),
        WebSocketRoute("/ws", ws_echo),
    ],
    lifespan=lifespan,
)
