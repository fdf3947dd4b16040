"""For tests/test_pathsend.py: ``http.response.pathsend`` from a raw ASGI app, and the same
files through Starlette's ``FileResponse`` (which uses pathsend when the server offers it)."""

import json
import os
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.responses import FileResponse
from starlette.routing import Route

from tests.apps.common import lifespan

DIR = os.environ.get("PATHSEND_DIR", "/tmp")


def _query(scope):
    return {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}


async def raw(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    query = _query(scope)
    if scope["path"] == "/extensions":
        body = json.dumps(sorted(scope["extensions"])).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    headers = [(b"content-type", b"application/octet-stream")]
    if "declare" in query:
        headers.append((b"content-length", query["declare"].encode()))
    path = query.get("path", "")
    if not path.startswith("/") and "relative" not in query:
        path = os.path.join(DIR, path)
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.pathsend", "path": path})
    if "shrink_to" in query:
        # Cut the file while the core is still sending it.
        os.truncate(path, int(query["shrink_to"]))


async def file_route(request):
    return FileResponse(os.path.join(DIR, request.path_params["name"]))


_starlette = Starlette(routes=[Route("/files/{name}", file_route, methods=["GET", "HEAD"])])
sent_types = {}


async def starlette(scope, receive, send):
    """Starlette, with a count of the message types it sends (``GET /_sent``)."""
    if scope["type"] == "http" and scope["path"] == "/_sent":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(sent_types).encode()})
        return

    async def counting_send(message):
        sent_types[message["type"]] = sent_types.get(message["type"], 0) + 1
        await send(message)

    await _starlette(scope, receive, counting_send)
