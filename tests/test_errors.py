"""Application errors and invalid ASGI messages."""

import socket
import time
import uuid

import httpx
import pytest

from tests.support.helpers import (
    IncompleteResponse,
    RawConnection,
    assert_healthy,
    request_bytes,
    start_server,
    wait_report,
)
from tests.support.hostile import LINGER_RST


@pytest.fixture(scope="module")
def server():
    with start_server("tests.apps.basic:app") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=15) as c:
        yield c


def test_exception_before_response_gives_500_and_traceback(server, client):
    start = len(server.output())
    resp = client.get("/error/before")
    assert resp.status_code == 500
    m = server.wait_for_output(r"boom-before-response-7f3a", timeout=5, start=start)
    assert m, "exception message not logged:\n" + server.output()[start:]
    assert "Traceback" in server.output()[start:]
    assert_healthy(server.port)


def test_exception_after_streaming_started_aborts_raw(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/error/after"))
        with pytest.raises(IncompleteResponse) as info:
            conn.read_response()
    partial = info.value.partial
    assert partial.status == 200
    assert partial.framing == "chunked"
    assert not partial.complete
    assert b"partial-data-" in partial.body
    assert_healthy(server.port)


def test_exception_after_streaming_started_aborts_httpx(server, client):
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        client.get("/error/after")
    assert client.get("/hello").status_code == 200


def test_exception_after_start_logged(server, client):
    start = len(server.output())
    with pytest.raises(httpx.HTTPError):
        client.get("/error/after")
    m = server.wait_for_output(r"boom-after-response-started-9c1d", timeout=5, start=start)
    assert m, "exception message not logged:\n" + server.output()[start:]


def test_return_without_response_gives_500(server, client):
    resp = client.get("/no_response")
    assert resp.status_code == 500
    assert client.get("/hello").status_code == 200


def invalid(client, kind):
    resp = client.get("/invalid", params={"kind": kind})
    assert resp.status_code == 200, (kind, resp.status_code, resp.text)
    return resp, resp.json()


def test_invalid_str_body(client):
    _, result = invalid(client, "str_body")
    assert result["raised"] == "TypeError", result
    assert "body" in result["message"], result


@pytest.mark.parametrize("kind", ["str_header_name", "str_header_value"])
def test_invalid_str_header(client, kind):
    _, result = invalid(client, kind)
    assert result["raised"] == "TypeError", result
    assert "header" in result["message"].lower(), result


def test_invalid_missing_status(client):
    _, result = invalid(client, "missing_status")
    assert result["raised"] in ("KeyError", "TypeError", "ValueError"), result
    assert "status" in result["message"], result


def test_invalid_unknown_message_type(client):
    _, result = invalid(client, "unknown_type")
    assert result["raised"] in ("ValueError", "RuntimeError"), result
    assert "http.response.bogus-kind" in result["message"], result


def test_invalid_body_before_start(client):
    _, result = invalid(client, "body_before_start")
    assert result["raised"] == "RuntimeError", result


def test_invalid_second_start(client):
    _, result = invalid(client, "second_start")
    assert result["raised"] == "RuntimeError", result


def test_invalid_crlf_in_header_value(client):
    resp, result = invalid(client, "crlf_header_value")
    assert result["raised"] == "ValueError", result
    assert "x-injected" not in resp.headers
    assert "x-bad" not in resp.headers


def test_invalid_nul_in_header_value_names_that_header(client):
    resp, result = invalid(client, "nul_header_value")
    assert result["raised"] == "ValueError", result
    assert '"x-a"' in result["message"], result
    # Nothing of the refused start leaked into the response that followed it.
    assert "x-a" not in resp.headers and "x-b" not in resp.headers


@pytest.mark.parametrize(
    "kind, raised, key",
    [
        ("status_600", "ValueError", "status"),
        ("bool_status", "TypeError", "status"),
        ("int_trailers", "TypeError", "trailers"),
    ],
)
def test_invalid_start_fields_name_the_key(client, kind, raised, key):
    _, result = invalid(client, kind)
    assert result["raised"] == raised, result
    assert "'%s'" % key in result["message"], result


def test_still_serving_after_invalid_messages(server):
    assert_healthy(server.port)


def _send_after_disconnect(server, client, mode):
    rid = uuid.uuid4().hex
    conn = RawConnection(server.port)
    conn.send(request_bytes("GET", "/send_after_disconnect?id=%s&mode=%s" % (rid, mode)))
    wait_report(client, rid)
    time.sleep(0.2)  # the app is now blocked in receive()
    # A reset: a FIN after a complete request may be a half-close (test_http11_edges).
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)
    conn.close()
    return wait_report(client, rid, lambda r: r is not None and r.get("state") == "done")


def test_send_after_disconnect_raises_client_disconnected(server, client):
    report = _send_after_disconnect(server, client, "catch")
    assert report["raised"] == "ClientDisconnected", report
    assert report["is_oserror"] is True
    assert report["is_client_disconnected"] is True
    assert_healthy(server.port)


def test_send_after_disconnect_uncaught_is_not_logged():
    # A dedicated server, so that the output holds nothing but this request.
    with start_server("tests.apps.basic:app", "--no-access-log") as server:
        with httpx.Client(base_url=server.url, timeout=15) as client:
            start = len(server.output())
            report = _send_after_disconnect(server, client, "raise")
            assert report["raised"] == "ClientDisconnected", report
            time.sleep(0.5)  # give a (wrong) error log the time to appear
            assert_healthy(server.port)
            out = server.output()[start:]
        assert "Traceback" not in out, out
        assert "ClientDisconnected" not in out, out
