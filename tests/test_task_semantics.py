"""The task an app runs in: a real asyncio.Task, whatever shortcut the server takes.

On CPython 3.11-3.13 the first step of each request runs before its asyncio.Task is set
up, and the task is set up only if the request waits or something holds it
(src/asgi/lazy_task.rs); on later versions (and free-threaded builds) it is an eagerly
started asyncio.Task whose first step runs inside the core's drain. Every route of
tests/apps/task_app.py probes something an app or a library (anyio, sniffio,
asyncio.timeout, task groups) relies on. Each test runs on asyncio and on uvloop (where
uvloop installs: CPython), the loop most users run.
"""

import importlib.util
import platform
import sys
import sysconfig

import httpx
import pytest

from tests.support.helpers import SERVER_PYTHON, start_server

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None
LOOPS = [
    "asyncio",
    pytest.param(
        "uvloop", marks=pytest.mark.skipif(not HAS_UVLOOP, reason="uvloop is not installed")
    ),
]
# The server runs the same interpreter as the tests (tests/support/helpers.SERVER_PYTHON).
CPYTHON = platform.python_implementation() == "CPython"
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
if CPYTHON and sys.version_info < (3, 14) and not FREE_THREADED:
    FIRST_STEP = "lazy"
elif CPYTHON and sys.version_info >= (3, 12):
    FIRST_STEP = "eager"
else:
    FIRST_STEP = None  # PyPy: its own starter (src/asgi/pypy/start.rs)


@pytest.fixture(scope="module", params=LOOPS)
def loop(request):
    return request.param


@pytest.fixture(scope="module")
def server(loop):
    with start_server("tests.apps.task_app:app", "--loop", loop) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=15) as c:
        yield c


def get(client, path):
    resp = client.get(path)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    # Every request: a Task from the first line on, asyncio for sniffio, and a context of
    # its own (the previous request set the variable in its copy only).
    assert data.pop("is_task") is True
    assert data.pop("library") == "asyncio"
    assert data.pop("var_before") == "unset"
    return data


def test_handler_that_never_waits(client):
    for _ in range(3):
        assert get(client, "/first-step-only") == {}


def test_first_step_runs_in_the_drain_on_the_chosen_loop(client, loop):
    """CPython 3.11-3.13: the first step runs under a lazy RequestTask, not yet one of
    asyncio's tasks; later CPythons start the request task eagerly. Both run the first step
    inside the drain, on asyncio and on uvloop alike; a fallback to plain tasks would make
    ``eager`` None."""
    for _ in range(3):
        data = get(client, "/eager")
        assert data["loop"] == loop
        assert data["eager"] == FIRST_STEP


def test_same_task_after_waiting(client):
    assert get(client, "/sleep") == {"same_task": True}


def test_anyio_cancel_scopes_across_waits(client):
    assert get(client, "/anyio") == {"moved_on": True, "fail_after": True, "same_task": True}


def test_asyncio_timeout(client):
    # "unsupported": the server runs a Python without asyncio.timeout (PyPy 3.9).
    assert get(client, "/timeout") in ({"timeout": True}, {"timeout": "unsupported"})


def test_task_groups(client):
    assert get(client, "/task-groups") == {"anyio_group": True, "asyncio_group": True}


def test_anyio_to_thread(client):
    assert get(client, "/to-thread") == {"to_thread": 42}


def test_done_callback_added_in_first_step_runs(client):
    get(client, "/done-callback")
    # The callback runs when the task ends: done, not cancelled.
    for _ in range(50):
        seen = get(client, "/done-callbacks-seen")["seen"]
        if seen:
            break
    assert seen == [[True, False]]


def test_task_kept_by_the_app_finishes(client):
    get(client, "/keep-task")
    assert get(client, "/kept-task-state") == {"done": [True], "results": [None]}


def test_task_introspection(client):
    data = get(client, "/introspect")
    assert data["name"] == "ferrocorn.app"
    assert data["repr"] is True
    assert data["in_all_tasks"] is True
    assert data["coroutine_state"] in ("CORO_RUNNING", None)


def test_cancel_of_own_task_is_delivered(client):
    assert get(client, "/self-cancel") == {"cancelled": True}


def test_many_requests_keep_isolated_contexts(client):
    for path in ["/first-step-only", "/sleep"] * 20:
        get(client, path)


def test_app_returning_a_non_coroutine_awaitable():
    with start_server("tests.apps.task_app:awaitable_app") as server:
        resp = httpx.get(server.url + "/", timeout=15)
        assert (resp.status_code, resp.text) == (200, "awaitable")


def test_app_returning_a_non_awaitable_gives_500_and_logs():
    with start_server("tests.apps.task_app:not_awaitable_app") as server:
        resp = httpx.get(server.url + "/", timeout=15)
        assert resp.status_code == 500
        assert server.wait_for_output(r"can't be used in 'await' expression", timeout=5), (
            server.output()
        )
        assert "Exception in ASGI application" in server.output()
        # The worker keeps serving.
        assert httpx.get(server.url + "/again", timeout=15).status_code == 500


@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_custom_task_factory_is_honoured(loop_name):
    """A task factory on the loop makes every request's task, on every Python (on 3.12+ the
    eager fast path used to bypass it), on asyncio and on uvloop."""
    argv = [SERVER_PYTHON, "-m", "tests.apps.task_factory", loop_name]
    with start_server(None, argv=argv) as server, httpx.Client(base_url=server.url) as client:
        for _ in range(3):
            resp = client.get("/")
            assert resp.status_code == 200, resp.text
            expected = {"task": "TracedTask", "after_wait": "TracedTask", "name": "ferrocorn.app"}
            assert resp.json() == expected
