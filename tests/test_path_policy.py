"""--path-policy: body limit, body read timeout and request timeout overridden per path prefix
(first match wins, segment boundaries), on HTTP/1.1 and HTTP/2, with workers; bad specs fail
at start-up with one line."""

import time

import httpx
import pytest
from ferrocorn.config import Config, ConfigError
from ferrocorn.path_policy import UNSET, parse_policy, prefix_matches

from tests.support.h2client import H2Client
from tests.support.helpers import RawConnection, request_bytes, run_ferrocorn, start_server

APP = "tests.apps.probes_app:app"
KB50 = b"x" * 50_000


def post(server, path, body, **kwargs):
    return httpx.post(server.url + path, content=body, timeout=30, **kwargs)


def chunked(body, size=8192):
    for i in range(0, len(body), size):
        yield body[i : i + size]


@pytest.fixture(scope="module")
def upload_server():
    flags = (
        "--limit-request-body",
        "1000",
        "--path-policy",
        "/upload/small:body=10",
        "--path-policy",
        "/upload/*:body=100K",
        "--path-policy",
        "/open:body=off",
    )
    with start_server(APP, *flags) as server:
        yield server


def test_a_larger_body_is_allowed_under_the_prefix(upload_server):
    assert post(upload_server, "/upload", KB50).text == "50000"
    assert post(upload_server, "/upload/file", KB50).text == "50000"
    # Streamed (chunked): the limit applies as it grows, too.
    assert post(upload_server, "/upload/file", chunked(KB50)).text == "50000"
    assert post(upload_server, "/open", b"y" * 300_000).text == "300000"


def test_elsewhere_the_global_limit_holds(upload_server):
    assert post(upload_server, "/other", KB50).status_code == 413
    assert post(upload_server, "/other", chunked(KB50)).status_code == 413
    # A segment boundary: /uploads is not under /upload.
    assert post(upload_server, "/uploads", KB50).status_code == 413
    assert post(upload_server, "/other", b"z" * 1000).text == "1000"


def test_the_policy_limit_is_enforced(upload_server):
    assert post(upload_server, "/upload/x", b"x" * 200_000).status_code == 413
    assert post(upload_server, "/upload/x", chunked(b"x" * 200_000)).status_code == 413


def test_first_match_wins(upload_server):
    assert post(upload_server, "/upload/small/f", b"x" * 11).status_code == 413
    assert post(upload_server, "/upload/small/f", b"x" * 10).text == "10"
    assert post(upload_server, "/upload/smaller", KB50).text == "50000"


def test_http2_gets_the_same_policies(upload_server):
    with H2Client(upload_server.port) as client:
        sid = client.request("POST", "/upload/h2", body=KB50)
        (stream,) = client.wait(sid)
        assert stream.status == 200 and bytes(stream.data) == b"50000"
        sid = client.request("POST", "/other", body=KB50)
        assert client.wait(sid)[0].status == 413


def test_body_timeout_override():
    flags = ("--timeout-request-body", "60", "--path-policy", "/quick:body-timeout=1")
    with start_server(APP, *flags) as server:
        headers = [("Content-Length", "10")]
        with RawConnection(server.port, timeout=30) as conn:
            conn.send(request_bytes("POST", "/quick", headers=headers, body=b"12345"))
            assert conn.read_response().status == 408
        # Elsewhere a pause longer than that is fine.
        with RawConnection(server.port, timeout=30) as conn:
            conn.send(request_bytes("POST", "/other", headers=headers, body=b"12345"))
            time.sleep(2)
            conn.send(b"67890")
            resp = conn.read_response()
            assert (resp.status, resp.body) == (200, b"10")


def test_request_timeout_override():
    flags = (
        "--timeout-request",
        "30",
        "--path-policy",
        "/api:timeout=0.5",
        "--path-policy",
        "/long:timeout=off",
    )
    with start_server(APP, *flags) as server:
        resp = httpx.get(server.url + "/api/slow?s=3", timeout=30)
        assert resp.status_code == 503 and resp.headers.get("retry-after")
        assert httpx.get(server.url + "/apix/slow?s=1", timeout=30).text == "slow"
        assert httpx.get(server.url + "/long/slow?s=1", timeout=30).text == "slow"


def test_request_timeout_only_under_a_prefix():
    with start_server(APP, "--path-policy", "/api:timeout=0.5") as server:
        assert httpx.get(server.url + "/api/slow?s=3", timeout=30).status_code == 503
        assert httpx.get(server.url + "/slow?s=1", timeout=30).text == "slow"


def test_policy_off_keeps_a_global_timeout_away():
    flags = ("--timeout-request", "0.5", "--path-policy", "/long:timeout=off")
    with start_server(APP, *flags) as server:
        assert httpx.get(server.url + "/long/slow?s=1", timeout=30).text == "slow"
        assert httpx.get(server.url + "/slow?s=3", timeout=30).status_code == 503


def test_root_path_does_not_change_what_matches():
    flags = ("--root-path", "/app", "--path-policy", "/api:timeout=0.5")
    with start_server(APP, *flags) as server:
        assert httpx.get(server.url + "/api/slow?s=3", timeout=30).status_code == 503


def test_with_workers():
    flags = ("--workers", "2", "--limit-request-body", "1000", "--path-policy", "/upload:body=1M")
    with start_server(APP, *flags) as server:
        for _ in range(4):
            assert post(server, "/upload", KB50).text == "50000"
            assert post(server, "/other", KB50).status_code == 413


@pytest.mark.parametrize(
    "spec, named",
    [
        ("upload:body=1", "upload"),
        ("/x:size=1", "size"),
        ("/x:body=ten", "ten"),
        ("/x:timeout=-1", "-1"),
        ("/x:body-timeout=soon", "soon"),
        ("/x", "PREFIX"),
        ("/x:body=1,body=2", "twice"),
    ],
)
def test_bad_specs_exit_with_one_line(spec, named):
    proc = run_ferrocorn(APP, "--port", "0", "--path-policy", spec)
    lines = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 2, lines
    assert len(lines) == 1 and named in lines[0] and "--path-policy" in lines[0], lines


def test_bad_specs_through_the_python_api():
    with pytest.raises(ConfigError, match="unknown key 'sizes'"):
        Config(APP, path_policy="/x:sizes=1")
    with pytest.raises(ConfigError, match="path_policy"):
        Config(APP, path_policy=[3])


def test_parsing():
    policy = parse_policy("/upload/*:body=10G,timeout=600")
    assert policy.prefix == "/upload"
    assert policy.body == 10 << 30 and policy.timeout == 600.0 and policy.body_timeout is UNSET
    assert parse_policy("/a:body=512k,body-timeout=off").body == 512 << 10
    assert parse_policy("/a:body=off").body is None
    assert parse_policy("/*:timeout=1.5").prefix == "/"
    config = Config(APP, limit_request_body=100, timeout_request_body=5, path_policy=["/a:body=7"])
    assert config.encoded_path_policies == [("/a", 7, 5.0)]
    assert config.path_timeouts is None


def test_prefix_matching_rule():
    assert prefix_matches("/upload", "/upload")
    assert prefix_matches("/upload", "/upload/a")
    assert not prefix_matches("/upload", "/uploads")
    assert prefix_matches("/upload/", "/upload/a")
    assert not prefix_matches("/upload/", "/upload")
    assert prefix_matches(b"/", b"/anything")


def test_no_policy_means_no_lookup():
    config = Config(APP)
    assert config.encoded_path_policies == [] and config.path_timeouts is None
