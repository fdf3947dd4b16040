"""Embeds ferrocorn through its Python API (``Config`` + ``Server``).

Run as ``python -m tests.apps.api_embed MODE`` from the repo root:

* ``loop``: ``await server.serve()`` inside ``asyncio.run`` on the main thread.  Prints
  ``BOUND <host> <port>`` once ``server.started``; reads one line on stdin, then sets
  ``server.should_exit`` and prints ``SERVE-RETURNED`` once ``serve()`` returned.
* ``thread``: the same ``serve()`` runs in a worker thread with its own loop, while the main
  thread makes one request itself (stdlib only) and then asks the server to exit.
"""

import asyncio
import sys
import threading
import time
import urllib.request

import ferrocorn

from tests.apps.basic import app


def make_server():
    config = ferrocorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_level="info")
    return ferrocorn.Server(config)


def bound_port(server):
    addresses = getattr(server, "bound_addresses", None)
    if not addresses:
        print("NO-BOUND-ADDRESSES %r" % (addresses,), flush=True)
        return None
    host, port = addresses[0][0], addresses[0][1]
    print("BOUND %s %d" % (host, port), flush=True)
    return port


async def main_loop():
    server = make_server()
    task = asyncio.ensure_future(server.serve())
    deadline = time.monotonic() + 20
    while not server.started and not task.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    if task.done():
        print("SERVE-ENDED-EARLY %r" % (task.exception(),), flush=True)
        return 2
    if not server.started:
        print("NOT-STARTED", flush=True)
        return 2
    port = bound_port(server)
    if port is not None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.readline)
    server.should_exit = True
    await asyncio.wait_for(task, 20)
    print("SERVE-RETURNED", flush=True)
    return 0 if port is not None else 2


def main_thread():
    server = make_server()
    errors = []

    def run():
        try:
            asyncio.run(server.serve())
        except BaseException as exc:  # noqa: BLE001 - reported
            errors.append(repr(exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        print("NOT-STARTED %r" % errors, flush=True)
        return 2
    port = bound_port(server)
    if port is None:
        server.should_exit = True
        thread.join(20)
        return 2
    with urllib.request.urlopen("http://127.0.0.1:%d/index?i=thread-ok" % port, timeout=10) as r:
        print("RESPONSE %d %s" % (r.status, r.read().decode()), flush=True)
    server.should_exit = True
    thread.join(20)
    if thread.is_alive():
        print("SERVE-STILL-RUNNING", flush=True)
        return 2
    print("SERVE-RETURNED errors=%r" % errors, flush=True)
    return 0 if not errors else 2


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "loop"
    sys.exit(asyncio.run(main_loop()) if mode == "loop" else main_thread())
