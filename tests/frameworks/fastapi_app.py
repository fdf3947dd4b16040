"""FastAPI app for the framework matrix (routes: see _shared.py)."""

import contextlib
import hashlib

from fastapi import BackgroundTasks, FastAPI, Request, WebSocket
from fastapi.responses import FileResponse, PlainTextResponse, Response, StreamingResponse

from tests.frameworks import _shared
from tests.frameworks.starlette_app import RecordingStreamingResponse

NAME = "fastapi"


@contextlib.asynccontextmanager
async def lifespan(app):
    yield {"startup_value": _shared.startup_value()}
    _shared.record_shutdown(NAME)


app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)


@app.get("/file/{name}")
async def file(name: str):
    path = _shared.file_path(name)
    if path is None:
        return PlainTextResponse("no such file", status_code=404)
    return FileResponse(path, media_type="application/octet-stream")


@app.get("/plain", response_class=PlainTextResponse)
async def plain():
    return _shared.PLAIN_TEXT % NAME


@app.get("/json")
async def json_route():
    return _shared.json_doc(NAME)


@app.post("/echo")
async def echo(request: Request):
    body = await request.body()
    return Response(
        body,
        media_type="application/octet-stream",
        headers={"x-echo-sha256": hashlib.sha256(body).hexdigest()},
    )


@app.get("/stream")
async def stream(chunks: int = 4, size: int = 1024):
    return StreamingResponse(
        _shared.stream_chunks(chunks, size), media_type="application/octet-stream"
    )


async def sse_events(n):
    for i in range(n):
        yield "id: %d\nevent: tick\ndata: %s\n\n" % (i, _shared.sse_text(NAME, i))
        await _shared.anyio.sleep(_shared.SSE_INTERVAL)


@app.get("/sse")
async def sse(n: int = 100):
    return StreamingResponse(
        sse_events(n), media_type="text/event-stream", headers={"cache-control": "no-cache"}
    )


@app.get("/state", response_class=PlainTextResponse)
async def state(request: Request):
    return request.state.startup_value


@app.get("/error")
async def error():
    raise RuntimeError("fastapi app error route")


@app.get("/timeout")
async def timeout():
    status, text = await _shared.timeout_probe()
    return PlainTextResponse(text, status_code=status)


@app.get("/disconnect")
async def disconnect(id: str):
    return RecordingStreamingResponse(
        _shared.disconnect_stream(id, NAME), id, media_type="text/plain"
    )


@app.get("/background")
async def background(id: str, tasks: BackgroundTasks):
    tasks.add_task(_shared.background_task, id)
    return {"queued": id}


@app.websocket("/ws")
async def ws_echo(websocket: WebSocket, id: str):
    """Echo text as text and bytes as bytes until the client closes (records the close)."""
    await websocket.accept()
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            _shared.record_ws_close(id, message.get("code"))
            return
        if message.get("text") is not None:
            await websocket.send_text(message["text"])
        else:
            await websocket.send_bytes(message["bytes"])
