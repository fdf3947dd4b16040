"""--metrics: counters, the Prometheus endpoint, /health, and the task wrapper that collects."""

import asyncio
import collections
import os
import re
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from ferrocorn._asgi import run_asgi, run_asgi_with_access_log, select_runner
from ferrocorn.config import Config, ConfigError
from ferrocorn.metrics import (
    BUCKETS,
    UNAVAILABLE_REASONS,
    MetricsServer,
    RequestMetrics,
    bind_metrics_socket,
    decode_snapshot,
    encode_snapshot,
    merge_snapshots,
    render,
    render_request_families,
)
from ferrocorn.proxy_headers import ProxyHeadersMiddleware

from tests.support.helpers import (
    RawConnection,
    request_bytes,
    run_ferrocorn,
    start_server,
    wait_until,
)

SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)$")
FAMILIES = {
    "ferrocorn_requests_total": "counter",
    "ferrocorn_responses_total": "counter",
    "ferrocorn_requests_in_flight": "gauge",
    "ferrocorn_open_connections": "gauge",
    "ferrocorn_websocket_connections": "gauge",
    "ferrocorn_request_duration_seconds": "histogram",
    "ferrocorn_requests_queued": "gauge",
    "ferrocorn_requests_timed_out_total": "counter",
    "ferrocorn_tls_handshake_failures_total": "counter",
    "ferrocorn_responses_503_total": "counter",
    "ferrocorn_request_wait_seconds": "histogram",
    "ferrocorn_event_loop_lag_seconds": "histogram",
}
# With a supervisor: the same summed, each per worker, and the supervisor's view.
SUPERVISOR_FAMILIES = {
    **FAMILIES,
    **{"ferrocorn_worker_" + n[len("ferrocorn_") :]: kind for n, kind in FAMILIES.items()},
    "ferrocorn_workers": "gauge",
    "ferrocorn_workers_configured": "gauge",
    "ferrocorn_worker_restarts_total": "counter",
    "ferrocorn_worker_up": "gauge",
    "ferrocorn_worker_start_time_seconds": "gauge",
}
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"(?:,|$)')


def parse_exposition(text, families=FAMILIES):
    """Prometheus text format → {(name, labels): value}; asserts it is well-formed (one HELP
    and TYPE per family, before its samples; no duplicate series; exactly ``families``)."""
    check_with_prometheus_client(text)
    assert text.endswith("\n")
    types = {}
    samples = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, "duplicate TYPE for " + name
            types[name] = kind
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"malformed sample line {line!r}"
        name, labels, value = m.groups()
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        assert family in types, f"sample {line!r} before its TYPE line"
        assert not labels or "".join(m.group(0) for m in LABEL_RE.finditer(labels)) == labels, line
        key = (name, labels or "")
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(value)
    assert types == families
    return samples


