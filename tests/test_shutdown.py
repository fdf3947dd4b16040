"""Graceful shutdown: in-flight requests finish, new connections are refused, exit codes."""

import os
import signal
import threading
import time

import httpx

from tests.support.h2client import H2Client
from tests.support.helpers import (
    RawConnection,
    connect_refused,
    request_bytes,
    start_server,
    wait_until,
)


def background_get(url, results, timeout=60):
    def run():
        try:
            resp = httpx.get(url, timeout=timeout)
            results["status"] = resp.status_code
            results["text"] = resp.text
        except Exception as exc:  # noqa: BLE001 - reported to the test
            results["error"] = exc
        results["done_at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_in_flight_request_completes_on_sigterm(tmp_path):
    shutdown = str(tmp_path / "shutdown")
    server = start_server(
        "tests.apps.basic:app", "--lifespan", "on", env={"TEST_APP_SHUTDOWN_MARKER": shutdown}
    )
    try:
        results = {}
        thread = background_get(server.url + "/slow?s=2&tag=inflight1", results)
        assert server.wait_for_output(r"SLOW-START inflight1", timeout=10), server.output()
        server.proc.send_signal(signal.SIGTERM)
        sent_at = time.monotonic()
        # New connections are refused while the slow request is still running.
        refused = wait_until(lambda: connect_refused(server.port), timeout=5)
        refused_at = time.monotonic()
        thread.join(30)
        assert not thread.is_alive()
        assert results.get("status") == 200, results
        assert results.get("text") == "slept 2.0"
        assert refused, "server still accepted connections after SIGTERM"
        assert refused_at < results["done_at"], (
            "listener was not closed while a request was in flight "
            "(refused %.2fs, response %.2fs after SIGTERM)"
            % (refused_at - sent_at, results["done_at"] - sent_at)
        )
        rc = server.wait(timeout=15)
    finally:
        server.close()
    assert rc == 0, server.output()
    with open(shutdown) as f:
        assert f.read() == "shutdown-ran\n"


def test_idle_keep_alive_connection_does_not_block_shutdown():
    server = start_server("tests.apps.basic:app")
    try:
        client = httpx.Client(base_url=server.url, timeout=10)
        assert client.get("/").status_code == 200  # leaves an idle keep-alive connection
        started = time.monotonic()
        rc = server.stop(signal.SIGTERM, timeout=15)
        elapsed = time.monotonic() - started
        client.close()
    finally:
        server.close()
    assert rc == 0, server.output()
    assert elapsed < 10, "an idle keep-alive connection held shutdown for %.1fs" % elapsed


def test_graceful_timeout_bounds_shutdown(tmp_path):
    shutdown = str(tmp_path / "shutdown")
    server = start_server(
        "tests.apps.basic:app",
        "--lifespan",
        "on",
        "--timeout-graceful-shutdown",
        "1",
        env={"TEST_APP_SHUTDOWN_MARKER": shutdown},
    )
    try:
        results = {}
        thread = background_get(server.url + "/slow?s=30&tag=stuck", results)
        assert server.wait_for_output(r"SLOW-START stuck", timeout=10), server.output()
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)  # liveness bound, not a performance threshold
        except Exception:
            raise AssertionError(
                "server still running 15 s after SIGTERM with "
                "--timeout-graceful-shutdown 1:\n" + server.output()
            ) from None
        thread.join(15)
        assert results.get("status") != 200, results
    finally:
        server.close()
    assert os.path.exists(shutdown), "lifespan shutdown did not run:\n" + server.output()
    with open(shutdown) as f:
        assert f.read() == "shutdown-ran\n"


def socket_fds(pid):
    """How many sockets the process has open (its listener plus accepted connections)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            pass
    return count


def connect_accepted(server, connect):
    """``connect()`` once the server has accepted it (one more socket in the server)."""
    before = socket_fds(server.pid)
    conn = connect()
    assert wait_until(lambda: socket_fds(server.pid) > before, timeout=10)
    return conn


# Later than the old 0.2 s drain pause, well inside the 1 s first-request grace.
FIRST_REQUEST_DELAY = 0.4


def accepted_then_stopping(server, connect):
    """``connect()`` once the server has accepted it, then SIGTERM; returns the client once
    the server is shutting down and a moment (``FIRST_REQUEST_DELAY``) has passed."""
    client = connect_accepted(server, connect)
    server.proc.send_signal(signal.SIGTERM)
    assert server.wait_for_output(r"Shutting down", timeout=10), server.output()
    time.sleep(FIRST_REQUEST_DELAY)
    return client


def test_connection_accepted_before_sigterm_gets_its_first_request_answered(server_factory):
    """A client that connected before the stop and writes its request a moment later is
    answered, not closed unread: a rolling restart fails no request."""
    server = server_factory("tests.apps.basic:app")
    with accepted_then_stopping(server, lambda: RawConnection(server.port)) as conn:
        conn.send(request_bytes("GET", "/"))
        resp = conn.read_response()
        assert resp is not None and resp.status == 200, (resp, server.output())
        assert resp.body == b"hello world"
        assert conn.read_response() is None  # then closed (idle, the server draining)
    assert server.wait(timeout=15) == 0, server.output()


def test_h2c_connection_accepted_before_sigterm_gets_its_first_stream_answered(server_factory):
    server = server_factory("tests.apps.basic:app")
    with accepted_then_stopping(server, lambda: H2Client(server.port)) as client:
        stream = client.get("/")
        assert stream.status == 200, server.output()
        assert bytes(stream.data) == b"hello world"
    assert server.wait(timeout=15) == 0, server.output()


def test_connection_that_never_writes_does_not_hold_shutdown(server_factory):
    server = server_factory("tests.apps.basic:app")
    with connect_accepted(server, lambda: RawConnection(server.port)) as conn:
        rc = server.stop(signal.SIGTERM, timeout=15)
        assert conn.read_response() is None  # closed without a response: it asked nothing
    assert rc == 0, server.output()
