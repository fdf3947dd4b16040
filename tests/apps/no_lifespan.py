"""An app that does not support lifespan: it raises on any non-http scope.

Writes a line to $TEST_APP_LIFESPAN_MARKER each time it is called with a lifespan scope.
"""

import os


async def app(scope, receive, send):
    if scope["type"] != "http":
        marker = os.environ.get("TEST_APP_LIFESPAN_MARKER")
        if marker:
            with open(marker, "a") as f:
                f.write("called with %s\n" % scope["type"])
        raise RuntimeError("no-lifespan-app only speaks http, got %r" % scope["type"])
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": b"no-lifespan-app ok"})
