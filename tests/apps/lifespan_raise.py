"""Lifespan startup raises an exception."""


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        message = await receive()
        assert message["type"] == "lifespan.startup"
        raise RuntimeError("startup-raised-msg-8d0e")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"should never be served"})
