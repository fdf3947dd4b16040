"""``http.response.zerocopysend``: the app hands the core an open file (object or descriptor)
and a span of it; the core sends a duplicate of the descriptor's bytes (src/bridge/
file_body.rs) while the app closes its own at once. Over cleartext HTTP/1.1, HTTP/2 and
TLS, bit-exact (sha256), alone or mixed with body messages, with the faults the extension
asks for named by key.
"""

import hashlib
import os
import re
import signal
import socket
import ssl
import threading

import httpx
import pytest

from tests.support.helpers import RawConnection, start_server
from tests.support.tls_certs import certs

APP = "tests.apps.zerocopy_app:app"
MiB = 1 << 20


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("zerocopy")
    made = {}
    for name, size in (("empty.bin", 0), ("small.bin", 50_000), ("big.bin", 8 * MiB + 7)):
        data = os.urandom(size)
        (d / name).write_bytes(data)
        made[name] = data
    return d, made


@pytest.fixture(scope="module", params=["on", "auto"])
def plain(files, request):
    """Cleartext, by sendfile(2) (`on`) and read and written (`auto`, to this host's client)."""
    d, _ = files
    flags = ["--no-access-log", "--sendfile", request.param]
    with start_server(APP, *flags, env={"ZEROCOPY_DIR": str(d)}) as s:
        yield s


@pytest.fixture(scope="module")
def tls(files):
    d, _ = files
    c = certs()
    flags = ["--ssl-certfile", c.path("server.pem"), "--ssl-keyfile", c.path("server.key")]
    with start_server(APP, "--no-access-log", *flags, env={"ZEROCOPY_DIR": str(d)}) as s:
        yield s, ssl.create_default_context(cafile=c.ca_pem)


@pytest.fixture(params=["h1", "h2", "tls-h1", "tls-h2"])
def client(request, plain, tls):
    """A client of each transport."""
    http2 = request.param.endswith("h2")
    if request.param.startswith("tls"):
        server, verify = tls
        base, kwargs = "https://localhost:%d" % server.port, {"verify": verify}
    else:
        base, kwargs = plain.url, {}
    with httpx.Client(base_url=base, timeout=30, http1=not http2, http2=http2, **kwargs) as c:
        c.expected_version = "HTTP/2" if http2 else "HTTP/1.1"
        yield c


def sha(data):
    return hashlib.sha256(data).hexdigest()


def test_extension_is_advertised(client):
    response = client.get("/extensions")
    assert "http.response.zerocopysend" in response.json()
    assert response.http_version == client.expected_version


@pytest.mark.parametrize("name", ["empty.bin", "small.bin", "big.bin"])
def test_the_whole_file_arrives_with_its_length(client, files, name):
    _, made = files
    response = client.get("/", params={"name": name})
    assert response.status_code == 200
    assert response.headers["content-length"] == str(len(made[name]))
    assert sha(response.content) == sha(made[name])


def test_offset_and_count_and_a_descriptor(client, files):
    _, made = files
    data = made["big.bin"]
    for params in ({"parts": "z:1000:3000000"}, {"parts": "z:1000:3000000", "fd": "1"}):
        response = client.get("/", params={"name": "big.bin", **params})
        assert response.status_code == 200
        assert response.headers["content-length"] == "3000000"
        assert sha(response.content) == sha(data[1000:3001000])


@pytest.mark.parametrize("fd", [False, True])
def test_without_offset_the_file_position_is_the_start(plain, files, fd):
    _, made = files
    params = {"name": "small.bin", "seek": "12345", **({"fd": "1"} if fd else {})}
    response = httpx.get(plain.url + "/", params=params, timeout=10)
    assert response.content == made["small.bin"][12345:]


