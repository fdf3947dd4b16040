"""An app whose lifespan startup takes ``$SLOW_START`` seconds (default 5): a heavy import or
a warm-up, as crash_check.py needs it. ``GET /`` answers the worker's pid."""

import asyncio
import os


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await asyncio.sleep(float(os.environ.get("SLOW_START", "5")))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = str(os.getpid()).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})