def check_with_prometheus_client(text):
    """Also parse with the reference client's parser, when it is installed."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return
    parsed = list(text_string_to_metric_families(text))
    sample_lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert sum(len(family.samples) for family in parsed) == len(sample_lines)


def labels_of(text):
    return dict(LABEL_RE.findall(text))


def per_worker(samples, name, **match):
    """{pid: value} of the per-worker series ``name`` whose other labels are ``match``."""
    values = {}
    for (sample, labels), value in samples.items():
        found = labels_of(labels)
        pid = found.pop("pid", None)
        found.pop("worker", None)
        if sample == name and pid is not None and found == match:
            values[int(pid)] = value
    return values


def check_histogram(samples):
    """Cumulative buckets in order, +Inf == count; returns (buckets, count, sum)."""
    name = "ferrocorn_request_duration_seconds"
    bounds = [repr(float(b)) for b in BUCKETS] + ["+Inf"]
    values = [samples[(name + "_bucket", f'le="{b}"')] for b in bounds]
    assert values == sorted(values), values
    buckets = [k for k in samples if k[0] == name + "_bucket"]
    assert len(buckets) == len(bounds)
    count = samples[(name + "_count", "")]
    assert values[-1] == count
    return values, count, samples[(name + "_sum", "")]


# ---------------------------------------------------------------- pure parts


def test_request_metrics_and_render():
    metrics = RequestMetrics()
    for status, seconds in [(200, 0.001), (200, 0.005), (404, 0.0051), (500, 3.0), (200, 60.0)]:
        metrics.started += 1
        metrics.observe(status, seconds)
    metrics.started += 1  # one still running
    snap = metrics.snapshot(open_connections=3)
    assert snap["requests_total"] == 6
    assert snap["requests_in_flight"] == 1
    assert snap["responses"] == {200: 3, 404: 1, 500: 1}
    assert snap["open_connections"] == 3
    # 0.005 is in the le="0.005" bucket (le means <=); 60 s only in +Inf.
    assert snap["buckets"] == [2, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1]
    samples = parse_exposition(render(snap))
    values, count, total = check_histogram(samples)
    assert values == [2, 3, 3, 3, 3, 3, 3, 3, 3, 4, 4, 5]
    assert (count, total) == (5, pytest.approx(63.0111))
    assert samples[("ferrocorn_responses_total", 'status="200"')] == 3
    assert samples[("ferrocorn_requests_in_flight", "")] == 1
    assert samples[("ferrocorn_open_connections", "")] == 3
    assert samples[("ferrocorn_websocket_connections", "")] == 0


def test_snapshot_encoding_and_labelled_families():
    metrics = RequestMetrics()
    metrics.started = 2
    metrics.observe(200, 0.01)
    metrics.observe(404, 2.0)
    snap = metrics.snapshot(open_connections=1)
    assert decode_snapshot(encode_snapshot(snap)) == snap  # status codes come back as ints
    for junk in (
        b"",
        b"null",
        b"[]",
        b"{}",
        b'{"requests_total": "x"}',
        encode_snapshot(dict(snap, buckets=[1, 2])),
    ):
        with pytest.raises(ValueError):
            decode_snapshot(junk)
    lines = render_request_families(
        [('worker="0",pid="7"', snap), ('worker="1",pid="8"', merge_snapshots([]))],
        prefix="ferrocorn_worker_",
        scope=", per worker",
    )
    text = "\n".join(lines) + "\n"
    families = {"ferrocorn_worker_" + n[len("ferrocorn_") :]: k for n, k in FAMILIES.items()}
    samples = parse_exposition(text, families)
    assert samples[("ferrocorn_worker_requests_total", 'worker="0",pid="7"')] == 2
    assert samples[("ferrocorn_worker_requests_total", 'worker="1",pid="8"')] == 0
    key = ("ferrocorn_worker_responses_total", 'worker="0",pid="7",status="404"')
    assert samples[key] == 1
    key = ("ferrocorn_worker_request_duration_seconds_bucket", 'worker="0",pid="7",le="+Inf"')
    assert samples[key] == 2
    assert (
        "# HELP ferrocorn_worker_requests_total Requests handed to the application, per "
        "worker.\n" in text
    )


def test_merge_snapshots():
    a, b = RequestMetrics(), RequestMetrics()
    a.started, b.started = 2, 1
    a.observe(200, 0.01)
    a.observe(404, 0.2)
    b.observe(200, 20.0)
    b.websockets = 2
    merged = merge_snapshots([a.snapshot(1), b.snapshot(2)])
    assert merged["requests_total"] == 3
    assert merged["responses"] == {200: 2, 404: 1}
    assert merged["open_connections"] == 3
    assert merged["websocket_connections"] == 2
    assert sum(merged["buckets"]) == 3
    assert merged["duration_sum"] == pytest.approx(20.21)
    parse_exposition(render(merged))


# ---------------------------------------------------------------- wrapper selection


class FakeProto:
    def __init__(self, status=200, seconds=0.02):
        self.status, self.seconds = status, seconds
        self.outcome = None

    async def receive(self):
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(self, message):
        if message["type"] == "http.response.start":
            self.status = message["status"]

    def complete(self):
        self.outcome = "complete"

    def fail(self, exc):
        self.outcome = "fail"
        self.status = 500
        return False

    def access_info(self):
        return ("127.0.0.1:1", "GET", "/p?q", "1.1", self.status, 0, self.seconds)

    def waited(self):
        return 0.002


def test_select_runner_defaults_are_the_fast_paths():
    app = object()
    assert select_runner(app, access_log=False) == (app, run_asgi)
    assert select_runner(app, access_log=True) == (app, run_asgi_with_access_log)
    proxy = ProxyHeadersMiddleware(app)
    # Proxy headers without an access log: the middleware around the app, plain wrapper.
    assert select_runner(app, access_log=False, proxy=proxy) == (proxy, run_asgi)
    got_app, wrapper = select_runner(app, access_log=True, proxy=proxy)
    assert got_app is app and wrapper not in (run_asgi, run_asgi_with_access_log)


def test_metrics_wrapper_counts():
    metrics = RequestMetrics()
    seen = []

    async def app(scope, receive, send):
        seen.append(scope)
        if scope["path"] == "/boom":
            raise RuntimeError("boom")
        if scope["type"] == "http":
            snap = metrics.snapshot()
            assert (snap["requests_total"], snap["requests_in_flight"]) == (len(seen), 1)
        await send({"type": "http.response.start", "status": int(scope["path"][1:])})

    app_, wrapper = select_runner(app, access_log=False, metrics=metrics)
    assert app_ is app

    async def main():
        for path in ("/200", "/404", "/boom", "/200"):
            proto = FakeProto()
            await wrapper(app, {"type": "http", "path": path, "headers": []}, proto)
        ws = {"type": "websocket", "path": "/101", "headers": []}
        await wrapper(app, ws, FakeProto())

    asyncio.run(main())
    snap = metrics.snapshot()
    assert snap["requests_total"] == 4 and snap["requests_in_flight"] == 0
    assert snap["responses"] == {200: 2, 404: 1, 500: 1}
    assert sum(snap["buckets"]) == 4
    assert sum(snap["wait_buckets"]) == 4 and snap["wait_sum"] == pytest.approx(0.008)
    assert snap["websocket_connections"] == 0  # counted while running, not as a request


# ---------------------------------------------------------------- the real server


def metrics_port(server):
    m = server.wait_for_output(r"Metrics on http://127\.0\.0\.1:(\d+)/metrics", timeout=5)
    assert m, server.output()
    return int(m.group(1))


def scrape(port):
    resp = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse_exposition(resp.text)


@pytest.fixture(scope="module")
def metrics_server():
    server = start_server("tests.apps.basic:app", "--metrics", "--metrics-port", "0")
    server.metrics_port = metrics_port(server)
    yield server
    server.close()


def test_counters_change_with_requests(metrics_server):
    port = metrics_server.metrics_port
    before = scrape(port)
    with httpx.Client(base_url=metrics_server.url, timeout=10) as client:
        assert client.get("/hello").status_code == 200
        assert client.get("/status", params={"code": "201"}).status_code == 201
        assert client.get("/no-such-route").status_code == 404
        assert client.get("/error/before").status_code == 500
        assert client.post("/echo", content=b"x" * 1000).status_code == 200
    after = scrape(port)

    def delta(name, labels=""):
        return after.get((name, labels), 0) - before.get((name, labels), 0)

    assert delta("ferrocorn_requests_total") == 5
    assert delta("ferrocorn_responses_total", 'status="200"') == 2
    assert delta("ferrocorn_responses_total", 'status="201"') == 1
    assert delta("ferrocorn_responses_total", 'status="404"') == 1
    assert delta("ferrocorn_responses_total", 'status="500"') == 1
    responses = sum(v for (n, _), v in after.items() if n == "ferrocorn_responses_total")
    assert responses == after[("ferrocorn_requests_total", "")]
    assert after[("ferrocorn_requests_in_flight", "")] == 0
    _, count_before, sum_before = check_histogram(before)
    _, count_after, sum_after = check_histogram(after)
    assert count_after - count_before == 5
    assert sum_after > sum_before
    # Scrapes are not requests to the app.
    assert delta("ferrocorn_requests_total") == 5
    assert scrape(port)[("ferrocorn_requests_total", "")] == after[("ferrocorn_requests_total", "")]


def test_in_flight_and_open_connections(metrics_server):
    port = metrics_server.metrics_port
    done = threading.Event()

    def slow():
        try:
            httpx.get(metrics_server.url + "/slow", params={"s": "3"}, timeout=20)
        finally:
            done.set()

    with RawConnection(metrics_server.port) as idle:
        idle.send(request_bytes("GET", "/hello"))
        assert idle.read_response().status == 200  # a kept-alive, idle connection
        thread = threading.Thread(target=slow)
        thread.start()
        deadline = time.monotonic() + 10
        samples = scrape(port)
        while samples[("ferrocorn_requests_in_flight", "")] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
            samples = scrape(port)
        assert samples[("ferrocorn_requests_in_flight", "")] == 1
        assert samples[("ferrocorn_open_connections", "")] >= 2
        thread.join(20)
    assert done.is_set()
    deadline = time.monotonic() + 10
    while scrape(port)[("ferrocorn_requests_in_flight", "")] != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_health_and_other_paths(metrics_server):
    base = f"http://127.0.0.1:{metrics_server.metrics_port}"
    resp = httpx.get(base + "/health", timeout=10)
    assert (resp.status_code, resp.text) == (200, "ok")
    assert resp.headers["connection"] == "close"
    assert httpx.get(base + "/metrics?x=1", timeout=10).status_code == 200
    assert httpx.get(base + "/", timeout=10).status_code == 404
    assert httpx.post(base + "/metrics", timeout=10).status_code == 405
    head = httpx.head(base + "/metrics", timeout=10)
    assert head.status_code == 200 and int(head.headers["content-length"]) > 0
    with socket.create_connection(("127.0.0.1", metrics_server.metrics_port), timeout=10) as s:
        s.sendall(b"garbage\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400 ")


def test_metrics_off_by_default(server_factory):
    server = server_factory("tests.apps.basic:app")
    httpx.get(server.url + "/hello", timeout=10)
    assert "Metrics on" not in server.output()


def test_metrics_port_in_use_is_a_one_line_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = run_ferrocorn(
            "tests.apps.basic:app", "--port", "0", "--metrics", "--metrics-port", str(port)
        )
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert f"Could not bind the metrics endpoint to 127.0.0.1:{port}" in err


def test_config_options():
    config = Config("m:app")
    assert (config.metrics, config.metrics_host, config.metrics_port) == (False, "127.0.0.1", 9090)
    with pytest.raises(ConfigError, match="metrics_port"):
        Config("m:app", metrics=True, metrics_port=70000)
    # Several workers: the supervisor serves the endpoint.
    assert Config("m:app", metrics=True, workers=2).metrics


def test_metrics_server_in_process():
    async def main():
        sock = bind_metrics_socket("127.0.0.1", 0)
        server = MetricsServer(RequestMetrics(), sock, open_connections=lambda: 7)
        await server.start()
        port = server.address[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = await reader.read()
        writer.close()
        server.close()
        return data

    data = asyncio.run(main())
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    samples = parse_exposition(body.decode())
    assert samples[("ferrocorn_open_connections", "")] == 7


def test_websocket_sessions_are_a_gauge_not_requests(server_factory):
    from tests.support.wsraw import RawWebSocket

    server = server_factory("tests.apps.ws_app:app", "--metrics", "--metrics-port", "0")
    port = metrics_port(server)
    before = scrape(port)
    assert before[("ferrocorn_websocket_connections", "")] == 0
    with RawWebSocket(server.port, "/wait"):
        deadline = time.monotonic() + 10
        samples = scrape(port)
        while samples[("ferrocorn_websocket_connections", "")] < 1:
            assert time.monotonic() < deadline, samples
            time.sleep(0.05)
            samples = scrape(port)
        assert samples[("ferrocorn_websocket_connections", "")] == 1
        assert samples[("ferrocorn_requests_in_flight", "")] == 0
    deadline = time.monotonic() + 10
    while scrape(port)[("ferrocorn_websocket_connections", "")] != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    after = scrape(port)
    assert after[("ferrocorn_requests_total", "")] == before[("ferrocorn_requests_total", "")]
    assert check_histogram(after)[1] == check_histogram(before)[1]


def test_cli_options_and_environment(monkeypatch):
    from click.testing import CliRunner
    from ferrocorn import cli, server

    configs = []
    monkeypatch.setattr(server, "run_config", lambda config: configs.append(config) or 0)
    runner = CliRunner()
    env = {
        "FERROCORN_METRICS": "true",
        "FERROCORN_METRICS_PORT": "9191",
        "FERROCORN_METRICS_HOST": "0.0.0.0",
    }
    assert runner.invoke(cli.main, ["m:app"], env=env).exit_code == 0
    assert runner.invoke(cli.main, ["m:app", "--metrics-port", "9292"], env=env).exit_code == 0
    assert runner.invoke(cli.main, ["m:app"]).exit_code == 0
    assert [(c.metrics, c.metrics_host, c.metrics_port) for c in configs] == [
        (True, "0.0.0.0", 9191),
        (True, "0.0.0.0", 9292),
        (False, "127.0.0.1", 9090),
    ]
    result = runner.invoke(cli.main, ["m:app", "--metrics", "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert (configs[-1].metrics, configs[-1].workers) == (True, 2)


def test_help_lists_the_new_options_in_their_sections():
    from click.testing import CliRunner
    from ferrocorn import cli

    out = CliRunner().invoke(cli.main, ["--help"], terminal_width=200).output
    for text in (
        "Proxy options:",
        "Metrics options:",
        "--proxy-headers / --no-proxy-headers",
        "--forwarded-allow-ips",
        "FORWARDED_ALLOW_IPS",
        "--access-log-format",
        "--metrics / --no-metrics",
        "--metrics-host",
        "--metrics-port",
    ):
        assert text in out, text
    logging_section = out.split("Logging options:")[1].split("options:")[0]
    assert "--access-log-format" in logging_section


# ---------------------------------------------------------------- with a supervisor

WORKERS_APP = "tests.apps.workers:app"
STARTED_RE = re.compile(r"Started worker \[(\d+)\]")
REQUEST_FAMILIES = [n for n, kind in FAMILIES.items() if kind != "histogram"]


def started_pids(server):
    return [int(pid) for pid in STARTED_RE.findall(server.output())]


def get_pid(port, target="/pid"):
    with RawConnection(port, timeout=30) as conn:
        conn.send(request_bytes("GET", target, [("Connection", "close")]))
        resp = conn.read_response()
    assert resp is not None and resp.status == 200, resp
    return int(resp.body)


def supervisor_scrape(port):
    resp = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30)
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse_exposition(resp.text, SUPERVISOR_FAMILIES)


def scrape_until(port, predicate, timeout=30):
    """Scrape until ``predicate(samples)``; the last samples."""
    last = {}

    def check():
        last["samples"] = supervisor_scrape(port)
        return predicate(last["samples"])

    assert wait_until(check, timeout=timeout), last.get("samples")
    return last["samples"]


def up_pids(samples):
    return {pid for pid, up in per_worker(samples, "ferrocorn_worker_up").items() if up == 1}


def send_spread(port, workers, at_least=16):
    """Overlapping requests until every pid of ``workers`` served one; the pids, in order."""
    pids = []
    with ThreadPoolExecutor(8) as pool:
        while len(pids) < at_least or not workers <= set(pids):
            pids += pool.map(lambda _: get_pid(port, "/pid?sleep=0.02"), range(16))
            assert len(pids) < 5000, collections.Counter(pids)
    return pids


def assert_aggregate_is_gone_plus_workers(samples, gone=None):
    """Every summed series == the per-worker sum (+ ``gone``: counters of workers no longer
    there), for counters, gauges and the histogram."""
    gone = gone or {}
    for name in REQUEST_FAMILIES + ["ferrocorn_request_duration_seconds_count"]:
        worker_name = "ferrocorn_worker_" + name[len("ferrocorn_") :]
        total = sum(per_worker(samples, worker_name).values()) + gone.get(name, 0)
        if name not in ("ferrocorn_responses_total", "ferrocorn_responses_503_total"):
            assert samples[(name, "")] == total, name
    for reason in UNAVAILABLE_REASONS:
        values = per_worker(samples, "ferrocorn_worker_responses_503_total", reason=reason)
        total = sum(values.values()) + gone.get(("ferrocorn_responses_503_total", reason), 0)
        assert samples[("ferrocorn_responses_503_total", f'reason="{reason}"')] == total, reason
    statuses = {
        labels_of(labels)["status"] for (n, labels) in samples if n == "ferrocorn_responses_total"
    }
    for status in statuses:
        total = sum(per_worker(samples, "ferrocorn_worker_responses_total", status=status).values())
        total += gone.get(("ferrocorn_responses_total", status), 0)
        assert samples[("ferrocorn_responses_total", f'status="{status}"')] == total, status
    for bound in [repr(float(b)) for b in BUCKETS] + ["+Inf"]:
        total = sum(
            per_worker(
                samples, "ferrocorn_worker_request_duration_seconds_bucket", le=bound
            ).values()
        )
        total += gone.get(("bucket", bound), 0)
        key = ("ferrocorn_request_duration_seconds_bucket", f'le="{bound}"')
        assert samples[key] == total, bound
    total = sum(per_worker(samples, "ferrocorn_worker_request_duration_seconds_sum").values())
    total += gone.get("ferrocorn_request_duration_seconds_sum", 0)
    assert samples[("ferrocorn_request_duration_seconds_sum", "")] == pytest.approx(total)


def counters_of_worker(samples, pid):
    """A worker's counter series, keyed like ``assert_aggregate_is_gone_plus_workers``'s gone."""

    def one(name, **match):
        return per_worker(samples, name, **match)[pid]

    gone = {
        "ferrocorn_requests_total": one("ferrocorn_worker_requests_total"),
        "ferrocorn_request_duration_seconds_count": one(
            "ferrocorn_worker_request_duration_seconds_count"
        ),
        "ferrocorn_request_duration_seconds_sum": one(
            "ferrocorn_worker_request_duration_seconds_sum"
        ),
    }
    for (name, labels), value in samples.items():
        found = labels_of(labels)
        if found.get("pid") != str(pid):
            continue
        if name == "ferrocorn_worker_responses_total":
            gone[("ferrocorn_responses_total", found["status"])] = value
        elif name == "ferrocorn_worker_request_duration_seconds_bucket":
            gone[("bucket", found["le"])] = value
    return gone


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_supervisor_sums_workers_and_survives_kill_and_sighup(server_factory):
    server = server_factory(
        WORKERS_APP, "--workers", "2", "--metrics", "--metrics-port", "0", "--no-access-log"
    )
    port = metrics_port(server)
    assert wait_until(lambda: len(started_pids(server)) >= 2, timeout=30), server.output()
    workers = set(started_pids(server))
    assert scrape_until(port, lambda s: up_pids(s) == workers)

    served = send_spread(server.port, workers)
    samples = supervisor_scrape(port)
    counts = collections.Counter(served)
    assert per_worker(samples, "ferrocorn_worker_requests_total") == counts
    assert samples[("ferrocorn_requests_total", "")] == len(served)
    assert samples[("ferrocorn_responses_total", 'status="200"')] == len(served)
    assert_aggregate_is_gone_plus_workers(samples)
    slots = {
        int(labels_of(labels)["pid"]): labels_of(labels)["worker"]
        for (n, labels) in samples
        if n == "ferrocorn_worker_up"
    }
    assert sorted(slots.values()) == ["0", "1"]
    assert samples[("ferrocorn_workers", "")] == 2
    assert samples[("ferrocorn_workers_configured", "")] == 2
    for reason in ("crashed", "recycled", "reloaded"):
        assert samples[("ferrocorn_worker_restarts_total", f'reason="{reason}"')] == 0
    starts = per_worker(samples, "ferrocorn_worker_start_time_seconds")
    assert set(starts) == workers and all(abs(t - time.time()) < 3600 for t in starts.values())
    fds = fd_count(server.pid)

    # SIGKILL: the victim's counts stay in the sums; its replacement takes its slot.
    victim = min(workers)
    gone = counters_of_worker(samples, victim)
    os.kill(victim, signal.SIGKILL)
    assert wait_until(lambda: len(started_pids(server)) >= 3, timeout=30), server.output()
    replacement = started_pids(server)[2]
    workers = workers - {victim} | {replacement}
    samples = scrape_until(port, lambda s: up_pids(s) == workers)
    assert samples[("ferrocorn_requests_total", "")] == len(served)  # did not go back
    assert samples[("ferrocorn_worker_restarts_total", 'reason="crashed"')] == 1
    assert samples[("ferrocorn_workers", "")] == 2
    assert victim not in per_worker(samples, "ferrocorn_worker_up")
    assert per_worker(samples, "ferrocorn_worker_requests_total")[replacement] == 0
    new_slots = {
        int(labels_of(labels)["pid"]): labels_of(labels)["worker"]
        for (n, labels) in samples
        if n == "ferrocorn_worker_up"
    }
    assert new_slots[replacement] == slots[victim]
    assert_aggregate_is_gone_plus_workers(samples, gone)
    more = send_spread(server.port, workers)
    samples = supervisor_scrape(port)
    assert samples[("ferrocorn_requests_total", "")] == len(served) + len(more)
    assert_aggregate_is_gone_plus_workers(samples, gone)

    # SIGHUP: both replaced gracefully; everything they counted stays (their final snapshot).
    before = samples[("ferrocorn_requests_total", "")]
    server.proc.send_signal(signal.SIGHUP)
    assert server.wait_for_output(r"All workers replaced", timeout=60), server.output()
    assert wait_until(lambda: len(started_pids(server)) >= 5, timeout=30)
    newest = set(started_pids(server)[3:])
    samples = scrape_until(
        port,
        lambda s: (
            up_pids(s) == newest
            and set(per_worker(s, "ferrocorn_worker_up")) == newest
            and s[("ferrocorn_worker_restarts_total", 'reason="reloaded"')] == 2
        ),
    )
    assert samples[("ferrocorn_requests_total", "")] == before
    assert samples[("ferrocorn_worker_restarts_total", 'reason="crashed"')] == 1
    assert samples[("ferrocorn_workers", "")] == 2
    # No descriptor of the replaced workers is left behind (pipes, metrics sockets).
    assert wait_until(lambda: fd_count(server.pid) == fds, timeout=10), (fds, server.pid)
    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()


def test_supervisor_keeps_counts_of_recycled_workers(server_factory):
    server = server_factory(
        WORKERS_APP,
        "--workers",
        "2",
        "--metrics",
        "--metrics-port",
        "0",
        "--limit-max-requests",
        "20",
        "--no-access-log",
    )
    port = metrics_port(server)
    assert wait_until(lambda: len(started_pids(server)) >= 2, timeout=30), server.output()
    # No scrape while workers are recycled: what they counted reaches the supervisor only
    # through the snapshot a worker sends when it stops.
    sent = 0
    deadline = time.monotonic() + 60
    while sent < 100 or (len(set(started_pids(server))) < 4 and time.monotonic() < deadline):
        get_pid(server.port)
        sent += 1
    assert wait_until(
        lambda: server.output().count("stopped: it exited with code 0") >= 2, timeout=30
    ), server.output()
    samples = scrape_until(port, lambda s: s[("ferrocorn_requests_total", "")] >= sent)
    assert samples[("ferrocorn_requests_total", "")] == sent
    assert samples[("ferrocorn_responses_total", 'status="200"')] == sent
    assert samples[("ferrocorn_request_duration_seconds_count", "")] == sent
    assert samples[("ferrocorn_worker_restarts_total", 'reason="recycled"')] >= 2
    assert samples[("ferrocorn_worker_restarts_total", 'reason="crashed"')] == 0


def test_supervisor_scrape_does_not_wait_for_a_stuck_worker(server_factory, tmp_path):
    server = server_factory(
        WORKERS_APP, "--workers", "2", "--metrics", "--metrics-port", "0", "--no-access-log"
    )
    port = metrics_port(server)
    assert wait_until(lambda: len(started_pids(server)) >= 2, timeout=30), server.output()
    workers = set(started_pids(server))
    scrape_until(port, lambda s: up_pids(s) == workers)
    served = send_spread(server.port, workers)
    before = supervisor_scrape(port)

    release = tmp_path / "release"
    result = []
    thread = threading.Thread(
        target=lambda: result.append(get_pid(server.port, f"/block?until={release}"))
    )
    thread.start()
    try:
        assert wait_until(lambda: os.path.exists(f"{release}.started"), timeout=30)
        during = supervisor_scrape(port)  # answers although one worker cannot
        ups = per_worker(during, "ferrocorn_worker_up")
        assert set(ups) == workers and sorted(ups.values()) == [0, 1], ups
        stuck = next(pid for pid, up in ups.items() if up == 0)
        assert stuck not in per_worker(during, "ferrocorn_worker_requests_total")
        # Its counters still count (its last answer); its request was not counted then.
        assert during[("ferrocorn_requests_total", "")] == len(served)
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200
    finally:
        release.touch()
        thread.join(60)
    assert result == [stuck]
    after = scrape_until(port, lambda s: up_pids(s) == workers)
    assert after[("ferrocorn_requests_total", "")] == len(served) + 1
    assert before[("ferrocorn_requests_total", "")] == len(served)
    assert_aggregate_is_gone_plus_workers(after)


def test_supervisor_health_waits_for_a_serving_worker(server_factory, tmp_path):
    gate = tmp_path / "start"
    server = server_factory(
        WORKERS_APP,
        "--workers",
        "2",
        "--metrics",
        "--metrics-port",
        "0",
        env={"TEST_WORKERS_STARTUP_WAIT": str(gate)},
    )
    port = metrics_port(server)
    base = f"http://127.0.0.1:{port}"
    # The workers are running but their lifespan startup waits: none serves yet.
    assert wait_until(lambda: supervisor_scrape(port)[("ferrocorn_workers", "")] == 2, timeout=30)
    resp = httpx.get(base + "/health", timeout=30)
    assert resp.status_code == 503, resp.text
    samples = supervisor_scrape(port)
    assert set(per_worker(samples, "ferrocorn_worker_up").values()) == {0}
    assert samples[("ferrocorn_requests_total", "")] == 0
    gate.touch()
    assert wait_until(
        lambda: httpx.get(base + "/health", timeout=30).status_code == 200, timeout=30
    )
    assert httpx.get(base + "/health", timeout=30).text == "ok"


def test_supervisor_metrics_port_in_use_is_a_one_line_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = run_ferrocorn(
            WORKERS_APP, "--port", "0", "--workers", "2", "--metrics", "--metrics-port", str(port)
        )
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert f"Could not bind the metrics endpoint to 127.0.0.1:{port}" in err
    assert "Started worker" not in err