def test_spans_mixed_with_body_messages(client, files):
    _, made = files
    data = made["big.bin"]
    parts = "b:<head>,z:0:100,z:5000000:2000000,b:|,z:8000000:388615,b:<tail>"
    response = client.get("/", params={"name": "big.bin", "parts": parts})
    expected = b"<head>" + data[:100] + data[5000000:7000000] + b"|" + data[8000000:] + b"<tail>"
    assert response.status_code == 200
    assert "content-length" not in response.headers
    assert sha(response.content) == sha(expected)
    # The span first, more to come; and the last message a span.
    response = client.get("/", params={"name": "small.bin", "parts": "z:0:10,b:-,z:10:49990"})
    assert response.content == made["small.bin"][:10] + b"-" + made["small.bin"][10:]


def test_declared_content_length_is_checked(plain, files):
    _, made = files
    url = plain.url + "/"
    ok = httpx.get(url, params={"name": "small.bin", "declare": "50000"}, timeout=10)
    assert ok.status_code == 200 and ok.content == made["small.bin"]
    streamed = {"name": "small.bin", "parts": "z:0:25000,z:25000:25000", "declare": "50000"}
    ok = httpx.get(url, params=streamed, timeout=10)
    assert ok.headers["content-length"] == "50000" and ok.content == made["small.bin"]
    start = len(plain.output())
    wrong = httpx.get(url, params={"name": "small.bin", "declare": "10"}, timeout=10)
    assert wrong.status_code == 500
    assert plain.wait_for_output(r"Content-Length 10 but the body has 50000", 5, start=start)
    # Declared 30000, the spans add up to more: the second one is refused, the body aborted.
    streamed["declare"] = "30000"
    with pytest.raises(httpx.HTTPError):
        httpx.get(url, params=streamed, timeout=10)
    assert httpx.get(plain.url + "/extensions", timeout=10).status_code == 200


def test_head_gets_the_length_and_no_body(plain, files):
    response = httpx.head(plain.url + "/", params={"name": "big.bin"}, timeout=10)
    assert response.status_code == 200
    assert response.headers["content-length"] == str(8 * MiB + 7)
    assert response.content == b""
    streamed = httpx.head(plain.url + "/", params={"parts": "z,b:x"}, timeout=10)
    assert streamed.status_code == 200 and streamed.content == b""


@pytest.mark.parametrize(
    "case, error",
    [
        ("no_file", r"ValueError: .*missing the required 'file' key"),
        ("str_file", r"TypeError: 'file' must be an open file"),
        ("bool_file", r"TypeError: 'file' must be an open file"),
        ("negative_fd", r"ValueError: 'file' must be a file descriptor >= 0"),
        ("closed_fd", r"OSError: .*Bad file descriptor.*'file'"),
        ("bytesio", r"ValueError: 'file' has no usable file descriptor"),
        ("pipe", r"ValueError: 'file' .* must be a regular file"),
        ("str_offset", r"TypeError: 'offset' must be an int, got str"),
        ("negative_offset", r"ValueError: 'offset' must be an int >= 0"),
        ("offset_past_end", r"ValueError: 'offset' 1000000000 .* past the end of the file"),
        ("float_count", r"TypeError: 'count' must be an int, got float"),
        ("negative_count", r"ValueError: 'count' must be an int >= 0"),
        ("count_past_end", r"ValueError: 'count' 1000000000 .* goes past the end"),
    ],
)
def test_invalid_messages_raise_naming_the_key(plain, case, error):
    response = httpx.get(plain.url + "/", params={"bad": case}, timeout=10)
    assert response.status_code == 200
    assert re.match(error, response.text), response.text


def test_before_the_start_it_is_a_runtime_error(plain):
    response = httpx.get(plain.url + "/before-start", timeout=10)
    assert response.text.startswith("RuntimeError: Expected ASGI message 'http.response.start'")


def test_a_file_that_shrinks_while_sent_aborts(files):
    d, _ = files
    path = d / "shrinking.bin"
    path.write_bytes(b"\0" * (64 * MiB))
    with start_server(APP, "--no-access-log", env={"ZEROCOPY_DIR": str(d)}) as server:
        for parts in ("z", "b:x,z"):  # one span with a Content-Length, and a chunked body
            path.write_bytes(b"\0" * (64 * MiB))
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            sock.sendall(
                b"GET /?name=shrinking.bin&shrink_to=1048576&parts=%s HTTP/1.1\r\nHost: x\r\n\r\n"
                % parts.encode()
            )
            received, tail = 0, b""
            while True:
                got = sock.recv(1 << 20)
                if not got:
                    break
                received, tail = received + len(got), (tail + got)[-16:]
            sock.close()
            # The connection closed without the whole announced length or the chunked end.
            assert received < 64 * MiB and not tail.endswith(b"0\r\n\r\n")


