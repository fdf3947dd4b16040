"""Access log: one line per request with method, path and status; none with --no-access-log."""

import json
import re
import signal
import time
import uuid

import httpx
from websockets.exceptions import ConnectionClosed

from tests.support.helpers import raw_request, start_server, wait_until, ws_sync_connect


def test_access_log_one_line_per_request():
    tags = {k: uuid.uuid4().hex for k in ("get", "post", "204", "404")}
    with start_server("tests.apps.basic:app", "--access-log") as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            assert client.get("/hello", params={"m": tags["get"]}).status_code == 200
            assert (
                client.post("/echo", params={"m": tags["post"]}, content=b"xyz").status_code == 200
            )
            assert (
                client.get("/status", params={"code": "204", "m": tags["204"]}).status_code == 204
            )
            assert client.get("/no-such-route", params={"m": tags["404"]}).status_code == 404
        for tag in tags.values():
            assert server.wait_for_output(tag, timeout=5), server.output()
        time.sleep(0.3)
        out = server.output()

    def line_for(key, method, path, status):
        lines = [line for line in out.splitlines() if tags[key] in line]
        assert len(lines) == 1, "expected one access line for %s, got:\n%s" % (key, out)
        line = lines[0]
        assert method in line and path in line and str(status) in line, line

    line_for("get", "GET", "/hello", 200)
    line_for("post", "POST", "/echo", 200)
    line_for("204", "GET", "/status", 204)
    line_for("404", "GET", "/no-such-route", 404)


def test_access_log_default_on():
    with start_server("tests.apps.basic:app") as server:
        marker = uuid.uuid4().hex
        assert httpx.get(server.url + "/index", params={"i": marker}, timeout=10).text == marker
        assert server.wait_for_output(r"GET [^\n]*/index\?i=%s[^\n]*200" % marker, timeout=5), (
            server.output()
        )


def test_access_log_500_logged():
    with start_server("tests.apps.basic:app") as server:
        httpx.get(server.url + "/error/before", timeout=10)
        assert server.wait_for_output(r"GET [^\n]*/error/before[^\n]*500", timeout=5), (
            server.output()
        )


def test_no_access_log():
    with start_server("tests.apps.basic:app", "--no-access-log") as server:
        marker = uuid.uuid4().hex
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for _i in range(3):
                assert client.get("/hello", params={"m": marker}).status_code == 200
        time.sleep(1.0)  # an access line (wrongly) written would have appeared by now
        out = server.output()
        assert marker not in out, out
        assert "/hello" not in out, out


# ------------------------------------------------------------------ written by the core
# With the default logging configuration the core formats and writes the access lines
# (src/access_log/); any other configuration goes through Python's logging. The tests
# below check that both print the same lines, that none is lost, and the hand-back.

APP = "tests.apps.access_log_app:app"

# The default configuration, spelled as a --log-config: same handler output, but not the
# handler ferrocorn installs, so the lines go through Python's logging.
PYTHON_LOGGING_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "default": {"()": "ferrocorn.config.DefaultFormatter", "fmt": "%(levelprefix)s %(message)s"}
    },
    "handlers": {
        "access": {
            "class": "logging.StreamHandler",
            "formatter": "default",
            "stream": "ext://sys.stdout",
        },
        "error": {
            "class": "logging.StreamHandler",
            "formatter": "default",
            "stream": "ext://sys.stderr",
        },
    },
    "loggers": {
        "ferrocorn": {"handlers": ["error"], "level": "INFO", "propagate": False},
        "ferrocorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
    },
}


def _exercise(server, marker):
    """One request of each kind a line records; returns how many lines name ``marker``."""
    count = 0
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for method, path in (
            ("GET", "/a"),
            ("POST", "/b"),
            ("HEAD", "/c"),
            ("GET", "/missing"),
            ("GET", "/error"),
        ):
            client.request(method, path, params={"m": marker}, content=b"x" * 3)
            count += 1
    with httpx.Client(base_url=server.url, timeout=10, http1=False, http2=True) as client:
        assert client.get("/h2", params={"m": marker}).http_version == "HTTP/2"
        count += 1
    with ws_sync_connect("ws://127.0.0.1:%d/ws?m=%s" % (server.port, marker)) as ws:
        try:
            ws.recv(timeout=5)
        except ConnectionClosed:
            pass
    count += 1
    raw = raw_request(server.port, "GET", "/old?m=" + marker, version="HTTP/1.0")
    assert raw.status == 200
    return count + 1


