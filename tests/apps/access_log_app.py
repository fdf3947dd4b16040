"""For tests/test_access_log.py: routes that end in every way an access line records, and
a logging filter that marks the lines Python's logging handled (" [py]")."""

import logging
import os

from tests.apps.common import lifespan


class MarkFilter(logging.Filter):
    def filter(self, record):
        record.msg = str(record.msg) + " [py]"
        return True


def add_mark_filter():
    logging.getLogger("ferrocorn.access").addFilter(MarkFilter())


if os.environ.get("ACCESS_APP_FILTER_AT_IMPORT"):
    add_mark_filter()


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1000})
        return
    path = scope["path"]
    if path == "/error":
        raise RuntimeError("access_log_app: an error before the response")
    if path == "/reconfigure":
        add_mark_filter()
    status = 404 if path == "/missing" else 200
    body = b"" if scope["method"] == "HEAD" else b"ok"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", b"2")],
        }
    )
    await send({"type": "http.response.body", "body": body})