def test_a_1gib_download_holds_little_memory(files):
    d, _ = files
    size = 1024 * MiB
    with open(d / "sparse.bin", "wb") as f:
        f.truncate(size)
    with start_server(APP, "--no-access-log", env={"ZEROCOPY_DIR": str(d)}) as server:
        httpx.get(server.url + "/extensions", timeout=10)
        before = server.rss_kb() * 1024
        peak = before
        with httpx.stream("GET", server.url + "/", params={"name": "sparse.bin"}, timeout=60) as r:
            got = 0
            for i, chunk in enumerate(r.iter_raw(1 << 20)):
                got += len(chunk)
                if i % 16 == 0:
                    peak = max(peak, server.rss_kb() * 1024)
    assert got == size
    assert peak - before < 32 * MiB, "RSS grew by %.1f MiB" % ((peak - before) / MiB)


def test_many_downloads_do_not_block_other_requests(plain, files):
    _, made = files
    results = []

    def download():
        with httpx.Client(base_url=plain.url, timeout=60) as c:
            results.append(sha(c.get("/", params={"name": "big.bin"}).content))

    threads = [threading.Thread(target=download) for _ in range(12)]
    for t in threads:
        t.start()
    with httpx.Client(base_url=plain.url, timeout=10) as c:
        for _ in range(20):
            assert c.get("/extensions").status_code == 200
    for t in threads:
        t.join()
    assert results == [sha(made["big.bin"])] * 12


def test_an_inflight_download_finishes_during_graceful_shutdown(files):
    d, made = files
    with start_server(APP, "--no-access-log", env={"ZEROCOPY_DIR": str(d)}) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(b"GET /?name=big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        received = sock.recv(65536)  # the download has started
        server.proc.send_signal(signal.SIGTERM)
        while True:
            got = sock.recv(1 << 20)
            if not got:
                break
            received += got
        sock.close()
        assert server.wait(timeout=20) == 0
    head, _, body = received.partition(b"\r\n\r\n")
    assert b"content-length: %d" % len(made["big.bin"]) in head.lower()
    assert sha(body) == sha(made["big.bin"])


def test_the_access_log_counts_file_bytes(files):
    d, made = files
    with start_server(APP, "--log-format", "json", env={"ZEROCOPY_DIR": str(d)}) as server:
        for params, size in (
            ({"name": "big.bin", "marker": "m-whole"}, len(made["big.bin"])),
            ({"parts": "b:abc,z:0:1000", "marker": "m-mixed"}, 1003),
        ):
            assert httpx.get(server.url + "/", params=params, timeout=30).status_code == 200
            line = server.wait_for_output(r"[^\n]*%s[^\n]*\n" % params["marker"], timeout=5)
            assert line, server.output()
            assert re.search(r'"status":200,"bytes":%d,' % size, line.group(0)), line.group(0)


def test_pipelined_file_responses_arrive_whole(plain, files):
    """Pipelined requests make the write coalescing hold small writes (server/cork.rs): file
    spans between them must still go out as the file's bytes, in order."""
    _, made = files
    names = ["big.bin", "small.bin", "empty.bin", "big.bin", "small.bin"]
    request = b"".join(
        b"GET /?name=%s&parts=%s HTTP/1.1\r\nHost: x\r\n\r\n" % (n.encode(), p)
        for n in names
        for p in (b"z", b"z:0:70000" if n == "big.bin" else b"z")
    )
    with RawConnection(plain.port, timeout=30) as conn:
        conn.send(request)
        for n in names:
            assert sha(conn.read_response().body) == sha(made[n])
            expected = made[n][:70000] if n == "big.bin" else made[n]
            assert sha(conn.read_response().body) == sha(expected)
