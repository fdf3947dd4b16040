"""PROXY protocol (--proxy-protocol v1|v2|auto): the header of a trusted peer sets the scope's
client and server and the access log's client; TLS and HTTP/2 follow the header; malformed,
missing and unfinished headers close the connection; untrusted peers are served as plain
connections.  Headers are built by hand from HAProxy's specification (proxy-protocol.txt)."""

import json
import os
import socket
import ssl
import struct
import tempfile
import time

import pytest

from tests.support.helpers import RawConnection, request_bytes, start_server, wait_until
from tests.support.tls_certs import certs

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def v2_header(command=1, family=0x11, addresses=b"", tlvs=b""):
    block = addresses + tlvs
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack("!H", len(block)) + block


def v2_tcp4(src, dst, sport, dport, tlvs=b""):
    addresses = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!HH", sport, dport)
    return v2_header(addresses=addresses, tlvs=tlvs)


def v2_tcp6(src, dst, sport, dport):
    addresses = (
        socket.inet_pton(socket.AF_INET6, src)
        + socket.inet_pton(socket.AF_INET6, dst)
        + struct.pack("!HH", sport, dport)
    )
    return v2_header(family=0x21, addresses=addresses)


V1_TCP4 = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n"
V2_TCP4 = v2_tcp4("192.0.2.1", "198.51.100.2", 56324, 443)
PROXIED = (["192.0.2.1", 56324], ["198.51.100.2", 443])


