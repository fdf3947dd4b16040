"""Graceful shutdown: in-flight requests finish, new connections are refused, exit codes."""

import os
import signal
import threading
import time

import httpx

from tests.helpers import connect_refused, start_server, wait_until


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
    server = start_server("tests.apps.basic:app", "--lifespan", "on",
                          env={"TEST_APP_SHUTDOWN_MARKER": shutdown})
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
        assert client.get("/hello").status_code == 200  # leaves an idle keep-alive connection
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
        "tests.apps.basic:app", "--lifespan", "on", "--timeout-graceful-shutdown", "1",
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
            raise AssertionError("server still running 15 s after SIGTERM with "
                                 "--timeout-graceful-shutdown 1:\n" + server.output()) from None
        thread.join(15)
        assert results.get("status") != 200, results
    finally:
        server.close()
    assert os.path.exists(shutdown), "lifespan shutdown did not run:\n" + server.output()
    with open(shutdown) as f:
        assert f.read() == "shutdown-ran\n"
