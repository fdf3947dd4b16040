"""What the two lazy request tasks share: the ``asyncio.Task`` methods that need a real task,
and how to wrap one so that it sets the task up first.

A lazy request task is allocated without running ``asyncio.Task.__init__``; the app's first
step runs before the task is set up, and most small handlers finish there. Anything that calls
one of these methods on the task before then gets it set up first, so it always sees a valid
``asyncio.Task``. ``RequestTask`` (``_request_task.py``, CPython 3.11) and ``PyPyRequestTask``
(``_pypy/starter.py``) each wrap them with their own set-up function.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

NEEDS_A_REAL_TASK = (
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
    "get_context",  # 3.12+; reading an unset context would crash the interpreter
    "get_name",
    "set_name",
    "get_stack",
    "print_stack",
    "__await__",
    "__iter__",
    "__repr__",
)


def promoting(name: str, promote: Callable[[Any], None]) -> Callable[..., Any]:
    """``asyncio.Task``'s method ``name``, run after ``promote(task)`` has set the task up."""
    task_method = getattr(asyncio.Task, name)

    def method(self: asyncio.Task, *args: Any, **kwargs: Any) -> Any:  # type: ignore[type-arg]
        promote(self)
        return task_method(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = task_method.__doc__
    return method
