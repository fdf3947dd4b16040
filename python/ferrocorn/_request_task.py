"""CPython 3.11-3.13: ``RequestTask``, a request task that is set up only if it must be (with
``src/asgi/lazy_task.rs``; PyPy's counterpart is ``_pypy/starter.py``).

The core allocates one per request without running ``__init__``, makes it the current task
and runs the app's first step in the drain (see ``src/asgi/lazy_task.rs``). Most small
handlers finish there, and then the task is simply dropped: no ``asyncio.Task.__init__``,
no loop callback, no entry in asyncio's set of all tasks. A handler that waits gets the
same object initialised as a real ``asyncio.Task``, so anything that saw it as
``current_task()`` keeps a valid task.

Until then, the methods below need a real task: each initialises it first (``_promote``
does nothing for a task that is already one), then runs ``asyncio.Task``'s own method
(``_lazy_task.py``). ``done()`` and ``cancelled()`` are left as they are: both are False for
a task that is still in its first step, and that is what they return for one not yet
initialised.
"""

from __future__ import annotations

import asyncio

from ._lazy_task import NEEDS_A_REAL_TASK, promoting

try:
    from ._ferrocorn import promote_request_task as _promote
except ImportError:  # PyPy: its extension has no lazy tasks (they need the C contextvars API)
    _promote = None  # type: ignore[assignment]


class RequestTask(asyncio.Task):  # type: ignore[type-arg]
    __slots__ = ()


for _name in NEEDS_A_REAL_TASK:
    if hasattr(asyncio.Task, _name):
        setattr(RequestTask, _name, promoting(_name, _promote))
del _name
