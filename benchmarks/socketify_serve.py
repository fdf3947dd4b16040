"""Serve an ASGI app with socketify's ASGI interface, as run.py's socketify-pypy server.

    pypy3 benchmarks/socketify_serve.py benchmarks.app:app --port 8000

Why not `python -m socketify APP --host 127.0.0.1 --port N`: socketify 0.0.31's listen() puts
the host into its native listen config as a temporary `ffi.new("char[]", ...)` that nothing
keeps alive, so PyPy's GC may free it before uWebSockets reads it. About half of the starts
here then failed with "Failed to listen on port N" and hung instead of exiting. Its CLI always
passes a host (127.0.0.1 by default), so this calls the same ASGI class with an integer port,
the form socketify's README shows, which passes no host: uWebSockets then listens on every
interface (the probe and wrk still use 127.0.0.1).

Everything else is what its CLI does for `--interface asgi --workers 1 --ws none --lifespan
on`, with the CLI's default task factory size (--task-factory-maxitems 100000).
"""

from __future__ import annotations

import argparse
import importlib
import sys


def load(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr or "app")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("app", help="module:attribute of the ASGI app")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--task-factory-maxitems", type=int, default=100_000)
    args = p.parse_args()
    sys.path.insert(0, ".")  # the app is imported from the working directory, as by `-m`
    from socketify import ASGI

    def listening(config) -> None:
        print(f"socketify listening on port {config.port}", flush=True)

    server = ASGI(
        load(args.app),
        websocket=None,
        lifespan=True,
        task_factory_max_items=args.task_factory_maxitems,
    )
    server.listen(args.port, listening).run(workers=1)


if __name__ == "__main__":
    main()
