"""A minimal WebSocket echo app (pure ASGI) for the Autobahn run and the WebSocket benchmark.

Every text or binary message is sent back unchanged; HTTP requests get a short 200.
Standard library and tests.apps.common only, 3.9 syntax (it may run under PyPy).
"""

from tests.apps.common import lifespan


async def app(scope, receive, send):
    kind = scope["type"]
    if kind == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.receive":
                text = message.get("text")
                if text is not None:
                    await send({"type": "websocket.send", "text": text})
                else:
                    await send({"type": "websocket.send", "bytes": message.get("bytes")})
            else:  # websocket.disconnect
                return
    elif kind == "http":
        await receive()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        await send({"type": "http.response.body", "body": b"ws echo"})
    elif kind == "lifespan":
        await lifespan(scope, receive, send)
