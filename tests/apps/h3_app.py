"""The HTTP/3 tests' app (standard library only: runs under PyPy too).

Routes: ``/scope`` (the scope as JSON), ``/echo`` (the request body back), ``/big?n``
(n bytes), ``/stream?n&size`` (n chunks), ``/trailers``, ``/cancel-me`` (streams until the
client goes, then records what send() raised and what receive() said; ``/cancelled``
reports it), ``/slow`` (answers after a marker line and a pause: graceful shutdown),
``/fail-midway`` (raises after the first chunk), and ``/respond-then-block?fifo=PATH``
(answers, then blocks the event loop reading the FIFO until the test writes to it)."""

import asyncio
import hashlib
import json
import sys
from urllib.parse import parse_qs

cancelled: list = []


def _query(scope):
    return {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}


async def _read_body(receive):
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return bytes(body)


async def _respond(send, status, body, headers=()):
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    path = scope["path"]
    q = _query(scope)
    if path == "/scope":
        extensions = scope.get("extensions") or {}
        tls = extensions.get("tls") or {}
        report = {
            "http_version": scope["http_version"],
            "scheme": scope["scheme"],
            "method": scope["method"],
            "path": scope["path"],
            "query_string": scope["query_string"].decode(),
            "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
            "client": list(scope["client"]),
            "server": list(scope["server"]),
            "extensions": sorted(extensions),
            "tls_version": tls.get("tls_version"),
            "server_cert": bool(tls.get("server_cert")),
        }
        headers = [(b"content-type", b"application/json")]
        await _respond(send, 200, json.dumps(report).encode(), headers)
    elif path == "/echo":
        body = await _read_body(receive)
        digest = hashlib.sha256(body or b"").hexdigest().encode()
        await _respond(send, 200, body or b"", [(b"x-sha256", digest)])
    elif path == "/digest":
        body = await _read_body(receive)
        await _respond(send, 200, hashlib.sha256(body or b"").hexdigest().encode())
    elif path == "/big":
        await _respond(send, 200, b"x" * int(q.get("n", "0")))
    elif path == "/stream":
        n, size = int(q.get("n", "3")), int(q.get("size", "5"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(n):
            chunk = bytes([97 + i % 26]) * size
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/trailers":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"trailer", b"x-checksum")],
                "trailers": True,
            }
        )
        await send({"type": "http.response.body", "body": b"body"})
        await send(
            {
                "type": "http.response.trailers",
                "headers": [(b"x-checksum", b"abc")],
                "more_trailers": False,
            }
        )
    elif path == "/cancel-me":
        await _read_body(receive)  # so that the next receive() can only be the disconnect
        await send({"type": "http.response.start", "status": 200, "headers": []})
        error = None
        try:
            for _ in range(10_000):
                await send({"type": "http.response.body", "body": b"y" * 16384, "more_body": True})
                await asyncio.sleep(0.01)
        except OSError as exc:
            error = type(exc).__name__
        message = await receive()
        cancelled.append({"error": error, "receive": message["type"]})
    elif path == "/cancelled":
        await _respond(send, 200, json.dumps(cancelled).encode())
    elif path == "/slow":
        print("slow request in flight", file=sys.stderr, flush=True)
        await asyncio.sleep(float(q.get("t", "1")))
        await _respond(send, 200, b"finished")
    elif path == "/respond-then-block":
        await _respond(send, 200, b"answered")
        # Blocks the whole loop, as a CPU-bound job after the response would.
        with open(q["fifo"], "rb") as fifo:
            fifo.read()
    elif path == "/fail-midway":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise RuntimeError("the app failed mid-response")
    else:
        await _respond(send, 200, b"hello h3")
