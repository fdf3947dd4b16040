"""Access log: one line per request with method, path and status; none with --no-access-log."""

import time
import uuid

import httpx

from tests.support.helpers import start_server


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
