"""Framework matrix: real ASGI frameworks through the real server (issue #7).

Each framework app in ``tests/frameworks/`` serves the same routes (see
``tests/frameworks/_shared.py``).  Install the frameworks with
``pip install -r tests/requirements-frameworks.txt`` (PyPy 3.9:
``tests/requirements-frameworks-pypy.txt``).

A framework that is missing makes its tests FAIL on CPython (so CI cannot silently skip the
matrix); only under PyPy, where some frameworks do not install, are they skipped.
"""

import asyncio
import hashlib
import importlib
import os
import platform
import socket
import subprocess
import sys
import uuid

import httpx
import pytest

from tests.apps.common import pattern_chunk
from tests.frameworks._shared import PLAIN_TEXT, WS_TEXT_MESSAGES, json_doc, sse_text
from tests.support.helpers import (
    SERVER_PYTHON,
    RawConnection,
    request_bytes,
    start_server,
    wait_until,
)

FRAMEWORKS = ["starlette", "fastapi", "django", "quart", "litestar", "falcon"]
# Frameworks whose app has a /background route (a task that runs after the response).
BACKGROUND_FRAMEWORKS = ["starlette", "fastapi", "litestar"]
# Frameworks whose app has the /ws echo route; Django has no WebSockets without Channels.
WEBSOCKET_FRAMEWORKS = [
    f
    if f != "django"
    else pytest.param(
        f,
        marks=pytest.mark.skip(
            reason="Django has no ASGI WebSocket support without Channels (not a dependency)"
        ),
    )
    for f in FRAMEWORKS
]
# How each framework's /ws handler learns that the client closed with 1000 (see _shared.py):
# most hand it the websocket.disconnect event with its code; Quart cancels the handler task.
WS_CLOSE_NOTES = {"quart": "cancelled:CancelledError\n"}

# Django < 5 (the version PyPy 3.9 gets) leaves the view's async iterator to the garbage
# collector when send() raises; on PyPy the test asks the app to collect (see django_app.py).
GC_POKE = {"django"}

_SERVER_INFO = {}


def _server_interpreter_is_pypy():
    if "pypy" not in _SERVER_INFO:
        if os.path.realpath(SERVER_PYTHON) == os.path.realpath(sys.executable):
            _SERVER_INFO["pypy"] = platform.python_implementation() == "PyPy"
        else:
            out = (
                subprocess.run(
                    [
                        SERVER_PYTHON,
                        "-c",
                        "import platform; print(platform.python_implementation())",
                    ],
                    stdout=subprocess.PIPE,
                    check=True,
                    timeout=60,
                )
                .stdout.decode()
                .strip()
            )
            _SERVER_INFO["pypy"] = out == "PyPy"
    return _SERVER_INFO["pypy"]