def scope_after(port, header, path="/scope", chunks=None):
    """Send ``header`` (in ``chunks`` pieces when given) then a GET; the scope the app saw."""
    with RawConnection(port) as conn:
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if chunks:
            step = max(1, len(header) // chunks)
            for at in range(0, len(header), step):
                conn.send(header[at : at + step])
                time.sleep(0.02)
        else:
            conn.send(header)
        conn.send(request_bytes("GET", path, [("Connection", "close")]))
        resp = conn.read_response()
    assert resp is not None and resp.status == 200, resp
    return json.loads(resp.body)


def closed_after(port, data):
    """Whether the server closes the connection without answering after ``data``."""
    with RawConnection(port) as conn:
        conn.send(data)
        return conn.is_closed_by_peer(timeout=10)


@pytest.fixture(scope="module")
def v1_server():
    with start_server("tests.apps.basic:app", "--proxy-protocol", "v1") as server:
        yield server


@pytest.fixture(scope="module")
def v2_server():
    with start_server("tests.apps.basic:app", "--proxy-protocol", "v2") as server:
        yield server


@pytest.fixture(scope="module")
def auto_server():
    with start_server(
        "tests.apps.basic:app", "--proxy-protocol", "auto", "--log-level", "debug"
    ) as server:
        yield server


# ---------------------------------------------------------------- v1


def test_v1_tcp4_sets_client_and_server(v1_server):
    scope = scope_after(v1_server.port, V1_TCP4)
    assert (scope["client"], scope["server"]) == PROXIED
    assert scope["client_item_types"] == ["str", "int"]


def test_v1_tcp6(v1_server):
    scope = scope_after(v1_server.port, b"PROXY TCP6 2001:db8::7 2001:db8::1 4000 8443\r\n")
    assert scope["client"] == ["2001:db8::7", 4000]
    assert scope["server"] == ["2001:db8::1", 8443]


def test_v1_unknown_keeps_the_socket_addresses(v1_server):
    scope = scope_after(v1_server.port, b"PROXY UNKNOWN 1.2.3.4 5.6.7.8 1 2\r\n")
    assert scope["client"][0] == "127.0.0.1"
    assert scope["server"] == ["127.0.0.1", v1_server.port]


def test_v1_header_split_over_packets(v1_server):
    scope = scope_after(v1_server.port, V1_TCP4, chunks=len(V1_TCP4))
    assert (scope["client"], scope["server"]) == PROXIED


def test_keep_alive_requests_after_one_header(v1_server):
    with RawConnection(v1_server.port) as conn:
        conn.send(V1_TCP4 + request_bytes("GET", "/scope") + request_bytes("GET", "/scope"))
        first, second = conn.read_response(), conn.read_response()
    assert json.loads(first.body)["client"] == json.loads(second.body)["client"] == PROXIED[0]


@pytest.mark.parametrize(
    "header",
    [
        b"PROXY TCP4 192.0.2.1 198.51.100.2 56324\r\n",
        b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\n",
        b"PROXY TCP4 ::1 ::1 1 2\r\n",
        b"PROXY TCP4 192.0.2.1 198.51.100.2 99999 443\r\n",
        b"PROXY TCP5 192.0.2.1 198.51.100.2 1 2\r\n",
        b"PROXY UNKNOWN " + b"x" * 120 + b"\r\n",
        V2_TCP4,
    ],
    ids=["no-port", "lf-only", "v6-as-tcp4", "port-range", "protocol", "too-long", "v2-on-v1"],
)
def test_v1_malformed_header_closes(v1_server, header):
    assert closed_after(v1_server.port, header + request_bytes("GET", "/hello"))


def test_v1_missing_header_closes(v1_server):
    assert closed_after(v1_server.port, request_bytes("GET", "/hello"))


# ---------------------------------------------------------------- v2


def test_v2_tcp4(v2_server):
    assert (scope_after(v2_server.port, V2_TCP4)["client"], PROXIED[1]) == PROXIED


def test_v2_tcp6(v2_server):
    scope = scope_after(v2_server.port, v2_tcp6("2001:db8::7", "2001:db8::1", 4000, 8443))
    assert (scope["client"], scope["server"]) == (["2001:db8::7", 4000], ["2001:db8::1", 8443])


def test_v2_local_keeps_the_socket_addresses(v2_server):
    addresses = socket.inet_aton("10.9.9.9") * 2 + struct.pack("!HH", 1, 2)
    scope = scope_after(v2_server.port, v2_header(command=0, addresses=addresses))
    assert scope["client"][0] == "127.0.0.1"
    assert scope["server"] == ["127.0.0.1", v2_server.port]


def test_v2_unspec_and_unix_families_keep_the_socket_addresses(v2_server):
    assert scope_after(v2_server.port, v2_header(family=0x00))["client"][0] == "127.0.0.1"
    unix = v2_header(family=0x31, addresses=b"/tmp/a".ljust(108, b"\0") * 2)
    assert scope_after(v2_server.port, unix)["client"][0] == "127.0.0.1"


def test_v2_tlvs_are_skipped(v2_server):
    # PP2_TYPE_ALPN, PP2_TYPE_AUTHORITY, PP2_TYPE_NOOP padding.
    tlvs = b"\x01\x00\x02h2" + b"\x02\x00\x0bexample.com" + b"\x04\x00\x10" + b"\0" * 16
    header = v2_tcp4("192.0.2.1", "198.51.100.2", 56324, 443, tlvs=tlvs)
    assert scope_after(v2_server.port, header)["client"] == PROXIED[0]


def test_v2_header_split_over_packets(v2_server):
    assert scope_after(v2_server.port, V2_TCP4, chunks=len(V2_TCP4))["client"] == PROXIED[0]


@pytest.mark.parametrize(
    "header",
    [
        V2_SIGNATURE + b"\x31\x11\x00\x0c" + b"\0" * 12,  # version 3
        V2_SIGNATURE + b"\x22\x11\x00\x0c" + b"\0" * 12,  # command 2
        V2_SIGNATURE + b"\x21\x11\x00\x08" + b"\0" * 8,  # too short for IPv4
        V2_SIGNATURE + b"\x21\x21\x00\x0c" + b"\0" * 12,  # too short for IPv6
        V2_SIGNATURE + b"\x21\x51\x00\x00",  # family 5
        V1_TCP4,
    ],
    ids=["version", "command", "short-v4", "short-v6", "family", "v1-on-v2"],
)
def test_v2_malformed_header_closes(v2_server, header):
    assert closed_after(v2_server.port, header + request_bytes("GET", "/hello"))


def test_v2_missing_header_closes(v2_server):
    assert closed_after(v2_server.port, request_bytes("GET", "/hello"))


# ---------------------------------------------------------------- auto, logging


def test_auto_takes_either_header_or_none(auto_server):
    assert scope_after(auto_server.port, V1_TCP4)["client"] == PROXIED[0]
    assert scope_after(auto_server.port, V2_TCP4)["client"] == PROXIED[0]
    assert scope_after(auto_server.port, b"")["client"][0] == "127.0.0.1"


def test_auto_malformed_header_closes_and_logs_at_debug(auto_server):
    assert closed_after(auto_server.port, b"PROXY TCP4 nonsense\r\n" + request_bytes("GET", "/"))
    assert auto_server.wait_for_output(
        "PROXY protocol: closed the connection from 127.0.0.1:", timeout=10
    ), auto_server.output()


def test_refusals_are_not_logged_above_debug(v1_server):
    assert closed_after(v1_server.port, b"PROXY JUNK\r\n")
    time.sleep(0.2)
    assert "PROXY protocol" not in v1_server.output()


def test_http2_prior_knowledge_after_the_header(auto_server):
    # The HTTP/2 preface after the header: the server answers with its SETTINGS frame.
    with RawConnection(auto_server.port) as conn:
        conn.send(V2_TCP4 + b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\0\0\0\0")
        assert conn.need(9), "no frame from the server"
        assert conn.buf[3] == 0x04, bytes(conn.buf[:9])  # a SETTINGS frame


# ---------------------------------------------------------------- trust


def test_untrusted_peer_is_served_as_a_plain_connection(server_factory):
    server = server_factory(
        "tests.apps.basic:app", "--proxy-protocol", "v1", "--forwarded-allow-ips", "10.1.2.3"
    )
    # No header is looked for: a plain request is served with the socket's addresses...
    assert scope_after(server.port, b"")["client"][0] == "127.0.0.1"
    # ... and a header is not believed: it is not HTTP either, so the request is refused.
    with RawConnection(server.port) as conn:
        conn.send(V1_TCP4 + request_bytes("GET", "/scope", [("Connection", "close")]))
        resp = conn.read_response()
    assert resp is not None and resp.status == 400, resp


def test_trusted_network(server_factory):
    server = server_factory(
        "tests.apps.basic:app", "--proxy-protocol", "v2", "--forwarded-allow-ips", "127.0.0.0/8"
    )
    assert scope_after(server.port, V2_TCP4)["client"] == PROXIED[0]


def test_unix_socket_peer_needs_star(server_factory):
    directory = tempfile.mkdtemp(prefix="ferrocorn-pp-")
    path = os.path.join(directory, "s.sock")
    flags = ("--uds", path, "--proxy-protocol", "v1", "--forwarded-allow-ips", "*")
    server_factory("tests.apps.basic:app", *flags, host_port=False)
    with RawConnection(uds=path) as conn:
        conn.send(V1_TCP4 + request_bytes("GET", "/scope", [("Connection", "close")]))
        scope = json.loads(conn.read_response().body)
    assert (scope["client"], scope["server"]) == PROXIED


# ---------------------------------------------------------------- timeout, TLS, access log


def test_unfinished_header_is_cut_by_the_handshake_timeout(server_factory):
    server = server_factory(
        "tests.apps.basic:app", "--proxy-protocol", "v1", "--ssl-handshake-timeout", "0.5"
    )
    with RawConnection(server.port) as conn:
        conn.send(b"PROXY TCP4 192.0.2.1 ")
        assert conn.is_closed_by_peer(timeout=15)
    assert scope_after(server.port, V1_TCP4)["client"] == PROXIED[0]


@pytest.mark.parametrize("header", [V1_TCP4, V2_TCP4], ids=["v1", "v2"])
def test_tls_after_the_header(server_factory, header):
    c = certs()
    flags = ("--ssl-certfile", c.server_pem, "--ssl-keyfile", c.server_key)
    server = server_factory("tests.apps.basic:app", "--proxy-protocol", "auto", *flags)
    ctx = ssl.create_default_context(cafile=c.ca_pem)
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    raw.sendall(header)
    with ctx.wrap_socket(raw, server_hostname="localhost") as sock:
        conn = RawConnection(sock=sock)
        conn.send(request_bytes("GET", "/scope", [("Connection", "close")]))
        scope = json.loads(conn.read_response().body)
    assert (scope["client"], scope["server"], scope["scheme"]) == PROXIED + ("https",)


def test_access_log_shows_the_proxied_client(server_factory):
    server = server_factory("tests.apps.basic:app", "--proxy-protocol", "v1", "--access-log")
    scope_after(server.port, V1_TCP4, path="/scope/pp-log")
    line = '192.0.2.1:56324 - "GET /scope/pp-log HTTP/1.1" 200'
    assert server.wait_for_output(line, timeout=10), server.output()


def test_with_two_workers(server_factory):
    server = server_factory(
        "tests.apps.basic:app", "--proxy-protocol", "v2", "--workers", "2", timeout=60
    )
    for port in range(56000, 56006):
        header = v2_tcp4("192.0.2.1", "198.51.100.2", port, 443)
        assert scope_after(server.port, header)["client"] == ["192.0.2.1", port]
    assert closed_after(server.port, request_bytes("GET", "/hello"))


# ---------------------------------------------------------------- options


def test_bad_mode_fails_at_start(server_factory):
    server = server_factory("tests.apps.basic:app", "--proxy-protocol", "v3", ready=False)
    assert wait_until(lambda: server.proc.poll() is not None, timeout=20)
    assert server.proc.returncode != 0
    assert "--proxy-protocol" in server.stderr_text()
