"""--log-format json: every line the server prints is one JSON object, with the error and
access records' fields; the core's lines and Python's logging's are the same objects."""

import json
import re
import uuid

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from tests.support.helpers import raw_request, run_ferrocorn, start_server, ws_sync_connect

APP = "tests.apps.access_log_app:app"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = "00-%s-00f067aa0ba902b7-01" % TRACE_ID
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")
BASE_KEYS = ["timestamp", "level", "logger", "message"]
ACCESS_KEYS = BASE_KEYS + [
    "client",
    "method",
    "path",
    "query",
    "http_version",
    "status",
    "bytes",
    "duration",
    "user_agent",
    "request_id",
    "trace_id",
]


def records(text):
    """Every non-empty line of ``text`` parsed as JSON (a line that is not fails the test)."""
    parsed = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError("not a JSON line: %r\nin:\n%s" % (line, text)) from None
        assert isinstance(record, dict), line
        assert list(record)[:4] == BASE_KEYS, line
        assert TIMESTAMP.match(record["timestamp"]), line
        parsed.append(record)
    return parsed


def access_records(all_records, marker):
    return [r for r in all_records if r["logger"] == "ferrocorn.access" and marker in r["message"]]


def serve_and_collect(*flags, env=None, marker):
    """Run a server with ``flags``, send one request of each kind, stop it; its records."""
    with start_server(APP, "--log-format", "json", *flags, env=env) as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            response = client.get(
                "/a",
                params={"m": marker, "x": "1"},
                headers={
                    "User-Agent": "probe/1.0",
                    "X-Request-ID": "req-" + marker,
                    "traceparent": TRACEPARENT,
                },
            )
            assert response.status_code == 200
            client.post("/b", params={"m": marker}, content=b"xyz", headers={"User-Agent": ""})
            client.get("/error", params={"m": marker}, headers={"traceparent": "00-bad"})
        # A header value with a quote, a backslash and a latin-1 byte.
        raw = raw_request(
            server.port, "GET", "/raw?m=" + marker, [("User-Agent", 'say "hi" \\ caf\xe9')]
        )
        assert raw.status == 200
        with ws_sync_connect("ws://127.0.0.1:%d/ws?m=%s" % (server.port, marker)) as ws:
            try:
                ws.recv(timeout=5)
            except ConnectionClosed:
                pass
        assert server.wait_for_output(r"(?s)(%s.*){5}" % marker, timeout=10), server.output()
        assert server.stop() == 0, server.output()
        return records(server.output())


def check_access_records(all_records, marker, python_path):
    access = access_records(all_records, marker)
    by_path = {r["path"]: r for r in access}
    assert sorted(by_path) == ["/a", "/b", "/error", "/raw", "/ws"], access
    for record in access:
        assert list(record) == ACCESS_KEYS, record
        assert record["level"] == "INFO"
        assert record["message"].endswith(" [py]") == python_path, record
        assert re.match(r"127\.0\.0\.1:\d+\Z", record["client"]), record
        assert isinstance(record["duration"], float) and record["duration"] >= 0, record

    a = by_path["/a"]
    assert a["method"] == "GET" and a["status"] == 200 and a["http_version"] == "1.1"
    assert a["query"] == "m=%s&x=1" % marker
    assert a["bytes"] == 2  # the app's body, "ok"
    assert a["user_agent"] == "probe/1.0"
    assert a["request_id"] == "req-" + marker
    assert a["trace_id"] == TRACE_ID
    assert a["message"].startswith('%s - "GET /a?m=%s&x=1 HTTP/1.1" 200' % (a["client"], marker))

    b = by_path["/b"]
    assert b["method"] == "POST" and b["status"] == 200 and b["bytes"] == 2
    assert b["user_agent"] == "" and b["request_id"] is None and b["trace_id"] is None

    error = by_path["/error"]
    assert error["status"] == 500 and error["trace_id"] is None  # an invalid traceparent

    assert by_path["/raw"]["user_agent"] == 'say "hi" \\ caf\xe9'

    ws = by_path["/ws"]
    assert ws["method"] == "WEBSOCKET" and ws["http_version"] == "1.1", ws

    tracebacks = [r for r in all_records if "exc_info" in r]
    assert len(tracebacks) == 1, all_records
    assert tracebacks[0]["level"] == "ERROR" and tracebacks[0]["logger"] == "ferrocorn.error"
    assert "RuntimeError: access_log_app: an error" in tracebacks[0]["exc_info"]
    assert "Traceback (most recent call last)" in tracebacks[0]["exc_info"]

    messages = [r["message"] for r in all_records if r["logger"] == "ferrocorn.error"]
    assert any(m.startswith("Ferrocorn running on http://127.0.0.1:") for m in messages)
    assert "Shutting down" in messages, messages


def test_core_writes_json_access_lines():
    marker = uuid.uuid4().hex
    check_access_records(serve_and_collect(marker=marker), marker, python_path=False)


def test_python_logging_writes_the_same_json_records():
    # A filter on ferrocorn.access keeps the lines in Python's logging (it appends " [py]").
    marker = uuid.uuid4().hex
    found = serve_and_collect(env={"ACCESS_APP_FILTER_AT_IMPORT": "1"}, marker=marker)
    check_access_records(found, marker, python_path=True)


