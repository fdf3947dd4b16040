"""Two ``Server``s in one event loop (the embedding API), for tests/test_shutdown_tasks.py: a
shutdown waits for its own app calls only.

Run from the repo root as ``python -m tests.apps.two_servers``. Both serve
``tests.apps.shutdown_tasks:app`` on 127.0.0.1 (ephemeral ports) and print ``BOUND <name>
<port>`` for ``A`` and ``B``; each line ``stop <name>`` on stdin stops that server and prints
``RETURNED <name>`` once its ``serve()`` returned. Exits once both have.

Standard library, Starlette and ferrocorn only, 3.9 syntax (it may run under PyPy).
"""

import asyncio
import sys

import ferrocorn

from tests.apps.shutdown_tasks import app

NAMES = ("A", "B")


async def started(server, task):
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    return server.started


async def main():
    configs = {name: ferrocorn.Config(app, host="127.0.0.1", port=0) for name in NAMES}
    configs["A"].configure_logging()
    servers = {name: ferrocorn.Server(config) for name, config in configs.items()}
    tasks = {name: asyncio.ensure_future(server.serve()) for name, server in servers.items()}
    for name in NAMES:
        if not await asyncio.wait_for(started(servers[name], tasks[name]), 20):
            print("NOT-STARTED %s" % name, flush=True)
            return 2
        print("BOUND %s %d" % (name, servers[name].bound_addresses[0][1]), flush=True)
    loop = asyncio.get_running_loop()
    while not all(task.done() for task in tasks.values()):
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        name = line.split()[-1]
        servers[name].should_exit = True
        await tasks[name]
        print("RETURNED %s" % name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
