"""What an app sees of its task: asyncio.current_task(), anyio, contextvars, cancellation.

Each route answers a JSON object of observations; tests/test_task_semantics.py checks them.
On CPython 3.11 ferrocorn runs a request's first step before its asyncio.Task is set up
(src/asgi/lazy_task.rs); these routes are what must not be able to tell.
"""

import asyncio
import contextvars
import inspect
import json
import sys

import anyio

try:
    import sniffio
except ImportError:  # anyio no longer needs it everywhere
    sniffio = None

request_var = contextvars.ContextVar("request_var", default="unset")
done_callbacks = []
kept_tasks = []


def observe(task):
    return {
        "is_task": isinstance(task, asyncio.Task),
        "library": sniffio.current_async_library() if sniffio else "asyncio",
        "var_before": request_var.get(),
    }


async def first_step_only(task, out):
    pass


async def eager(task, out):
    """How this first step runs inside the core's drain, and on which loop: "lazy" under a
    ``RequestTask`` not yet set up (CPython 3.11-3.13: not among asyncio's tasks until it
    waits), "eager" as an eagerly started task (3.12+: asyncio keeps it in ``_eager_tasks``
    during its first step), else None."""
    eager_tasks = getattr(asyncio.tasks, "_eager_tasks", None)
    if type(task).__name__ == "RequestTask" and task not in asyncio.all_tasks():
        out["eager"] = "lazy"
    elif eager_tasks is not None and task in eager_tasks:
        out["eager"] = "eager"
    else:
        out["eager"] = None
    out["loop"] = type(asyncio.get_running_loop()).__module__.split(".")[0]


async def sleep(task, out):
    await asyncio.sleep(0.005)
    out["same_task"] = asyncio.current_task() is task


async def anyio_scopes(task, out):
    with anyio.CancelScope():
        await anyio.sleep(0)
    with anyio.move_on_after(0.01) as scope:
        await anyio.sleep(5)
    out["moved_on"] = scope.cancelled_caught
    try:
        with anyio.fail_after(0.01):
            await asyncio.sleep(5)
    except TimeoutError:
        out["fail_after"] = True
    out["same_task"] = asyncio.current_task() is task


async def asyncio_timeout(task, out):
    if not hasattr(asyncio, "timeout"):  # Python < 3.11 (PyPy 3.9)
        out["timeout"] = "unsupported"
        return
    try:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(5)
    except TimeoutError:
        out["timeout"] = True


async def task_groups(task, out):
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.sleep, 0.001)
    out["anyio_group"] = True
    if sys.version_info >= (3, 11):
        async with asyncio.TaskGroup() as group:
            group.create_task(asyncio.sleep(0.001))
    out["asyncio_group"] = True


async def to_thread(task, out):
    out["to_thread"] = await anyio.to_thread.run_sync(lambda: 6 * 7)


async def done_callback(task, out):
    # Registered during the first step of a handler that never waits.
    task.add_done_callback(lambda t: done_callbacks.append([t.done(), t.cancelled()]))


async def done_callbacks_seen(task, out):
    out["seen"] = list(done_callbacks)


async def keep_task(task, out):
    kept_tasks.append(task)


async def kept_task_state(task, out):
    await asyncio.sleep(0.01)
    out["done"] = [t.done() for t in kept_tasks]
    out["results"] = [t.result() for t in kept_tasks if t.done()]


async def introspect(task, out):
    coro = task.get_coro()
    out["coroutine_state"] = inspect.getcoroutinestate(coro) if hasattr(coro, "cr_frame") else None
    out["name"] = task.get_name()
    out["repr"] = repr(task).startswith("<")
    out["in_all_tasks"] = task in asyncio.all_tasks()


async def self_cancel(task, out):
    task.cancel()
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        out["cancelled"] = True
        if hasattr(task, "uncancel"):  # 3.11+: the cancellation is handled
            task.uncancel()
    else:
        out["cancelled"] = False


ROUTES = {
    "/first-step-only": first_step_only,
    "/eager": eager,
    "/sleep": sleep,
    "/anyio": anyio_scopes,
    "/timeout": asyncio_timeout,
    "/task-groups": task_groups,
    "/to-thread": to_thread,
    "/done-callback": done_callback,
    "/done-callbacks-seen": done_callbacks_seen,
    "/keep-task": keep_task,
    "/kept-task-state": kept_task_state,
    "/introspect": introspect,
    "/self-cancel": self_cancel,
}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    task = asyncio.current_task()
    out = observe(task)
    request_var.set(scope["path"])
    await ROUTES[scope["path"]](task, out)
    body = json.dumps(out).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


class AwaitableApp:
    """An app whose __call__ is synchronous and returns an awaitable that is no coroutine."""

    def __call__(self, scope, receive, send):
        return _Respond(send)


class _Respond:
    def __init__(self, send):
        self.send = send

    def __await__(self):
        yield from self.send({"type": "http.response.start", "status": 200}).__await__()
        yield from self.send({"type": "http.response.body", "body": b"awaitable"}).__await__()


awaitable_app = AwaitableApp()


def not_awaitable_app(scope, receive, send):
    return 42
