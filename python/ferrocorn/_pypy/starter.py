"""PyPy: request tasks that are set up only if they must be, started by ``pypy_starter``.

The same idea as ``RequestTask`` on CPython 3.11 (``_request_task.py``), in Python. asyncio's
Task is pure Python under PyPy (JIT-compiled), and what costs is each call between the
extension and Python, so the core makes one call per request to ``start`` (from
``pypy_starter``), which runs the wrapper's first step and sets up the task only if it is
needed. PyPy has no reference counts to tell whether a finished task is still held, so a
finished one is completed in place (a done future) if anything touches it.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextvars
from asyncio import tasks as _tasks
from typing import Any, Callable

from .._lazy_task import NEEDS_A_REAL_TASK, promoting
from .scope import scope_unpacker


class _Tasks:
    """What the tasks of one starter share: their loop, and their name (src/asgi/spawn.rs
    ``task_name``: how a graceful shutdown finds them)."""

    __slots__ = ("loop", "name")

    def __init__(self, loop: Any, name: str) -> None:
        self.loop = loop
        self.name = name


class _FirstStep:
    """A PyPy request between its first step and its task's set-up."""

    __slots__ = ("body", "context", "tasks", "yielded", "finished")

    def __init__(self, body: Any, context: Any, tasks: _Tasks) -> None:
        self.body = body
        self.context = context
        self.tasks = tasks
        self.yielded: Any = None
        self.finished = False


class PyPyRequestTask(asyncio.Task):  # type: ignore[type-arg]
    # Until set up: the _FirstStep; None for a real task.
    _ferrocorn_first_step: _FirstStep | None = None
    # An allocated-only task must not report itself as "destroyed while pending".
    _log_destroy_pending = False


def _set_up(task: Any) -> None:
    """Makes ``task`` a real task: a running one, or a done one if its request finished."""
    first = task._ferrocorn_first_step
    if first is None:
        return
    task._ferrocorn_first_step = None
    tasks = first.tasks
    if first.finished:
        # Done with result None, as the task would be; nothing is scheduled.
        asyncio.Future.__init__(task, loop=tasks.loop)
        task._coro = first.body
        task._name = tasks.name
        task._context = first.context
        task._fut_waiter = None
        task._must_cancel = False
        asyncio.Future.set_result(task, None)
        return
    asyncio.Task.__init__(task, _Handoff(first), loop=tasks.loop, name=tasks.name)
    # Later steps run in the context the first one ran in (Python 3.9's Task has no
    # ``context`` argument; its first step only hands over, so its copy does not matter).
    task._context = first.context


class _Handoff:
    """The set-up task's coroutine: its first step hands over what the request's first step
    yielded (or finishes, if the request did); later steps go to the wrapper's coroutine.
    An object rather than a generator, so that an exception thrown in before its first step
    (a cancellation) still reaches the app, which is suspended at an ``await``."""

    __slots__ = ("_first", "_started")

    def __init__(self, first: _FirstStep) -> None:
        self._first = first
        self._started = False

    def send(self, value: Any) -> Any:
        first = self._first
        if not self._started:
            self._started = True
            if first.finished:
                raise StopIteration
            yielded, first.yielded = first.yielded, None
            return yielded
        return first.body.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._started = True
        if val is None and tb is None:
            return self._first.body.throw(typ)
        return self._first.body.throw(typ, val, tb)

    def close(self) -> None:
        self._first.body.close()

    def __next__(self) -> Any:
        return self.send(None)

    def __iter__(self) -> _Handoff:
        return self

    def __await__(self) -> _Handoff:
        return self

    # Introspection (inspect.getcoroutinestate, Task.get_stack) sees the wrapper's coroutine.
    cr_running = property(lambda self: self._first.body.cr_running)
    cr_frame = property(lambda self: self._first.body.cr_frame)
    cr_await = property(lambda self: self._first.body.cr_await)
    cr_code = property(lambda self: self._first.body.cr_code)


collections.abc.Coroutine.register(_Handoff)


def pypy_starter(
    loop: Any, root_path: str = "", state: dict | None = None, name: str = "ferrocorn.app"
) -> Callable[[Any, Any, Any, Any], None]:
    """``start(wrapper, app, scope, proto)``: one request's task named ``name``, its first
    step run now. ``scope`` is the dict, or an ``http`` scope packed into a bytearray or bytes
    (``scope.py``)."""
    unpack = scope_unpacker(root_path, state)
    tasks = _Tasks(loop, name)
    enter_task = _tasks._enter_task
    leave_task = _tasks._leave_task
    copy_context = contextvars.copy_context
    new_task = PyPyRequestTask.__new__

    def first_step(task: Any, first: _FirstStep) -> None:
        enter_task(loop, task)
        try:
            first.yielded = first.body.send(None)
        except StopIteration:
            first.finished = True
        finally:
            leave_task(loop, task)

    def start(wrapper: Any, app: Any, scope: Any, proto: Any) -> None:
        if type(scope) is not dict:
            scope = unpack(scope)  # packed: a bytearray (cpyext), or bytes (the fast path)
        task = new_task(PyPyRequestTask)
        first = _FirstStep(wrapper(app, scope, proto), copy_context(), tasks)
        task._ferrocorn_first_step = first
        first.context.run(first_step, task, first)
        if not first.finished:
            _set_up(task)

    return start


for _name in (*NEEDS_A_REAL_TASK, "done", "cancelled"):
    if hasattr(asyncio.Task, _name):
        setattr(PyPyRequestTask, _name, promoting(_name, _set_up))
del _name
