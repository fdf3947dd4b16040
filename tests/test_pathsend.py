"""``http.response.pathsend``: the core sends a file as the body (src/bridge/file_body.rs),
read as the client takes it; over HTTP/1.1, HTTP/2 and TLS, raw and through Starlette's
FileResponse, bit-exact, with the failures the extension asks for. Cleartext HTTP/1.1 runs
both ways the core sends a file: by sendfile(2) (`--sendfile on`) and read and written, as
`--sendfile auto` does for a peer on this host, which every test's client is.
"""

import hashlib
import os
import socket
import ssl
import threading

import httpx
import pytest

from tests.support.helpers import start_server
from tests.support.tls_certs import certs

RAW = "tests.apps.pathsend_app:raw"
STARLETTE = "tests.apps.pathsend_app:starlette"
MiB = 1 << 20


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("pathsend")
    made = {}
    for name, size in (("empty.bin", 0), ("small.txt", 50_000), ("big.bin", 8 * MiB + 7)):
        data = os.urandom(size)
        (d / name).write_bytes(data)
        made[name] = data
    (d / "sub").mkdir()
    return d, made


SENDFILE_MODES = ["on", "auto"]


@pytest.fixture(scope="module", params=SENDFILE_MODES)
def raw_server(files, request):
    d, _ = files
    flags = ["--no-access-log", "--sendfile", request.param]
    with start_server(RAW, *flags, env={"PATHSEND_DIR": str(d)}) as s:
        yield s


def test_extension_is_advertised_on_http1_and_http2(raw_server):
    with httpx.Client(base_url=raw_server.url, timeout=10) as client:
        assert "http.response.pathsend" in client.get("/extensions").json()
    with httpx.Client(base_url=raw_server.url, timeout=10, http1=False, http2=True) as client:
        response = client.get("/extensions")
        assert response.http_version == "HTTP/2"
        assert "http.response.pathsend" in response.json()


@pytest.mark.parametrize("name", ["empty.bin", "small.txt", "big.bin"])
@pytest.mark.parametrize("http2", [False, True])
def test_files_arrive_whole_with_their_length(raw_server, files, name, http2):
    _, made = files
    with httpx.Client(base_url=raw_server.url, timeout=30, http1=not http2, http2=http2) as client:
        response = client.get("/", params={"path": name})
    assert response.status_code == 200
    assert response.headers["content-length"] == str(len(made[name]))
    assert hashlib.sha256(response.content).digest() == hashlib.sha256(made[name]).digest()


def test_head_gets_the_length_and_no_body(raw_server, files):
    _, made = files
    response = httpx.head(raw_server.url + "/", params={"path": "small.txt"}, timeout=10)
    assert response.status_code == 200
    assert response.headers["content-length"] == str(len(made["small.txt"]))
    assert response.content == b""


@pytest.mark.parametrize(
    "params, logged",
    [
        ({"path": "missing.bin"}, r"FileNotFoundError: .*missing\.bin"),
        ({"path": "sub"}, r"IsADirectoryError: .*sub"),
        (
            {"path": "small.txt", "relative": "1"},
            r"ValueError: 'path' of 'http.response.pathsend' must be absolute",
        ),
        ({"path": "small.txt", "declare": "10"}, r"Content-Length 10 but the body has 50000"),
    ],
)
def test_a_file_that_cannot_be_sent_is_a_500_naming_it(raw_server, params, logged):
    start = len(raw_server.output())
    response = httpx.get(raw_server.url + "/", params=params, timeout=10)
    assert response.status_code == 500
    assert raw_server.wait_for_output(logged, timeout=5, start=start), raw_server.output()[start:]
    assert httpx.get(raw_server.url + "/extensions", timeout=10).status_code == 200


@pytest.mark.parametrize("sendfile", SENDFILE_MODES)
def test_a_file_that_shrinks_while_sent_aborts_the_response(files, sendfile):
    d, _ = files
    path = d / "shrinking.bin"
    path.write_bytes(b"\0" * (64 * MiB))
    flags = ["--no-access-log", "--sendfile", sendfile]
    with start_server(RAW, *flags, env={"PATHSEND_DIR": str(d)}) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(b"GET /?path=shrinking.bin&shrink_to=1048576 HTTP/1.1\r\nHost: x\r\n\r\n")
        received = 0
        while True:
            got = sock.recv(1 << 20)
            if not got:
                break
            received += len(got)
        sock.close()
    # Never the whole announced length, and the connection closed instead of a clean end.
    assert received < 64 * MiB


@pytest.mark.parametrize("sendfile", SENDFILE_MODES)
def test_a_big_download_holds_little_memory(files, sendfile):
    d, _ = files
    size = 512 * MiB
    with open(d / "sparse.bin", "wb") as f:
        f.truncate(size)
    flags = ["--no-access-log", "--sendfile", sendfile]
    with start_server(RAW, *flags, env={"PATHSEND_DIR": str(d)}) as server:
        httpx.get(server.url + "/extensions", timeout=10)
        before = server.rss_kb() * 1024
        peak = before
        with httpx.stream("GET", server.url + "/", params={"path": "sparse.bin"}, timeout=60) as r:
            got = 0
            for chunk in r.iter_bytes(1 << 20):
                got += len(chunk)
                peak = max(peak, server.rss_kb() * 1024)
    assert got == size
    assert peak - before < 32 * MiB, "RSS grew by %.1f MiB" % ((peak - before) / MiB)


@pytest.mark.parametrize("tls", [False, True])
def test_starlette_file_response_uses_pathsend(files, tls):
    d, made = files
    flags = ["--no-access-log"]
    kwargs = {}
    if tls:
        c = certs()
        flags += ["--ssl-certfile", c.path("server.pem"), "--ssl-keyfile", c.path("server.key")]
        kwargs["verify"] = ssl.create_default_context(cafile=c.ca_pem)
    with start_server(STARLETTE, *flags, env={"PATHSEND_DIR": str(d)}) as server:
        base = ("https://localhost:%d" if tls else "http://127.0.0.1:%d") % server.port
        for http2 in (False, True):
            with httpx.Client(
                base_url=base, timeout=30, http1=not http2, http2=http2, **kwargs
            ) as client:
                for name in ("small.txt", "big.bin"):
                    response = client.get("/files/" + name)
                    assert response.status_code == 200, response.text
                    assert response.content == made[name]
                    assert response.headers["content-length"] == str(len(made[name]))
                head = client.head("/files/small.txt")
                assert head.status_code == 200 and head.content == b""
                assert client.get("/files/nope").status_code in (404, 500)
        # Both files, both protocols: FileResponse chose pathsend (4 times), no body chunks.
        sent = httpx.get(base + "/_sent", timeout=10, **kwargs).json()
        assert sent.get("http.response.pathsend") == 4, sent


def test_many_concurrent_downloads_do_not_block_other_requests(raw_server, files):
    _, made = files
    results = []

    def download():
        with httpx.Client(base_url=raw_server.url, timeout=60) as client:
            results.append(client.get("/", params={"path": "big.bin"}).content == made["big.bin"])

    threads = [threading.Thread(target=download) for _ in range(16)]
    for t in threads:
        t.start()
    with httpx.Client(base_url=raw_server.url, timeout=10) as client:
        for _ in range(20):
            assert client.get("/extensions").status_code == 200
    for t in threads:
        t.join()
    assert results == [True] * 16
