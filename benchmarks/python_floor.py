#!/usr/bin/env python3
"""The Python part of the benchmark suite's floor: the bare Python work of one request.

For each scenario of `run.py` this builds, per request, an ASGI `http` scope equivalent to the
one ferrocorn builds for the request wrk sends (src/asgi/scope.rs: a copy of a template dict,
then http_version, method, a fresh `extensions` dict (with `http.response.pathsend`, as
ferrocorn advertises it), the decoded path, raw_path,
query_string, the header list of (name, value) tuples with fresh value bytes, client, server,
and a shallow copy of the lifespan state), and runs the benchmark app's coroutine
`app(scope, receive, send)` to completion with pre-completed awaitables: `receive()` returns an
already-done future holding the request message, `send(message)` returns an already-done
future. No event loop runs: the coroutine is driven with `.send(None)` until StopIteration
(it never yields, since every await is already complete). Both callables are C-level
(`itertools.repeat(...).__next__` and `functools.partial(next, ...)`), so the measurement
holds nothing but the scope and the app.

The figure is CPU time (`time.process_time()`) over N requests: CPU µs per request, the
median of several repetitions. The scope part is also measured alone, so the report shows
both. The idle-connection scenario has no figure here.

Loop mode: a scenario whose app cannot finish without a running event loop (`sleep`:
asyncio.sleep; `file-*`: Starlette's FileResponse stats the file in an anyio worker thread)
is measured under one instead: uvloop's loop if it imports (the servers run on it), else
asyncio's, with the same C-level receive/send returning already-done futures, and each app
call a task of its own, as many in flight at once as the scenario has wrk connections (a new
one starts when one ends). CPU time is the process's (all threads: the anyio worker threads
too), over N completed requests, median of repetitions, each bounded in wall time. That
figure includes the event loop's own cost per request (creating the task, running it, the
wake-ups a worker thread or a timer needs), so its entry says so: `"driver": "event loop
(uvloop), 64 in flight"`. The scenarios that run without a loop keep the loopless figure
(`--loop` measures them under the loop too, for comparison).

    python benchmarks/python_floor.py                   # every scenario, human-readable
    python benchmarks/python_floor.py --scenarios plaintext,json --json
    python benchmarks/python_floor.py --check           # print each scenario's response

`run.py` runs it with the interpreter of the venv under test, pinned to the servers' CPU,
when the `floor` server is selected, and adds the hyper floor server's CPU µs/request.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import importlib
import itertools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.run import (  # noqa: E402  (needs REPO on sys.path)
    APP_TARGET,
    SCENARIOS,
    ensure_bench_files,
)

# What the scope says about the connection: wrk connects to 127.0.0.1 (run.py's servers
# listen there); the ports are any fixed pair.
CLIENT = ("127.0.0.1", 51234)
SERVER = ("127.0.0.1", 8000)
SERVER_HOST_HEADER = b"127.0.0.1:8000"

_NOT_RUNNABLE = {
    "idle": "no request load to mirror (idle connections)",
}


def request_head(spec: dict) -> tuple[str, bytes, list[tuple[bytes, bytes]], bytes]:
    """The method, request target, headers and body of the request wrk sends (run.py's Lua:
    wrk's Host header, then Accept and Connection; for POST the Content-Type and the
    Content-Length wrk adds)."""
    method = "POST" if spec.get("post_bytes") else "GET"
    headers = [
        (b"host", SERVER_HOST_HEADER),
        (b"accept", spec["accept"].encode()),
        (b"connection", b"keep-alive"),
    ]
    body = b""
    if spec.get("post_bytes"):
        body = b"e" * spec["post_bytes"]
        headers += [
            (b"content-type", b"application/octet-stream"),
            (b"content-length", str(len(body)).encode()),
        ]
    return method, spec["path"].encode(), headers, body


def make_scope_builder(spec: dict, state: dict | None):
    """A function that builds a fresh scope per call, as ferrocorn does for this request."""
    method, target, headers, _body = request_head(spec)
    # The bytes a server reads off the socket; fresh value bytes are cut out of it per
    # request, as ferrocorn makes fresh PyBytes from hyper's parsed head.
    raw_path_end = target.find(b"?")
    raw_path_end = len(target) if raw_path_end < 0 else raw_path_end
    lines = [target] + [v for _, v in headers]
    raw = b"\n".join(lines) + b"\n"
    spans, pos = [], 0
    for line in lines:
        spans.append((pos, pos + len(line)))
        pos += len(line) + 1
    (t0, _t1), value_spans = spans[0], spans[1:]
    path_span = (t0, t0 + raw_path_end)
    query_span = (t0 + raw_path_end + 1, t0 + len(target)) if raw_path_end < len(target) else None
    names = [n for n, _ in headers]  # ferrocorn caches header-name bytes: the same objects
    header_spans = list(zip(names, value_spans))
    template = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.5"},
        "http_version": None,
        "scheme": "http",
        "method": None,
        "path": None,
        "raw_path": None,
        "query_string": None,
        "root_path": "",
        "headers": None,
        "client": None,
        "server": None,
        "extensions": None,
    }
    if state is not None:
        template["state"] = None
    client_host, client_port = CLIENT
    server_host, server_port = SERVER

    def build() -> dict:
        scope = template.copy()
        scope["http_version"] = "1.1"
        scope["method"] = method
        # Fresh per request; pathsend is advertised on every HTTP scope, nothing else on
        # cleartext HTTP/1.1.
        scope["extensions"] = {"http.response.pathsend": {}}
        raw_path = raw[path_span[0] : path_span[1]]
        scope["path"] = raw_path.decode("utf-8", "replace")  # no %-escapes in these paths
        scope["raw_path"] = raw_path
        scope["query_string"] = raw[query_span[0] : query_span[1]] if query_span else b""
        scope["headers"] = [(name, raw[a:b]) for name, (a, b) in header_spans]
        scope["client"] = (client_host, client_port)
        scope["server"] = (server_host, server_port)
        if state is not None:
            scope["state"] = state.copy()
        return scope

    return build


def load_app(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def lifespan_state(app) -> dict | None:
    """Run the app's lifespan startup as a server would; the state dict ferrocorn then copies
    into every scope (None if the app does not support lifespan)."""
    state: dict = {}
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.5"}}
    scope["state"] = state
    # Made inside the loop: on Python 3.9 (PyPy) an Event binds the loop current at creation.
    events: list[asyncio.Event] = []
    failed: list = []

    async def receive():
        started, stop = events
        if not started.is_set():
            return {"type": "lifespan.startup"}
        await stop.wait()
        return {"type": "lifespan.shutdown"}

    async def send(message):
        started = events[0]
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"] == "lifespan.startup.failed":
            failed.append(message)
            started.set()

    async def main():
        events[:] = [asyncio.Event(), asyncio.Event()]
        started, stop = events
        task = asyncio.ensure_future(app(scope, receive, send))
        waiter = asyncio.ensure_future(started.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set() or failed:
            waiter.cancel()
            return False
        stop.set()
        await asyncio.wait_for(task, 5)
        return True

    try:
        ok = asyncio.run(main())
    except Exception:  # noqa: BLE001 -- an app without lifespan support raises
        ok = False
    return state if ok else None


class _Loopless:
    """Pre-completed awaitables for receive() and send(), and the coroutine driver. With
    `loop` (the loop mode's running loop) the futures are that loop's; without one, a loop
    of its own only owns them and never runs."""

    def __init__(self, request_message: dict, loop: asyncio.AbstractEventLoop | None = None):
        self._own_loop = loop is None
        self.loop = asyncio.new_event_loop() if loop is None else loop
        self.received = self.loop.create_future()
        self.received.set_result(request_message)
        self.sent = self.loop.create_future()
        self.sent.set_result(None)
        # A done future can be awaited any number of times; it returns its result at once.
        self.receive = itertools.repeat(self.received).__next__
        self.send = functools.partial(next, itertools.repeat(self.sent))

    def close(self) -> None:
        if self._own_loop:
            self.loop.close()


def check_response(app, build, request_message: dict) -> dict:
    """One request with a recording send(): the response the app produced, so a broken
    scenario (an app that needs a running loop, a 404) is caught before timing it."""
    sent: list[dict] = []
    loopless = _Loopless(request_message)

    def send(message):
        sent.append(message)
        return loopless.sent

    try:
        coro = app(build(), loopless.receive, send)
        try:
            yielded = coro.send(None)
        except StopIteration:
            pass
        else:
            coro.close()
            raise RuntimeError(f"the app awaited something not complete ({yielded!r})")
    finally:
        loopless.close()
    return summarize_sent(sent)


def summarize_sent(sent: list[dict]) -> dict:
    """The response the app's send() calls made up (`pathsend`: the path it handed over)."""
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    if start is None:
        raise RuntimeError("the app sent no http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    out = {
        "status": start["status"],
        "headers": [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start["headers"]],
        "body_bytes": len(body),
        "body_head": body[:120].decode("latin-1"),
        "messages": len(sent),
    }
    pathsend = next((m for m in sent if m["type"] == "http.response.pathsend"), None)
    if pathsend is not None:
        out["pathsend"] = pathsend["path"]
    return out


def validate_loop_response(sent: list[dict]) -> dict:
    """The loop mode's check of one response: status 200, then the body as a pathsend
    message (the file there, as long as content-length says) or body messages ending with
    more_body false. Raises RuntimeError otherwise."""
    response = summarize_sent(sent)
    if response["status"] != 200:
        raise RuntimeError(f"the app answered {response['status']}")
    length = next((v for k, v in response["headers"] if k.lower() == "content-length"), None)
    if "pathsend" in response:
        size = os.stat(response["pathsend"]).st_size
        if length is not None and int(length) != size:
            raise RuntimeError(f"pathsend of {size} bytes, content-length {length}")
    else:
        bodies = [m for m in sent if m["type"] == "http.response.body"]
        if not bodies or bodies[-1].get("more_body", False):
            raise RuntimeError("no final http.response.body (nor a pathsend) message")
        if length is not None and int(length) != response["body_bytes"]:
            raise RuntimeError(f"{response['body_bytes']} body bytes, content-length {length}")
    return response


def new_event_loop() -> tuple[asyncio.AbstractEventLoop, str]:
    """uvloop's loop if it imports (the servers run on it), else asyncio's; and its name."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop(), "asyncio"
    return uvloop.new_event_loop(), "uvloop"


async def drive_tasks(
    app, build, receive, send, n: int, in_flight: int, wall_limit: float
) -> tuple[int, BaseException | None]:
    """Run up to n app calls, each as a task of the running loop, `in_flight` at a time: a
    new one starts when one ends, until n have started or wall_limit seconds have passed
    (looked at every 128 completions). Returns the completed calls and the first error."""
    loop = asyncio.get_running_loop()
    create_task = loop.create_task
    finished = loop.create_future()
    deadline = time.monotonic() + wall_limit
    started = running = done = 0
    stop = False
    error: BaseException | None = None

    def start() -> None:
        nonlocal started, running
        started += 1
        running += 1
        create_task(app(build(), receive, send)).add_done_callback(on_done)

    def on_done(task: asyncio.Task) -> None:
        nonlocal running, done, stop, error
        running -= 1
        exc = asyncio.CancelledError() if task.cancelled() else task.exception()
        if exc is None:
            done += 1
            if not done & 127 and time.monotonic() >= deadline:
                stop = True
        elif error is None:
            error = exc
        if error is None and not stop and started < n:
            start()
        elif running == 0 and not finished.done():
            finished.set_result(None)

    for _ in range(min(in_flight, n)):
        start()
    await finished
    return done, error


def measure_with_loop(
    spec: dict, target: str, app, build, request_message: dict, seconds: float, repeats: int
) -> dict:
    """The loop mode (see the module docstring): CPU µs per request under a running loop."""
    in_flight = max(1, int(spec.get("connections", 1)))
    wall_limit = max(1.0, 4 * seconds)  # per timed run: `sleep` is bound by its timers
    loop, loop_name = new_event_loop()
    io = _Loopless(request_message, loop)

    async def one_checked() -> dict:
        sent: list[dict] = []

        async def send(message):
            sent.append(message)

        await asyncio.wait_for(loop.create_task(app(build(), io.receive, send)), 10)
        return validate_loop_response(sent)

    async def timed(n: int) -> tuple[float, int]:
        t0 = time.process_time()
        done, error = await drive_tasks(app, build, io.receive, io.send, n, in_flight, wall_limit)
        spent = time.process_time() - t0
        if error is not None:
            raise RuntimeError(f"an app call failed: {type(error).__name__}: {error}")
        if not done:
            raise RuntimeError(f"no request completed in {wall_limit:g} s")
        return spent, done

    async def run() -> tuple[dict, int, list[float]]:
        response = await one_checked()
        # Calibrate (this also starts the worker threads and warms the caches up).
        n = max(1000, 4 * in_flight)
        while True:
            spent, done = await timed(n)
            if spent >= 0.05 or done < n or n >= 10_000_000:
                break
            n *= 4
        n = max(2 * in_flight, int(seconds * done / max(spent, 1e-6)))
        rounds = []
        for _ in range(repeats):
            spent, done = await timed(n)
            rounds.append(spent * 1e6 / done)
        return response, n, rounds

    try:
        response, n, total = loop.run_until_complete(run())
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        io.close()
        loop.close()
    scope_only = [time_loop(build, n) * 1e6 / n for _ in range(repeats)]
    return floor_result(
        target,
        n,
        total,
        scope_only,
        response,
        driver=f"event loop ({loop_name}), {in_flight} in flight",
        loop=loop_name,
        in_flight=in_flight,
    )


def floor_result(
    target: str, n: int, total: list, scope_only: list, response: dict, **extra
) -> dict:
    """A scenario's entry: medians of the per-request figures of each repetition (µs),
    the app's share being the difference, and what else the mode adds (`extra`)."""
    total_us = statistics.median(total)
    scope_us = statistics.median(scope_only)
    return {
        "status": "ok",
        "app": target,
        **extra,
        "iterations": n,
        "repeats": len(total),
        "cpu_us_per_req": total_us,
        "scope_us_per_req": scope_us,
        "app_us_per_req": max(0.0, total_us - scope_us),
        "rounds_us": [round(x, 4) for x in total],
        "scope_rounds_us": [round(x, 4) for x in scope_only],
        "response": response,
    }


def time_loop(fn, n: int) -> float:
    """CPU seconds for n calls of fn (process CPU time: user + system)."""
    t0 = time.process_time()
    for _ in itertools.repeat(None, n):
        fn()
    return time.process_time() - t0


def measure_scenario(name: str, seconds: float, repeats: int, with_loop: bool = False) -> dict:
    """The scenario's Python floor: loopless if the app runs so (and not `with_loop`), else
    under a running loop (measure_with_loop)."""
    spec = SCENARIOS[name]
    if spec["kind"] in _NOT_RUNNABLE:
        return {"status": "n/a", "reason": _NOT_RUNNABLE[spec["kind"]]}
    if spec.get("group") == "files":
        ensure_bench_files()  # run.py makes them too; here for a run of this script alone
    target = spec.get("app", APP_TARGET)
    try:
        app = load_app(target)
    except ImportError as exc:
        return {"status": "n/a", "reason": f"cannot import {target}: {exc}"}
    state = lifespan_state(app)
    build = make_scope_builder(spec, state)
    _method, _target, _headers, body = request_head(spec)
    request_message = {"type": "http.request", "body": body, "more_body": False}
    request = f"{_method} {spec['path']}"
    try:
        response = check_response(app, build, request_message)
    except Exception as exc:  # noqa: BLE001 -- then under a loop
        loopless_error: str | None = f"{type(exc).__name__}: {exc}"
    else:
        loopless_error = None
        if response["status"] >= 400:
            return {"status": "n/a", "reason": f"the app answered {response['status']}"}
    if loopless_error is not None or with_loop:
        try:
            out = measure_with_loop(spec, target, app, build, request_message, seconds, repeats)
        except Exception as exc:  # noqa: BLE001 -- reported, not raised
            reason = f"under a running event loop: {type(exc).__name__}: {exc}"
            if loopless_error is not None:
                reason = f"needs a running event loop ({loopless_error}); {reason}"
            return {"status": "n/a", "reason": reason, "app": target}
        out["request"] = request
        if loopless_error is not None:
            out["loopless"] = f"needs a running event loop ({loopless_error})"
        return out

    loopless = _Loopless(request_message)
    receive, send = loopless.receive, loopless.send

    def one_request() -> None:
        run_loopless(app, build, receive, send)

    try:
        # Calibrate: enough iterations for `seconds` of CPU per repetition.
        n = 1000
        while True:
            spent = time_loop(one_request, n)
            if spent >= 0.05 or n >= 10_000_000:
                break
            n *= 4
        n = max(1000, int(n * seconds / max(spent, 1e-6)))
        total = [time_loop(one_request, n) * 1e6 / n for _ in range(repeats)]
        scope_only = [time_loop(build, n) * 1e6 / n for _ in range(repeats)]
    finally:
        loopless.close()
    return floor_result(target, n, total, scope_only, response, request=request)


def callgrind_loop(name: str, n: int) -> None:
    """Run scenario `name`'s request n times and nothing else: floor_callgrind.py runs this
    under callgrind twice (two values of n) and keeps the difference per request."""
    spec = SCENARIOS[name]
    app = load_app(spec.get("app", APP_TARGET))
    build = make_scope_builder(spec, lifespan_state(app))
    body = request_head(spec)[3]
    loopless = _Loopless({"type": "http.request", "body": body, "more_body": False})
    receive, send = loopless.receive, loopless.send
    try:
        for _ in itertools.repeat(None, n):
            run_loopless(app, build, receive, send)
    finally:
        loopless.close()


def run_loopless(app, build, receive, send) -> None:
    """One request: a fresh scope, and the app's coroutine run to its end in one step (every
    await it makes is already complete); RuntimeError if it waits for something."""
    coro = app(build(), receive, send)
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("the app yielded: it needs an event loop")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", help="comma-separated (default: every scenario of run.py)")
    p.add_argument(
        "--seconds",
        type=float,
        default=0.5,
        help="CPU seconds per repetition (default 0.5)",
    )
    p.add_argument("--repeats", type=int, default=5, help="repetitions, median kept (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object (for run.py)")
    p.add_argument("--check", action="store_true", help="also print each scenario's response")
    p.add_argument(
        "--loop",
        action="store_true",
        help="measure every scenario under a running event loop (default: only those whose "
        "app needs one)",
    )
    args = p.parse_args(argv)
    names = [s.strip() for s in args.scenarios.split(",")] if args.scenarios else list(SCENARIOS)
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        p.error(f"unknown scenario(s) {bad}; choose from {', '.join(SCENARIOS)}")
    out = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "gc_enabled": gc.isenabled(),
        "seconds_per_repeat": args.seconds,
        "scenarios": {},
    }
    for name in names:
        out["scenarios"][name] = measure_scenario(
            name, args.seconds, max(1, args.repeats), with_loop=args.loop
        )
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"Python floor on {out['python']} ({out['executable']})")
    print("CPU µs/request: scope built as ferrocorn builds it + the app's coroutine run to the")
    print("end with pre-completed receive/send awaitables (no event loop); median of repeats.")
    print("Rows marked [loop] ran under a running event loop, each app call a task, as many")
    print("in flight as the scenario has connections: their figure includes the loop's cost.")
    print()
    print(f"{'scenario':22} {'total':>8} {'scope':>8} {'app':>8}  iterations  app / request")
    for name, r in out["scenarios"].items():
        if r["status"] != "ok":
            print(f"{name:22} {'n/a':>8}  {r['reason']}")
            continue
        print(
            f"{name:22} {r['cpu_us_per_req']:8.2f} {r['scope_us_per_req']:8.2f} "
            f"{r['app_us_per_req']:8.2f}  {r['iterations']:>10,}  {r['app']}  {r['request']}"
        )
        if r.get("driver"):
            print(f"{'':22} [loop] {r['driver']}")
        if args.check:
            resp = r["response"]
            print(f"{'':22} -> {resp['status']} {resp['headers']} {resp['body_bytes']} bytes")
            if "pathsend" in resp:
                print(f"{'':22}    pathsend {resp['pathsend']}")
            print(f"{'':22}    {resp['body_head'][:80]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
