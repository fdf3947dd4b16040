"""PyPy serves plain HTTP requests through its cffi fast path (src/asgi/pypy/fast.rs,
python/ferrocorn/_pypy/fast.py), and the requests it leaves to the PyO3 dispatcher (here: a
forwarded request under --proxy-headers) are answered alike. The rest of the suite runs on
PyPy too, so every behaviour is checked on whichever path serves it; this file checks that
the fast path is the one that serves by default, and that a send after the app returned is
refused the same way on both paths."""

import json
import subprocess

import httpx
import pytest

from tests.support.helpers import SERVER_PYTHON, start_server


def server_is_pypy():
    out = subprocess.run(
        [SERVER_PYTHON, "-c", "import sys; print(sys.implementation.name)"],
        capture_output=True,
        timeout=60,
    ).stdout
    return out.strip() == b"pypy"


pytestmark = pytest.mark.skipif(not server_is_pypy(), reason="the fast path is PyPy's")


def test_plain_requests_take_the_fast_path_and_forwarded_ones_the_dispatcher():
    with start_server(
        "tests.apps.fast_path_app:app",
        "--proxy-headers",
        "--forwarded-allow-ips",
        "127.0.0.1",
    ) as server:
        plain = httpx.post(server.url + "/a%20b", content=b"x" * 100_000, timeout=10)
        assert plain.status_code == 200
        report = plain.json()
        assert report["receiver"] == "FastRequest", report
        assert report["body"] == "x" * 100_000
        assert report["path"] == "/a b"
        forwarded = httpx.post(
            server.url + "/a%20b",
            content=b"y" * 10,
            headers={"x-forwarded-for": "192.0.2.7"},
            timeout=10,
        )
        report = forwarded.json()
        assert report["receiver"] != "FastRequest", report
        assert report["client"][0] == "192.0.2.7"
        assert report["body"] == "y" * 10


def test_many_requests_on_one_connection_reuse_handles_safely():
    """Handles are reused once their request ended: 500 requests over one keep-alive
    connection, each answered with its own body."""
    with start_server("tests.apps.fast_path_app:app", "--no-access-log") as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for i in range(500):
                r = client.post("/n", content=str(i).encode())
                assert json.loads(r.text)["body"] == str(i)