def test_json_records_with_metrics_runner():
    # --metrics needs a Python runner: the access records come from it.
    marker = uuid.uuid4().hex
    with start_server(APP, "--log-format", "json", "--metrics", "--metrics-port", "0") as server:
        httpx.get(
            server.url + "/m",
            params={"m": marker},
            headers={"traceparent": TRACEPARENT},
            timeout=10,
        )
        assert server.wait_for_output(marker, timeout=10), server.output()
        assert server.stop() == 0
        found = access_records(records(server.output()), marker)
    assert len(found) == 1, found
    assert list(found[0]) == ACCESS_KEYS
    assert found[0]["trace_id"] == TRACE_ID and found[0]["bytes"] == 2


def test_proxy_headers_client_in_json_lines():
    marker = uuid.uuid4().hex
    with start_server(
        APP, "--log-format", "json", "--proxy-headers", "--forwarded-allow-ips", "*"
    ) as server:
        httpx.get(
            server.url + "/fwd",
            params={"m": marker},
            headers={"X-Forwarded-For": "198.51.100.7"},
            timeout=10,
        )
        assert server.wait_for_output(marker, timeout=10), server.output()
        assert server.stop() == 0
        found = access_records(records(server.output()), marker)
    assert [r["client"] for r in found] == ["198.51.100.7:0"], found
    assert found[0]["message"].startswith("198.51.100.7:0 - "), found


def test_json_lines_with_workers():
    marker = uuid.uuid4().hex
    with start_server(APP, "--log-format", "json", "--workers", "2") as server:
        # Both workers up (the supervisor is ready before they are).
        assert server.wait_for_output(r"(?s)(Started worker \[\d+\].*){2}", timeout=20), (
            server.output()
        )
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for _ in range(4):
                assert client.get("/w", params={"m": marker}).status_code == 200
            client.get("/error", params={"m": marker})
        assert server.wait_for_output(r"(?s)(%s.*){5}" % marker, timeout=10), server.output()
        assert server.stop() == 0, server.output()
        found = records(server.output())
    access = access_records(found, marker)
    assert len(access) == 5 and all(list(r) == ACCESS_KEYS for r in access), access
    assert sum("exc_info" in r for r in found) == 1, found
    pids = {
        m.group(1)
        for r in found
        for m in [re.search(r"Started (?:server|supervisor) process \[(\d+)\]", r["message"])]
        if m
    }
    assert len(pids) >= 3, found  # the supervisor's own lines and both workers'


def test_text_stays_the_default():
    marker = uuid.uuid4().hex
    with start_server(APP) as server:
        httpx.get(server.url + "/t", params={"m": marker}, timeout=10)
        assert server.wait_for_output(
            r'INFO:     127\.0\.0\.1:\d+ - "GET /t\?m=%s HTTP/1.1" 200\n' % marker, timeout=5
        ), server.output()


def test_log_config_wins_over_log_format(tmp_path):
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "PLAIN %(name)s %(message)s"}},
        "handlers": {
            "out": {
                "class": "logging.StreamHandler",
                "formatter": "plain",
                "stream": "ext://sys.stdout",
            }
        },
        "loggers": {"ferrocorn": {"handlers": ["out"], "level": "INFO", "propagate": False}},
    }
    path = tmp_path / "log.json"
    path.write_text(json.dumps(config))
    marker = uuid.uuid4().hex
    with start_server(APP, "--log-format", "json", "--log-config", str(path)) as server:
        httpx.get(server.url + "/lc", params={"m": marker}, timeout=10)
        assert server.wait_for_output(
            r"PLAIN ferrocorn\.access 127\.0\.0\.1:\d+ - \"GET /lc\?m=%s" % marker, timeout=5
        ), server.output()


def test_bad_log_format_is_a_one_line_error():
    proc = run_ferrocorn(APP, "--log-format", "xml")
    assert proc.returncode == 2, proc
    assert b"xml" in proc.stderr and b"Traceback" not in proc.stderr


def test_python_api_log_format_is_checked():
    from ferrocorn.config import Config, ConfigError

    with pytest.raises(ConfigError) as caught:
        Config(APP, log_format="yaml")
    assert "log_format" in str(caught.value) and "\n" not in str(caught.value)


def test_jsonlog_trace_id_rules():
    from ferrocorn.jsonlog import trace_id

    assert trace_id(TRACEPARENT) == TRACE_ID
    assert trace_id("01-%s-00f067aa0ba902b7-01-future" % TRACE_ID) == TRACE_ID
    for bad in (
        None,
        "",
        TRACEPARENT + "-extra",  # version 00 has exactly four fields
        TRACEPARENT.upper(),
        "ff" + TRACEPARENT[2:],
        "00-%s-00f067aa0ba902b7-01" % ("0" * 32),
        "00-%s-%s-01" % (TRACE_ID, "0" * 16),
        "00-%s-00f067aa0ba902b7" % TRACE_ID,
    ):
        assert trace_id(bad) is None, bad
