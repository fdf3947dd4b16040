"""--access-log-format: the compiled formatter (pure) and the lines the real server writes."""

import re
import uuid

import httpx
import pytest
from ferrocorn.accesslog import ATOMS, DEFAULT_ACCESS_LOG_FORMAT, AccessLogFormat, client_text
from ferrocorn.config import Config, ConfigError

from tests.support.helpers import run_ferrocorn, start_server

ALL_ATOMS = sorted(ATOMS)
# Every atom, separated so that a value containing spaces stays one field.
_CONVERSIONS = {"status": "d", "bytes": "d", "duration": ".6f", "duration_ms": ".3f"}
ALL_FORMAT = "ALL " + " | ".join(
    f"{name}=%({name}){_CONVERSIONS.get(name, 's')}" for name in ALL_ATOMS
)

SCOPE = {
    "type": "http",
    "scheme": "https",
    "client": ("10.0.0.1", 1234),
    "headers": [
        (b"host", b"h.example"),
        (b"user-agent", b'UA "quoted" \\ end'),
        (b"referer", b"http://r.example/page"),
        (b"x-request-id", b"rid-1"),
        (b"x-request-id", b"rid-2"),
    ],
}
INFO = ("127.0.0.1:5000", "POST", "/a%20b?x=1&y=2", "1.1", 201, 42, 0.0123)


def render(fmt, scope=SCOPE, info=INFO):
    return AccessLogFormat(fmt)(scope, info)


def test_every_atom_rendered():
    expected = {
        "client": "10.0.0.1:1234",
        "client_host": "10.0.0.1",
        "method": "POST",
        "path": "/a%20b",
        "query": "x=1&y=2",
        "full_path": "/a%20b?x=1&y=2",
        "request_line": "POST /a%20b?x=1&y=2 HTTP/1.1",
        "http_version": "1.1",
        "scheme": "https",
        "host": "h.example",
        "status": "201",
        "bytes": "42",
        "duration": "0.012300",
        "duration_ms": "12.300",
        "user_agent": 'UA \\"quoted\\" \\\\ end',  # escaped for use inside quotes
        "referer": "http://r.example/page",
        "request_id": "rid-1",  # the first of repeated headers
    }
    assert set(expected) == set(ATOMS)
    line = render(ALL_FORMAT)
    assert line.startswith("ALL ")
    fields = dict(part.split("=", 1) for part in line[4:].split(" | "))
    assert fields == expected


def test_missing_values_are_dashes():
    scope = {"type": "http", "client": None, "headers": []}
    info = ("", "GET", "/", "1.0", 0, 0, 0.0)
    line = render(
        "%(client)s %(client_host)s %(query)s %(scheme)s %(host)s %(user_agent)s "
        "%(referer)s %(request_id)s %(status)d %(bytes)d",
        scope,
        info,
    )
    assert line == "- - - - - - - - 0 0"
    assert render("%(user_agent)s", {"headers": [(b"user-agent", b"")]}) == "-"


def test_literals_and_conversions():
    assert render("100%% %(status)d") == "100% 201"
    assert render("plain text") == "plain text"
    assert render("%(status)5d|%(method)-6s|%(duration_ms).0f") == "  201|POST  |12"
    assert render("%(status)s %(bytes)r") == "201 42"


@pytest.mark.parametrize(
    ("fmt", "message"),
    [
        ("%(nope)s", "unknown atom 'nope'"),
        ("%s %(status)d", "named fields"),
        ("%(status)d %", "named fields"),
        ("%(method)d", "format"),  # a str atom with a number conversion
        ("%(status)q", "unsupported format character"),
        ("%(status", "named fields"),
    ],
)
def test_invalid_formats(fmt, message):
    with pytest.raises(ValueError, match=re.escape(message) if message != "format" else None):
        AccessLogFormat(fmt)
    with pytest.raises(ConfigError, match=r"^Invalid access_log_format "):
        Config("m:app", access_log_format=fmt)


def test_config_compiles_once_and_default_keeps_the_fast_path():
    assert Config("m:app").compiled_access_log_format is None
    assert (
        Config("m:app", access_log_format=DEFAULT_ACCESS_LOG_FORMAT).compiled_access_log_format
        is None
    )
    compiled = Config("m:app", access_log_format="%(status)d").compiled_access_log_format
    assert isinstance(compiled, AccessLogFormat) and compiled.format == "%(status)d"


def test_default_format_matches_the_default_line():
    # The atoms reproduce the fast path's line (uvicorn's), for a TCP client.
    info = ("127.0.0.1:5000", "GET", "/x?y=1", "1.1", 200, 5, 0.001)
    scope = {"client": ("127.0.0.1", 5000), "headers": []}
    line = AccessLogFormat(DEFAULT_ACCESS_LOG_FORMAT)(scope, info)
    assert line == f'{info[0]} - "{info[1]} {info[2]} HTTP/{info[3]}" {info[4]}'
    assert client_text(("::1", 80)) == "::1:80" and client_text(None) == ""


# ---------------------------------------------------------------- the real server


def wait_line(server, marker):
    m = server.wait_for_output(rf"[^\n]*{re.escape(marker)}[^\n]*\n", timeout=5)
    assert m, server.output()
    return m.group(0).strip()