def _lines(server, marker, count):
    pattern = "(?s)" + ("%s.*" % marker) * count
    assert server.wait_for_output(pattern, timeout=10), server.output()
    port_free = []
    for line in server.output().splitlines():
        if marker in line:
            port_free.append(re.sub(r"127\.0\.0\.1:\d+ ", "127.0.0.1:PORT ", line))
    return port_free


def test_core_lines_are_the_python_logging_lines(tmp_path):
    marker = uuid.uuid4().hex
    with start_server(APP) as server:
        count = _exercise(server, marker)
        core_lines = _lines(server, marker, count)
    config = tmp_path / "log.json"
    config.write_text(json.dumps(PYTHON_LOGGING_CONFIG))
    with start_server(APP, "--log-config", str(config)) as server:
        assert _exercise(server, marker) == count
        python_lines = _lines(server, marker, count)
    assert len(core_lines) == count, core_lines
    assert sorted(core_lines) == sorted(python_lines)
    assert 'INFO:     127.0.0.1:PORT - "GET /a?m=%s HTTP/1.1" 200' % marker in core_lines
    assert 'INFO:     127.0.0.1:PORT - "GET /error?m=%s HTTP/1.1" 500' % marker in core_lines
    assert 'INFO:     127.0.0.1:PORT - "GET /h2?m=%s HTTP/2" 200' % marker in core_lines
    assert 'INFO:     127.0.0.1:PORT - "GET /old?m=%s HTTP/1.0" 200' % marker in core_lines
    websocket = 'INFO:     127.0.0.1:PORT - "WEBSOCKET /ws?m='
    assert any(line.startswith(websocket) for line in core_lines)


def test_core_lines_survive_a_graceful_stop():
    marker = uuid.uuid4().hex
    requests = 400
    with start_server(APP) as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for i in range(requests):
                assert client.get("/n", params={"m": marker, "i": i}).status_code == 200
        # Straight after the last response: the lines still in the core's buffer must
        # reach stdout before the process exits.
        assert server.stop(signal.SIGTERM) == 0
        out = server.output()
    lines = [line for line in out.splitlines() if marker in line]
    assert len(lines) == requests, out[-2000:]
    assert [int(re.search(r"i=(\d+)", line).group(1)) for line in lines] == list(range(requests))


def test_a_filter_set_at_import_keeps_python_logging():
    marker = uuid.uuid4().hex
    with start_server(APP, env={"ACCESS_APP_FILTER_AT_IMPORT": "1"}) as server:
        httpx.get(server.url + "/a", params={"m": marker}, timeout=10)
        assert server.wait_for_output(r"/a\?m=%s HTTP/1.1\" 200 \[py\]" % marker, timeout=5), (
            server.output()
        )


def test_logging_reconfigured_while_serving_takes_the_lines_back():
    first, later = uuid.uuid4().hex, uuid.uuid4().hex
    with start_server(APP) as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            client.get("/before", params={"m": first})
            client.get("/reconfigure")

            def marked():
                client.get("/after", params={"m": later})
                return re.search(r"/after\?m=%s HTTP/1.1\" 200 \[py\]" % later, server.output())

            # The server notices at its next tick (50 ms); lines until then are the core's.
            assert wait_until(marked, timeout=10), server.output()
        assert server.wait_for_output(r"/before\?m=%s HTTP/1.1\" 200\n" % first, timeout=5), (
            server.output()
        )


def test_proxy_headers_client_in_core_lines():
    marker = uuid.uuid4().hex
    with start_server(APP, "--proxy-headers", "--forwarded-allow-ips", "*") as server:
        httpx.get(
            server.url + "/fwd",
            params={"m": marker},
            headers={"X-Forwarded-For": "198.51.100.7"},
            timeout=10,
        )
        httpx.get(server.url + "/plain", params={"m": marker}, timeout=10)
        assert server.wait_for_output(
            r'INFO:     198\.51\.100\.7:0 - "GET /fwd\?m=%s HTTP/1.1" 200\n' % marker, timeout=5
        ), server.output()
        assert server.wait_for_output(
            r'INFO:     127\.0\.0\.1:\d+ - "GET /plain\?m=%s HTTP/1.1" 200\n' % marker, timeout=5
        ), server.output()
