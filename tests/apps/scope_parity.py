"""A server whose app answers every HTTP request with a canonical text of its whole scope, for
tests/test_scope_parity.py.

Run from the repo root as ``python -m tests.apps.scope_parity [--task-factory] [--uds PATH]
[--root-path PATH]``: it serves on 127.0.0.1 (an ephemeral port) or on the Unix socket through
the embedding API (``Config`` + ``Server.serve()``). With ``--task-factory`` a task factory that
makes plain ``asyncio.Task`` objects is on the loop before the server core is created: the core
then starts requests through the loop's ``create_task`` and builds every scope as a dict in
Rust, where it otherwise may take its fast path (under PyPy: the scope packed into a bytearray
and unpacked in ``ferrocorn/_pypy/scope.py``). Both must give the app the same scope.

Standard library, tests.apps.common and ferrocorn only, 3.9 syntax (it may run under PyPy).
"""

import argparse
import asyncio
import sys

import ferrocorn

from tests.apps.common import lifespan

SERVER = None  # the ferrocorn.Server, once made (the app reads its bound address)


def _store_state(scope):
    state = scope.get("state")
    if state is not None:
        state["startup"] = "done"
        state["numbers"] = [1, 2]


def canonical(value):
    """An exact text of ``value``: every type named, dict keys sorted, nothing left out."""
    if type(value) is dict:
        items = sorted((canonical(k), canonical(v)) for k, v in value.items())
        return "dict{" + ", ".join("%s: %s" % item for item in items) + "}"
    if type(value) in (list, tuple):
        return "%s[%s]" % (type(value).__name__, ", ".join(canonical(v) for v in value))
    return "%s(%s)" % (type(value).__name__, ascii(value))


def _normalized(scope):
    """The scope with what differs per connection or per server by construction replaced:
    the client's port (each connection has its own) and the listening address (each server has
    its own port or socket path). Only a value equal to this server's bound address counts as
    the listening address; anything else stays as it is, so that a wrong one still shows."""
    scope = dict(scope)
    client = scope.get("client")
    if type(client) is tuple and len(client) == 2 and type(client[1]) is int:
        scope["client"] = (client[0], "<client port>")
    server = scope.get("server")
    bound = SERVER.bound_addresses[0] if SERVER is not None and SERVER.bound_addresses else None
    if type(server) is tuple and len(server) == 2 and bound is not None:
        if len(bound) == 2 and server[1] == bound[1]:
            scope["server"] = (server[0], "<listening port>")
        elif len(bound) == 1 and server[0] == bound[0]:
            scope["server"] = ("<listening socket>", server[1])
    return scope


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send, on_startup=_store_state)
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    body = canonical(_normalized(scope)).encode("ascii")
    headers = [
        (b"content-type", b"text/plain"),
        (b"content-length", str(len(body)).encode()),
        # The keys in the order the scope lists them (the body sorts them).
        (b"x-scope-keys", ",".join(scope).encode("ascii")),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _plain_task_factory(loop, coro, **kwargs):
    return asyncio.Task(coro, loop=loop, **kwargs)


async def main(args):
    global SERVER
    if args.task_factory:
        asyncio.get_running_loop().set_task_factory(_plain_task_factory)
    options = {"root_path": args.root_path, "lifespan": "on", "log_level": "info"}
    if args.uds is not None:
        options["uds"] = args.uds
    else:
        options.update(host="127.0.0.1", port=0)
    config = ferrocorn.Config(app, access_log=False, **options)
    SERVER = ferrocorn.Server(config)
    return await SERVER.serve()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--task-factory", action="store_true")
    parser.add_argument("--uds", default=None)
    parser.add_argument("--root-path", default="")
    sys.exit(asyncio.run(main(parser.parse_args())))
