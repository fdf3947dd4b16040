"""Litestar app for the framework matrix (routes: see _shared.py)."""

import hashlib

from litestar import Litestar, MediaType, Request, Response, WebSocket, get, post, websocket
from litestar.background_tasks import BackgroundTask
from litestar.response import File, ServerSentEvent, Stream
from litestar.response.sse import ServerSentEventMessage

from tests.frameworks import _shared

NAME = "litestar"


def startup(app):
    app.state.startup_value = _shared.startup_value()


def shutdown(app):
    _shared.record_shutdown(NAME)


@get("/plain", media_type=MediaType.TEXT)
async def plain() -> str:
    return _shared.PLAIN_TEXT % NAME


@get("/json")
async def json_route() -> dict:
    return _shared.json_doc(NAME)


@post("/echo", status_code=200)
async def echo(request: Request) -> Response:
    body = await request.body()
    return Response(
        body,
        media_type="application/octet-stream",
        headers={"x-echo-sha256": hashlib.sha256(body).hexdigest()},
    )


@get("/stream")
async def stream(chunks: int = 4, size: int = 1024) -> Stream:
    return Stream(_shared.stream_chunks(chunks, size), media_type="application/octet-stream")


async def sse_events(n):
    for i in range(n):
        yield ServerSentEventMessage(data=_shared.sse_text(NAME, i), event="tick", id=i, sep="\n")
        await _shared.anyio.sleep(_shared.SSE_INTERVAL)


@get("/sse")
async def sse(n: int = 100) -> ServerSentEvent:
    return ServerSentEvent(sse_events(n))


@get("/state", media_type=MediaType.TEXT)
async def state(request: Request) -> str:
    return request.app.state.startup_value


@get("/error")
async def error() -> str:
    raise RuntimeError("litestar app error route")


@get("/timeout", media_type=MediaType.TEXT)
async def timeout() -> Response:
    status, text = await _shared.timeout_probe()
    return Response(text, status_code=status, media_type=MediaType.TEXT)


@get("/disconnect", media_type=MediaType.TEXT)
async def disconnect(id: str) -> Stream:
    return Stream(_shared.disconnect_stream(id, NAME), media_type=MediaType.TEXT)


@get("/background")
async def background(id: str) -> Response:
    return Response({"queued": id}, background=BackgroundTask(_shared.background_task, id))


@websocket("/ws")
async def ws_echo(socket: WebSocket, id: str) -> None:
    """Echo text as text and bytes as bytes until the client closes (records the close)."""
    await socket.accept()
    while True:
        message = await socket.receive()
        if message["type"] == "websocket.disconnect":
            _shared.record_ws_close(id, message.get("code"))
            return
        if message.get("text") is not None:
            await socket.send_data(message["text"], mode="text")
        else:
            await socket.send_data(message["bytes"], mode="binary")


@get("/file/{name:str}")
async def file(name: str) -> Response:
    path = _shared.file_path(name)
    if path is None:
        return Response("no such file", status_code=404, media_type=MediaType.TEXT)
    return File(path, media_type="application/octet-stream", content_disposition_type="inline")


app = Litestar(
    route_handlers=[
        file,
        plain,
        json_route,
        echo,
        stream,
        sse,
        state,
        error,
        timeout,
        disconnect,
        background,
        ws_echo,
    ],
    on_startup=[startup],
    on_shutdown=[shutdown],
    request_max_body_size=64 * 1024 * 1024,
)
