"""Falcon (ASGI) app for the framework matrix (routes: see _shared.py)."""

import hashlib
import os

import falcon
import falcon.asgi

from tests.frameworks import _shared

NAME = "falcon"


class Lifespan:
    """Falcon runs lifespan through middleware; the value goes into the ASGI lifespan state."""

    async def process_startup(self, scope, event):
        scope["state"]["startup_value"] = _shared.startup_value()

    async def process_shutdown(self, scope, event):
        _shared.record_shutdown(NAME)


class File:
    async def on_get(self, req, resp, name):
        path = _shared.file_path(name)
        if path is None:
            raise falcon.HTTPNotFound()
        resp.content_type = "application/octet-stream"
        # Falcon's ASGI streams are async file-likes (aiofiles' idiom): reads in a thread.
        resp.stream = _AsyncFile(open(path, "rb"))
        resp.content_length = os.path.getsize(path)


class _AsyncFile:
    def __init__(self, f):
        self.f = f

    async def read(self, size=-1):
        return await _shared.anyio.to_thread.run_sync(self.f.read, size)

    async def close(self):
        self.f.close()


class Plain:
    async def on_get(self, req, resp):
        resp.content_type = falcon.MEDIA_TEXT
        resp.text = _shared.PLAIN_TEXT % NAME


class Json:
    async def on_get(self, req, resp):
        resp.media = _shared.json_doc(NAME)


class Echo:
    async def on_post(self, req, resp):
        body = await req.stream.read()
        resp.content_type = "application/octet-stream"
        resp.set_header("x-echo-sha256", hashlib.sha256(body).hexdigest())
        resp.data = body


class StreamRoute:
    async def on_get(self, req, resp):
        chunks = req.get_param_as_int("chunks", default=4)
        size = req.get_param_as_int("size", default=1024)
        resp.content_type = "application/octet-stream"
        resp.stream = _shared.stream_chunks(chunks, size)


class Sse:
    async def on_get(self, req, resp):
        n = req.get_param_as_int("n", default=100)

        async def events():
            for i in range(n):
                yield falcon.asgi.SSEvent(
                    data=_shared.sse_text(NAME, i).encode(), event="tick", event_id=str(i)
                )
                await _shared.anyio.sleep(_shared.SSE_INTERVAL)

        resp.sse = events()


class State:
    async def on_get(self, req, resp):
        resp.content_type = falcon.MEDIA_TEXT
        resp.text = req.scope["state"]["startup_value"]


class Error:
    async def on_get(self, req, resp):
        raise RuntimeError("falcon app error route")


class Timeout:
    async def on_get(self, req, resp):
        status, text = await _shared.timeout_probe()
        resp.status = status
        resp.content_type = falcon.MEDIA_TEXT
        resp.text = text


class Disconnect:
    async def on_get(self, req, resp):
        resp.content_type = falcon.MEDIA_TEXT
        resp.stream = _shared.ClosingStream(
            _shared.disconnect_stream(req.get_param("id", required=True), NAME)
        )


class WsEcho:
    """Falcon has no public "receive whatever comes" call (receive_text() rejects a binary
    message after consuming it), so this handler follows the test's fixed order:
    WS_TEXT_MESSAGES text messages, then one bytes message, each echoed; then it waits for
    the close, which Falcon reports as WebSocketDisconnected(code)."""

    async def on_websocket(self, req, ws):
        rid = req.get_param("id", required=True)
        await ws.accept()
        try:
            for _ in range(_shared.WS_TEXT_MESSAGES):
                await ws.send_text(await ws.receive_text())
            await ws.send_data(await ws.receive_data())
            await ws.receive_text()
        except falcon.WebSocketDisconnected as exc:
            _shared.record_ws_close(rid, exc.code)
            return
        _shared.record("ws-" + rid, "unexpected message after the echo sequence")


app = falcon.asgi.App(middleware=[Lifespan()])
app.add_route("/file/{name}", File())
app.add_route("/plain", Plain())
app.add_route("/json", Json())
app.add_route("/echo", Echo())
app.add_route("/stream", StreamRoute())
app.add_route("/sse", Sse())
app.add_route("/state", State())
app.add_route("/error", Error())
app.add_route("/timeout", Timeout())
app.add_route("/disconnect", Disconnect())
app.add_route("/ws", WsEcho())
