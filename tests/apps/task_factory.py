"""A server on a loop with a custom task factory, for tests/test_task_semantics.py: the app
answers with the type of the task it runs in, which must be the factory's, and its name, which
must be the core's (a graceful shutdown finds the app calls by it).

Run from the repo root as ``python -m tests.apps.task_factory [uvloop]``: it serves on 127.0.0.1 (an
ephemeral port) through the embedding API, with the factory set before the server core is
created, as a tracing tool or an app embedding ``Server.serve()`` would set it.

Standard library and ferrocorn only, 3.9 syntax (it may run under PyPy).
"""

import asyncio
import json
import sys

import ferrocorn


class TracedTask(asyncio.Task):  # type: ignore[type-arg]
    """What the factory makes."""


def traced_task_factory(loop, coro, **kwargs):
    return TracedTask(coro, loop=loop, **kwargs)


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await receive()
    first = type(asyncio.current_task()).__name__
    await asyncio.sleep(0)  # and after a real wait: still the same task
    task = asyncio.current_task()
    body = json.dumps({"task": first, "after_wait": type(task).__name__, "name": task.get_name()})
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body.encode()})


async def main():
    asyncio.get_running_loop().set_task_factory(traced_task_factory)
    config = ferrocorn.Config(app, host="127.0.0.1", port=0, lifespan="off", access_log=False)
    return await ferrocorn.Server(config).serve()


if __name__ == "__main__":
    if sys.argv[1:] == ["uvloop"]:
        import uvloop

        sys.exit(uvloop.run(main()))
    sys.exit(asyncio.run(main()))
