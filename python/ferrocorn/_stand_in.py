"""With ``--reload``: what serves while the app cannot be loaded or started.

A developer who saves a file with a syntax error should see why in the browser, not a request
hanging until the client gives up (the worker used to exit and leave the socket unanswered until
the next edit). The worker serves this stand-in instead, and the next change replaces the
worker as usual. Without ``--reload`` a failed import still stops the server.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

__all__ = ["failure_app"]


def failure_app(reason: str) -> Callable[[dict[str, Any], Receive, Send], Awaitable[None]]:
    """An ASGI3 app answering every HTTP request with 503 and ``reason``, refusing WebSockets
    (403, the core's denial) and completing lifespan at once."""
    body = (
        "ferrocorn --reload: the application is not running.\n\n"
        f"{reason}\n\nFix it and save: the server reloads on the next change.\n"
    ).encode("utf-8", "replace")

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        elif kind == "http":
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", b"1"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1011})

    return app
