"""Lifespan startup reports failure with ``lifespan.startup.failed`` and a message."""


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        message = await receive()
        assert message["type"] == "lifespan.startup"
        await send({"type": "lifespan.startup.failed", "message": "startup-failed-msg-41b2"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"should never be served"})
