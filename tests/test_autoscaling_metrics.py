"""--metrics for autoscaling (issue 22, item 6): the wait before the app call, requests
queued, event-loop lag, requests timed out, the core's 503s by reason, TLS handshake
failures; each family present, moving as expected, and summed over --workers.

(The queue's own families moving with the queue: tests/test_admission_queue.py.)
"""

import socket

import httpx

from tests.support.helpers import RawConnection, request_bytes, wait_until
from tests.support.tls_certs import certs
from tests.test_metrics import (
    metrics_port,
    per_worker,
    scrape,
    scrape_until,
    started_pids,
    up_pids,
)

APP = "tests.apps.admission_app:app"


def test_timed_out_requests_are_counted(server_factory):
    server = server_factory(APP, "--metrics", "--metrics-port", "0", "--timeout-request", "0.2")
    port = metrics_port(server)
    before = scrape(port)
    assert before[("ferrocorn_requests_timed_out_total", "")] == 0
    for reason in ("concurrency", "queue_full", "queue_timeout", "draining", "websockets"):
        assert before[("ferrocorn_responses_503_total", f'reason="{reason}"')] == 0
    assert before[("ferrocorn_requests_queued", "")] == 0
    response = httpx.get(f"http://127.0.0.1:{server.port}/sleep", timeout=30)
    assert response.status_code == 503
    assert httpx.get(f"http://127.0.0.1:{server.port}/fast", timeout=30).status_code == 200
    after = scrape(port)
    assert after[("ferrocorn_requests_timed_out_total", "")] == 1
    # The core's 503 for the timeout is the app call's, not an admission refusal.
    assert after[("ferrocorn_responses_503_total", 'reason="concurrency"')] == 0
    assert after[("ferrocorn_request_wait_seconds_count", "")] == 2
    assert after[("ferrocorn_request_wait_seconds_sum", "")] >= 0


def test_event_loop_lag_is_sampled_and_sees_a_blocked_loop(server_factory):
    server = server_factory(APP, "--metrics", "--metrics-port", "0")
    port = metrics_port(server)
    name = "ferrocorn_event_loop_lag_seconds"
    assert wait_until(lambda: scrape(port)[(name + "_count", "")] >= 2, timeout=20)
    before = scrape(port)
    # /busy blocks the loop for 1.2 s: a sample due every 0.5 s falls inside that block and
    # runs at its end, so at least 0.7 s late.
    assert httpx.get(f"http://127.0.0.1:{server.port}/busy", timeout=30).text == "busy"
    assert wait_until(
        lambda: scrape(port)[(name + "_count", "")] > before[(name + "_count", "")], timeout=20
    )
    after = scrape(port)
    assert after[(name + "_sum", "")] - before[(name + "_sum", "")] >= 0.69
    assert after[(name + "_bucket", 'le="0.5"')] < after[(name + "_count", "")]


def test_tls_handshake_failures_are_counted(server_factory):
    c = certs()
    server = server_factory(
        APP,
        "--ssl-certfile",
        c.server_pem,
        "--ssl-keyfile",
        c.server_key,
        "--metrics",
        "--metrics-port",
        "0",
    )
    port = metrics_port(server)
    assert scrape(port)[("ferrocorn_tls_handshake_failures_total", "")] == 0
    for _ in range(2):
        # Plain HTTP to the TLS port: not a ClientHello.
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(request_bytes("GET", "/fast"))
            while sock.recv(4096):
                pass
    assert wait_until(lambda: scrape(port)[("ferrocorn_tls_handshake_failures_total", "")] == 2), (
        server.output()
    )


def test_the_new_families_are_summed_over_workers(server_factory):
    server = server_factory(
        APP,
        "--workers",
        "2",
        "--metrics",
        "--metrics-port",
        "0",
        "--no-access-log",
        "--timeout-request",
        "0.2",
        "--limit-concurrency",
        "1",
        "--limit-websockets",
        "1",
    )
    port = metrics_port(server)
    assert wait_until(lambda: len(started_pids(server)) >= 2, timeout=30), server.output()
    workers = set(started_pids(server))
    scrape_until(port, lambda s: up_pids(s) == workers)
    timed_out = 0
    for _ in range(6):
        # A new connection each: the kernel spreads them over the workers.
        with RawConnection(server.port, timeout=30) as conn:
            conn.send(request_bytes("GET", "/sleep", [("Connection", "close")]))
            assert conn.read_response().status == 503
        timed_out += 1
    samples = scrape_until(
        port,
        lambda s: (
            s[("ferrocorn_requests_timed_out_total", "")] == timed_out
            and s[("ferrocorn_event_loop_lag_seconds_count", "")] >= 4
        ),
    )
    for family in (
        "ferrocorn_requests_timed_out_total",
        "ferrocorn_requests_queued",
        "ferrocorn_tls_handshake_failures_total",
        "ferrocorn_request_wait_seconds_count",
        "ferrocorn_event_loop_lag_seconds_count",
    ):
        worker_family = "ferrocorn_worker_" + family[len("ferrocorn_") :]
        values = per_worker(samples, worker_family)
        assert set(values) == workers, (family, values)
        assert sum(values.values()) == samples[(family, "")], family
    reason = 'reason="websockets"'
    values = per_worker(samples, "ferrocorn_worker_responses_503_total", reason="websockets")
    assert sum(values.values()) == samples[("ferrocorn_responses_503_total", reason)]
    assert samples[("ferrocorn_request_wait_seconds_count", "")] == timed_out
