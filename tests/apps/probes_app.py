"""For tests/test_probes.py and tests/test_path_policy.py. Standard library only, 3.9 syntax
(may run on PyPy).

- ``/block?s=N``: ``time.sleep(N)``, blocking the event loop, then 200 "blocked";
- ``/slow?s=N``: ``await asyncio.sleep(N)``, then 200 "slow";
- anything else: reads the whole body, answers 200 with its length;
- lifespan startup: when ``PROBES_GATE`` names a file, waits until it exists, unless this
  process is the first to create ``PROBES_GATE + ".first"`` (so with workers, one worker
  starts at once and the others wait for the gate).
"""

import asyncio
import os
import time
from urllib.parse import parse_qs


async def _startup_gate():
    gate = os.environ.get("PROBES_GATE")
    if not gate:
        return
    try:
        os.close(os.open(gate + ".first", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return  # the first process to start
    except FileExistsError:
        pass
    while not os.path.exists(gate):
        await asyncio.sleep(0.05)


async def _lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await _startup_gate()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _answer(send, body, status=200):
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    seconds = float(query.get("s", "0"))
    path = scope["path"]
    if path == "/block":
        print("block started", flush=True)
        time.sleep(seconds)
        await _answer(send, b"blocked")
    elif path.endswith("/slow") or path == "/slow":
        print("slow started", flush=True)
        await asyncio.sleep(seconds)
        await _answer(send, b"slow")
    else:
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        await _answer(send, str(size).encode())
