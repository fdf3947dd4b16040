"""File responses through each framework as shipped (Starlette/FastAPI ``FileResponse``, which
switch to ``http.response.pathsend`` by themselves; Django's ``FileResponse``, which streams;
Litestar's ``File``; Quart's ``send_file``; a Falcon file stream), over HTTP/1.1 and HTTP/2,
cleartext and TLS: every byte, the right length, HEAD without a body, and the access log
counting the response like any other."""

import hashlib
import os
import ssl

import httpx
import pytest

from tests.support.helpers import start_server
from tests.support.tls_certs import certs
from tests.test_frameworks import FRAMEWORKS, require_framework

MiB = 1 << 20
SIZES = {"small.txt": 50_000, "big.bin": 5 * MiB + 3, "empty.bin": 0}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fw-files")
    made = {}
    for name, size in SIZES.items():
        data = os.urandom(size)
        (d / name).write_bytes(data)
        made[name] = data
    return d, made


@pytest.fixture(scope="module", params=FRAMEWORKS)
def fw(request):
    require_framework(request.param)
    return request.param


@pytest.fixture(scope="module", params=[False, True], ids=["cleartext", "tls"])
def tls(request):
    return request.param


@pytest.fixture(scope="module")
def server(fw, tls, files, tmp_path_factory):
    d, _ = files
    flags = ["--lifespan", "on", "--access-log"]
    if tls:
        c = certs()
        flags += ["--ssl-certfile", c.path("server.pem"), "--ssl-keyfile", c.path("server.key")]
    env = {
        "FW_FILE_DIR": str(d),
        "FW_MARKER_DIR": str(tmp_path_factory.mktemp("fw-markers")),
        "FW_STARTUP_TOKEN": "files",
    }
    with start_server("tests.frameworks.%s_app:app" % fw, *flags, env=env, timeout=60) as s:
        s.tls = tls
        yield s


def client(server, http2):
    if server.tls:
        base = "https://localhost:%d" % server.port
        verify = ssl.create_default_context(cafile=certs().ca_pem)
    else:
        base = "http://127.0.0.1:%d" % server.port
        verify = True
    return httpx.Client(base_url=base, timeout=60, http1=not http2, http2=http2, verify=verify)


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
def test_files_arrive_whole(server, files, http2):
    _, made = files
    with client(server, http2) as c:
        for name, data in made.items():
            r = c.get("/file/" + name)
            assert r.status_code == 200, (name, r.status_code, r.text[:200])
            assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
            assert len(r.content) == len(data), name
            assert hashlib.sha256(r.content).digest() == hashlib.sha256(data).digest(), name
            length = r.headers.get("content-length")
            # Django streams the file and may not announce its length; when given, it is exact.
            assert length is None or int(length) == len(data), name
        assert c.get("/file/missing.bin").status_code == 404
        # The server keeps serving on the same connection.
        assert c.get("/plain").status_code == 200


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
def test_head_has_no_body(server, http2):
    with client(server, http2) as c:
        r = c.head("/file/small.txt")
        assert r.status_code in (200, 405), r.status_code  # a framework may not route HEAD
        assert r.content == b""
        if r.status_code == 200 and "content-length" in r.headers:
            assert int(r.headers["content-length"]) in (SIZES["small.txt"], 0)


def test_access_log_counts_file_responses(server):
    with client(server, False) as c:
        assert c.get("/file/big.bin").status_code == 200
    line = server.wait_for_output(r'"GET /file/big\.bin HTTP/1\.1" 200', timeout=10)
    assert line, server.output()[-2000:]