def test_server_every_atom():
    with start_server("tests.apps.basic:app", "--access-log-format", ALL_FORMAT) as server:
        marker = uuid.uuid4().hex
        resp = httpx.post(
            server.url + f"/echo?q={marker}&b=2",
            content=b"0123456789",
            headers={
                "User-Agent": "tester/1.0",
                "Referer": "http://ref.example/",
                "X-Request-ID": "req-" + marker,
            },
            timeout=10,
        )
        assert resp.status_code == 200
        line = wait_line(server, "req-" + marker)
        _, _, rest = line.partition("ALL ")
        fields = dict(part.split("=", 1) for part in rest.split(" | "))
        assert set(fields) == set(ATOMS)
        client_host = fields["client_host"]
        assert client_host == "127.0.0.1"
        assert (
            re.fullmatch(r"127\.0\.0\.1:\d+", fields["client"])
            and fields["client"] != "127.0.0.1:0"
        )
        assert fields["method"] == "POST"
        assert fields["path"] == "/echo"
        assert fields["query"] == f"q={marker}&b=2"
        assert fields["full_path"] == f"/echo?q={marker}&b=2"
        assert fields["request_line"] == f"POST /echo?q={marker}&b=2 HTTP/1.1"
        assert fields["http_version"] == "1.1"
        assert fields["scheme"] == "http"
        assert fields["host"] == f"127.0.0.1:{server.port}"
        assert fields["status"] == "200"
        assert fields["bytes"] == str(len(resp.content))
        duration = float(fields["duration"])
        assert duration >= 0
        assert float(fields["duration_ms"]) == pytest.approx(duration * 1000, abs=0.01)
        assert fields["user_agent"] == "tester/1.0"
        assert fields["referer"] == "http://ref.example/"
        assert fields["request_id"] == "req-" + marker

        # Missing headers and query print "-"; other statuses and sizes come through.
        marker = uuid.uuid4().hex
        with httpx.Client(base_url=server.url, timeout=10) as client:
            client.headers.pop("user-agent", None)
            resp = client.get("/no-such-route-" + marker)
        assert resp.status_code == 404
        line = wait_line(server, marker)
        fields = dict(part.split("=", 1) for part in line.partition("ALL ")[2].split(" | "))
        assert fields["query"] == "-"
        assert fields["user_agent"] == "-" and fields["referer"] == "-"
        assert fields["request_id"] == "-"
        assert fields["status"] == "404"
        assert fields["bytes"] == str(len(resp.content))

        # An app error: 500.
        httpx.get(
            server.url + "/error/before", headers={"X-Request-ID": "err-" + marker}, timeout=10
        )
        line = wait_line(server, "err-" + marker)
        assert "status=500 " in line


def test_server_brief_format_and_http10():
    fmt = (
        "%(client)s %(method)s %(path)s %(query)s %(status)d %(bytes)d %(duration_ms).1f "
        "%(user_agent)s %(referer)s %(request_id)s %(http_version)s"
    )
    with start_server("tests.apps.basic:app", "--access-log-format", fmt) as server:
        marker = uuid.uuid4().hex
        from tests.support.helpers import raw_request

        resp = raw_request(
            server.port, "GET", "/hello?x=" + marker, [("X-Request-ID", marker)], version="HTTP/1.0"
        )
        assert resp.status == 200
        line = wait_line(server, "x=" + marker)
        assert re.search(
            rf"127\.0\.0\.1:\d+ GET /hello x={marker} 200 11 \d+\.\d - - {marker} 1\.0$", line
        ), line


def test_server_format_from_environment_and_access_log_off():
    env = {"FERROCORN_ACCESS_LOG_FORMAT": "ENVFMT %(status)d %(full_path)s"}
    with start_server("tests.apps.basic:app", env=env) as server:
        marker = uuid.uuid4().hex
        httpx.get(server.url + "/hello?m=" + marker, timeout=10)
        assert wait_line(server, marker).endswith(f"ENVFMT 200 /hello?m={marker}")
    with start_server("tests.apps.basic:app", "--no-access-log", env=env) as server:
        marker = uuid.uuid4().hex
        httpx.get(server.url + "/hello?m=" + marker, timeout=10)
        httpx.get(server.url + "/hello?m=sync", timeout=10)
        assert server.stop() == 0
        assert marker not in server.output() and "ENVFMT" not in server.output()


def test_server_default_format_given_explicitly():
    with start_server(
        "tests.apps.basic:app",
        "--access-log-format",
        DEFAULT_ACCESS_LOG_FORMAT,
        "--no-proxy-headers",
    ) as server:
        marker = uuid.uuid4().hex
        httpx.get(server.url + "/hello?m=" + marker, timeout=10)
        line = wait_line(server, marker)
        assert re.search(rf'127\.0\.0\.1:\d+ - "GET /hello\?m={marker} HTTP/1\.1" 200$', line)


def test_invalid_format_is_a_one_line_error():
    proc = run_ferrocorn("tests.apps.basic:app", "--access-log-format", "%(nope)s")
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert "Invalid access_log_format '%(nope)s': unknown atom 'nope'" in err
