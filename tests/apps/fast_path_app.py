"""Reports which path serves the request: the class behind `receive` (PyPy's fast path hands
the app `FastRequest` methods; the PyO3 dispatcher, plain functions or the core's own), and
echoes a body, so both paths can be checked to answer alike."""

import json


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    owner = getattr(receive, "__self__", None)
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    report = {
        "receiver": type(owner).__name__ if owner is not None else None,
        "body": body.decode("latin-1"),
        "path": scope["path"],
        "client": list(scope["client"]) if scope["client"] else None,
    }
    out = json.dumps(report).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": out})
