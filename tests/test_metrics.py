"""--metrics: counters, the Prometheus endpoint, /health, and the task wrapper that collects."""

import asyncio
import re
import socket
import threading
import time

import httpx
import pytest
from ferrocorn._asgi import run_asgi, run_asgi_with_access_log, select_wrapper
from ferrocorn.config import Config, ConfigError
from ferrocorn.metrics import (
    BUCKETS,
    MetricsServer,
    RequestMetrics,
    bind_metrics_socket,
    merge_snapshots,
    render,
)
from ferrocorn.proxy_headers import ProxyHeadersMiddleware

from tests.helpers import RawConnection, request_bytes, run_ferrocorn, start_server

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)$')
FAMILIES = {
    "ferrocorn_requests_total": "counter",
    "ferrocorn_responses_total": "counter",
    "ferrocorn_requests_in_flight": "gauge",
    "ferrocorn_open_connections": "gauge",
    "ferrocorn_websocket_connections": "gauge",
    "ferrocorn_request_duration_seconds": "histogram",
}


def parse_exposition(text):
    """Prometheus text format → {(name, labels): value}; asserts it is well-formed."""
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
        key = (name, labels or "")
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(value)
    assert types == FAMILIES
    return samples


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


def test_select_wrapper_defaults_are_the_fast_paths():
    app = object()
    assert select_wrapper(app, access_log=False) == (app, run_asgi)
    assert select_wrapper(app, access_log=True) == (app, run_asgi_with_access_log)
    proxy = ProxyHeadersMiddleware(app)
    # Proxy headers without an access log: the middleware around the app, plain wrapper.
    assert select_wrapper(app, access_log=False, proxy=proxy) == (proxy, run_asgi)
    got_app, wrapper = select_wrapper(app, access_log=True, proxy=proxy)
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

    app_, wrapper = select_wrapper(app, access_log=False, metrics=metrics)
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
        proc = run_ferrocorn("tests.apps.basic:app", "--port", "0", "--metrics",
                             "--metrics-port", str(port))
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert f"Could not bind the metrics endpoint to 127.0.0.1:{port}" in err


def test_config_options():
    config = Config("m:app")
    assert (config.metrics, config.metrics_host, config.metrics_port) == (
        False, "127.0.0.1", 9090)
    with pytest.raises(ConfigError, match="metrics_port"):
        Config("m:app", metrics=True, metrics_port=70000)
    with pytest.raises(ConfigError, match="metrics are per worker"):
        Config("m:app", metrics=True, workers=2)


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
    from tests.wsraw import RawWebSocket

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
    env = {"FERROCORN_METRICS": "true", "FERROCORN_METRICS_PORT": "9191",
           "FERROCORN_METRICS_HOST": "0.0.0.0"}
    assert runner.invoke(cli.main, ["m:app"], env=env).exit_code == 0
    assert runner.invoke(cli.main, ["m:app", "--metrics-port", "9292"], env=env).exit_code == 0
    assert runner.invoke(cli.main, ["m:app"]).exit_code == 0
    assert [(c.metrics, c.metrics_host, c.metrics_port) for c in configs] == [
        (True, "0.0.0.0", 9191), (True, "0.0.0.0", 9292), (False, "127.0.0.1", 9090)]
    result = runner.invoke(cli.main, ["m:app", "--metrics", "--workers", "2"])
    assert result.exit_code == 1 and "metrics are per worker" in result.output


def test_help_lists_the_new_options_in_their_sections():
    from click.testing import CliRunner
    from ferrocorn import cli

    out = CliRunner().invoke(cli.main, ["--help"], terminal_width=200).output
    for text in ("Proxy options:", "Metrics options:", "--proxy-headers / --no-proxy-headers",
                 "--forwarded-allow-ips", "FORWARDED_ALLOW_IPS", "--access-log-format",
                 "--metrics / --no-metrics", "--metrics-host", "--metrics-port"):
        assert text in out, text
    logging_section = out.split("Logging options:")[1].split("options:")[0]
    assert "--access-log-format" in logging_section
