"""``RequestTask``: the task of one request on CPython 3.11, set up only if it must be.

The core allocates one per request without running ``__init__``, makes it the current task
and runs the app's first step in the drain (see ``src/asgi/lazy_task.rs``). Most small
handlers finish there, and then the task is simply dropped: no ``asyncio.Task.__init__``,
no loop callback, no entry in asyncio's set of all tasks. A handler that waits gets the
same object initialised as a real ``asyncio.Task``, so anything that saw it as
``current_task()`` keeps a valid task.

Until then, the methods below need a real task: each initialises it first (``_promote``
does nothing for a task that is already one), then runs ``asyncio.Task``'s own method.
``done()`` and ``cancelled()`` are left as they are: both are False for a task that is
still in its first step, and that is what they return for one not yet initialised.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

try:
    from ._ferrocorn import promote_request_task as _promote
except ImportError:  # PyPy: its extension has no lazy tasks (they need the C contextvars API)
    _promote = None  # type: ignore[assignment]


class RequestTask(asyncio.Task):  # type: ignore[type-arg]
    __slots__ = ()


def _promoting(name: str) -> Callable[..., Any]:
    task_method = getattr(asyncio.Task, name)

    def method(self: asyncio.Task, *args: Any, **kwargs: Any) -> Any:  # type: ignore[type-arg]
        _promote(self)
        return task_method(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = task_method.__doc__
    return method


_NEEDS_A_REAL_TASK = (
    "add_done_callback",
    "remove_done_callback",
    "result",
    "exception",
    "set_result",
    "set_exception",
    "cancel",
    "cancelling",
    "uncancel",
    "get_loop",
    "get_coro",
    "get_name",
    "set_name",
    "get_stack",
    "print_stack",
    "__await__",
    "__iter__",
    "__repr__",
)

for _name in _NEEDS_A_REAL_TASK:
    if hasattr(asyncio.Task, _name):
        setattr(RequestTask, _name, _promoting(_name))
del _name