def require_framework(name):
    """Skip under PyPy when ``name`` is not installed; fail on CPython."""
    same_interpreter = os.path.realpath(SERVER_PYTHON) == os.path.realpath(sys.executable)
    if same_interpreter and platform.python_implementation() == "PyPy":
        pytest.importorskip(name)
        return
    if same_interpreter:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            pytest.fail(
                "framework %r is not installed on CPython (%s): "
                "pip install -r tests/requirements-frameworks.txt" % (name, exc)
            )
        return
    proc = subprocess.run(
        [SERVER_PYTHON, "-c", "import " + name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=120,
    )
    if proc.returncode != 0:
        if _server_interpreter_is_pypy():
            pytest.skip("%s does not import on the PyPy server interpreter" % name)
        pytest.fail(
            "framework %r is not installed for %s: %s"
            % (name, SERVER_PYTHON, proc.stdout.decode()[-500:])
        )


def pattern_bytes(size):
    out = bytearray()
    pos = 0
    while pos < size:
        n = min(1 << 20, size - pos)
        out += pattern_chunk(pos, n)
        pos += n
    return bytes(out)


def start_framework_server(fw, marker_dir):
    token = uuid.uuid4().hex
    server = start_server(
        "tests.frameworks.%s_app:app" % fw,
        "--lifespan",
        "on",
        "--no-access-log",
        env={"FW_MARKER_DIR": str(marker_dir), "FW_STARTUP_TOKEN": token},
        timeout=60,
    )
    server.fw = fw
    server.token = token
    server.markers = str(marker_dir)
    return server


def read_marker(server, name):
    path = os.path.join(server.markers, name)
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


@pytest.fixture(scope="module", params=FRAMEWORKS)
def fw(request):
    require_framework(request.param)
    return request.param


@pytest.fixture(scope="module")
def server(fw, tmp_path_factory):
    with start_framework_server(fw, tmp_path_factory.mktemp("fw-" + fw)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def assert_serving(server):
    assert server.proc.poll() is None, "server died:\n" + server.output()[-3000:]
    with httpx.Client(base_url=server.url, timeout=10) as c:
        r = c.get("/plain")
    assert r.status_code == 200 and r.text == PLAIN_TEXT % server.fw, r


# ---------------------------------------------------------------- simple responses


def test_plaintext(server, client):
    r = client.get("/plain")
    assert r.status_code == 200
    assert r.text == PLAIN_TEXT % server.fw
    assert r.headers["content-type"].startswith("text/plain")


def test_json(server, client):
    r = client.get("/json")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == json_doc(server.fw)


@pytest.mark.parametrize(
    "size,chunked",
    [
        (100 * 1000, False),
        (10 * 1024 * 1024, False),
        (10 * 1024 * 1024, True),
    ],
    ids=["100kB", "10MB", "10MB-chunked"],
)
def test_post_echo_intact(server, client, size, chunked):
    body = pattern_bytes(size)
    digest = hashlib.sha256(body).hexdigest()
    if chunked:

        def gen():
            for pos in range(0, size, 300 * 1000):  # odd-sized pieces
                yield body[pos : pos + 300 * 1000]

        content = gen()
    else:
        content = body
    r = client.post("/echo", content=content, headers={"content-type": "application/octet-stream"})
    assert r.status_code == 200, r.text[:500]
    assert r.headers.get("x-echo-sha256") == digest, "the app received a different body"
    assert len(r.content) == size
    assert hashlib.sha256(r.content).hexdigest() == digest


def test_streaming_response_intact(server, client):
    chunks, size = 64, 65536
    expected = hashlib.sha256(pattern_bytes(chunks * size)).hexdigest()
    h = hashlib.sha256()
    total = 0
    with client.stream("GET", "/stream", params={"chunks": chunks, "size": size}) as r:
        assert r.status_code == 200
        for data in r.iter_raw():
            h.update(data)
            total += len(data)
    assert total == chunks * size
    assert h.hexdigest() == expected


def test_server_sent_events(server, client):
    events = []
    current = {}
    with client.stream("GET", "/sse", params={"n": 1000}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line == "":
                if current:
                    events.append(current)
                    current = {}
                if len(events) >= 3:
                    break
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            current.setdefault(field, value[1:] if value.startswith(" ") else value)
    # leaving the block closes the connection in the middle of the event stream
    assert [e.get("data") for e in events] == [sse_text(server.fw, i) for i in range(3)], events
    assert [e.get("event") for e in events] == ["tick"] * 3, events
    assert [e.get("id") for e in events] == ["0", "1", "2"], events
    assert_serving(server)


# ---------------------------------------------------------------- lifespan


def test_lifespan_startup_state_visible(server, client):
    r = client.get("/state")
    assert r.status_code == 200, r.text[:500]
    assert r.text == "startup:" + server.token


def test_lifespan_shutdown_runs_on_sigterm(fw, tmp_path):
    s = start_framework_server(fw, tmp_path)
    try:
        with httpx.Client(base_url=s.url, timeout=10) as c:
            r = c.get("/state")
        assert r.status_code == 200 and r.text == "startup:" + s.token, r.text[:500]
        assert read_marker(s, "shutdown") is None, "shutdown ran before SIGTERM"
        rc = s.stop(timeout=30)
    finally:
        s.close()
    assert rc == 0, "exit code %r; output:\n%s" % (rc, s.output()[-3000:])
    assert read_marker(s, "shutdown") == "shutdown:%s:%s\n" % (fw, s.token), s.output()[-3000:]


# ---------------------------------------------------------------- errors and cancellation


def test_exception_route_500_then_keeps_serving(server, client):
    for _ in range(3):
        r = client.get("/error")
        assert r.status_code == 500, r.text[:500]
        assert_serving(server)
    r = client.get("/plain")
    assert r.status_code == 200


def test_anyio_fail_after_in_handler(server, client):
    r = client.get("/timeout")
    assert (r.status_code, r.text) == (504, "timed out")
    assert_serving(server)


@pytest.mark.parametrize("rst", [False, True], ids=["close", "reset"])
def test_client_disconnect_during_stream_reaches_handler(server, rst):
    rid = uuid.uuid4().hex
    conn = RawConnection(server.port, timeout=10)
    try:
        conn.send(request_bytes("GET", "/disconnect?id=" + rid))
        head = conn.read_head()
        assert head is not None and head[1] == 200, head
        while len(conn.buf) < 1000:  # some of the stream has arrived
            assert conn.fill(), "the stream ended early"
    finally:
        if rst:
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        conn.close()
    poke_gc = server.fw in GC_POKE and _server_interpreter_is_pypy()

    def recorded():
        if poke_gc:
            httpx.get(server.url + "/gc", timeout=10)
        return read_marker(server, "disconnect-" + rid)

    note = wait_until(recorded, timeout=20, interval=0.1)
    assert note, (
        "the %s handler was neither cancelled nor told about the disconnect within 20 s" % server.fw
    )
    assert "completed" not in note, note
    print("%s noticed the disconnect as: %s" % (server.fw, note.strip().replace("\n", ", ")))
    assert_serving(server)


@pytest.mark.parametrize("fw", BACKGROUND_FRAMEWORKS, indirect=True)
def test_background_task_runs_after_response(server, client):
    rid = uuid.uuid4().hex
    # The task waits for our go-file before writing its marker, so the response can only
    # arrive here if it was sent before the task finished.
    r = client.get("/background", params={"id": rid}, timeout=10)
    assert r.status_code == 200 and r.json() == {"queued": rid}
    assert read_marker(server, "bg-" + rid) is None
    with open(os.path.join(server.markers, "go-" + rid), "w") as f:
        f.write("go")
    note = wait_until(lambda: read_marker(server, "bg-" + rid), timeout=20)
    assert note == "go-seen\n", note
    assert_serving(server)


# ---------------------------------------------------------------- websockets


async def _websocket_echo_session(uri, texts, data):
    """Echo round trips, then a client close 1000; returns (echoes, close code seen)."""
    # The asyncio client, not websockets.sync: on PyPy 3.9 the sync client's close() can hit
    # a threading race in Thread.join ("cannot release un-acquired lock") in the test process.
    from websockets.asyncio.client import connect

    echoes = []
    async with connect(uri, open_timeout=10, close_timeout=10, max_size=None) as ws:
        for message in [*texts, data]:
            await ws.send(message)
            echoes.append(await asyncio.wait_for(ws.recv(), 10))
        await ws.close(1000)
    return echoes, ws.close_code


@pytest.mark.parametrize("fw", WEBSOCKET_FRAMEWORKS, indirect=True)
def test_websocket_echo(server):
    rid = uuid.uuid4().hex
    texts = ["hello %s" % server.fw, "ferr\u00f8 \u2713", "x" * 70000][:WS_TEXT_MESSAGES]
    data = pattern_bytes(100 * 1000)
    uri = "ws://127.0.0.1:%d/ws?id=%s" % (server.port, rid)
    echoes, close_code = asyncio.run(_websocket_echo_session(uri, texts, data))
    assert echoes[:-1] == texts
    assert isinstance(echoes[-1], bytes), type(echoes[-1])  # bytes came back as bytes
    assert echoes[-1] == data
    assert close_code == 1000
    expected = WS_CLOSE_NOTES.get(server.fw, "closed:1000\n")
    note = wait_until(lambda: read_marker(server, "ws-" + rid), timeout=20, interval=0.1)
    assert note == expected, (
        "the %s handler did not see the client's close 1000 as expected "
        "(marker %r)\n%s" % (server.fw, note, server.output()[-3000:])
    )
    assert_serving(server)
