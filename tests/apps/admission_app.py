"""An app for the admission-queue tests: requests that block until the test releases them.

``GET /block?id=N`` notes N as started (in the order the app is called) and waits until the
test releases it; ``GET /fast`` answers at once; ``/busy`` blocks the event loop for 1.2 s
(for the loop-lag metric); a WebSocket at any path is accepted and echoes until closed.

The side channel: at lifespan startup the app listens on a port of its own and prints
``CONTROL PORT <n>``; a line ``started`` there answers the started ids as JSON, ``release``
releases the oldest blocked request (answers ``ok``, or ``none`` when none is blocked).
It is served by the app's event loop, outside the server, so no server limit applies to it.
"""

import asyncio
import collections
import json
import sys
import time

started = []
blocked = collections.deque()  # asyncio.Event per blocked request, oldest first


async def control(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            command = line.strip()
            if command == b"started":
                writer.write(json.dumps(started).encode() + b"\n")
            elif command == b"release":
                if blocked:
                    blocked.popleft().set()
                    writer.write(b"ok\n")
                else:
                    writer.write(b"none\n")
            await writer.drain()
    finally:
        writer.close()


async def lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            server = await asyncio.start_server(control, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            print(f"CONTROL PORT {port}", file=sys.stderr, flush=True)
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def respond(send, body, status=200):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def websocket(receive, send):
    message = await receive()
    assert message["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        await send({"type": "websocket.send", "text": message.get("text") or ""})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["type"] == "websocket":
        await websocket(receive, send)
        return
    path = scope["path"]
    if path == "/block":
        query = dict(part.split("=", 1) for part in scope["query_string"].decode().split("&"))
        ident = int(query["id"])
        started.append(ident)
        event = asyncio.Event()
        blocked.append(event)
        await event.wait()
        await respond(send, str(ident).encode())
    elif path == "/busy":
        time.sleep(1.2)  # blocks the loop on purpose
        await respond(send, b"busy")
    elif path == "/sleep":
        await asyncio.sleep(30)
        await respond(send, b"late")
    else:
        await respond(send, b"fast")
