"""TLS and HTTP/2 with the command-line clients people debug with: curl (ALPN h2 and
http/1.1, h2c prior knowledge, client certificates), ``openssl s_client`` (ALPN, protocol
versions, certificate verification) and h2load over TLS. Each test is skipped when its tool
is missing (.ci/run installs curl, openssl and nghttp2-client)."""

import hashlib
import json
import shutil
import subprocess

import pytest

from tests.support.tls_certs import CLIENT_NAME_RFC4514, certs

APP = "tests.apps.tls_app:app"

needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
needs_h2load = pytest.mark.skipif(shutil.which("h2load") is None, reason="needs h2load")


@pytest.fixture(scope="module")
def c():
    return certs()


def tls_flags(c, *extra):
    return ("--ssl-certfile", c.path("server.pem"), "--ssl-keyfile", c.path("server.key")) + extra


def curl(*args, timeout=30):
    """curl's body and, after a final newline, the HTTP version it used."""
    result = subprocess.run(
        ["curl", "-sS", "--max-time", "20", "-w", "\n%{http_version}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return result


def curl_https(c, port, path, *args):
    return curl(
        "--cacert",
        c.ca_pem,
        "--resolve",
        f"localhost:{port}:127.0.0.1",
        *args,
        f"https://localhost:{port}{path}",
    )


def body_and_version(result):
    assert result.returncode == 0, result.stderr
    body, _, version = result.stdout.rpartition("\n")
    return body, version


@needs_curl
@pytest.mark.parametrize(
    "flag,version,asgi_version",
    [
        ("--http2", "2", "2"),
        ("--http1.1", "1.1", "1.1"),
    ],
)
def test_curl_over_tls_negotiates_by_alpn(server_factory, c, flag, version, asgi_version):
    server = server_factory(APP, *tls_flags(c))
    body, used = body_and_version(curl_https(c, server.port, "/scope", flag))
    assert used == version
    scope = json.loads(body)
    assert scope["http_version"] == asgi_version
    assert scope["scheme"] == "https"
    body, _ = body_and_version(curl_https(c, server.port, "/tls", flag))
    report = json.loads(body)
    assert report["tls"]["tls_version"] in (0x0303, 0x0304)
    assert report["scheme"] == "https"


@needs_curl
def test_curl_h2c_prior_knowledge(server_factory):
    server = server_factory(APP)
    body, used = body_and_version(curl("--http2-prior-knowledge", f"{server.url}/scope"))
    assert used == "2"
    scope = json.loads(body)
    assert scope["http_version"] == "2" and scope["scheme"] == "http"
    assert "tls" not in (scope.get("extensions") or {})


@needs_curl
def test_curl_post_body_over_h2_tls(server_factory, c):
    server = server_factory(APP, *tls_flags(c))
    payload = bytes(range(256)) * 4096  # 1 MiB: several windows' worth of flow control
    result = subprocess.run(
        [
            "curl",
            "-sS",
            "--max-time",
            "20",
            "--http2",
            "--cacert",
            c.ca_pem,
            "--resolve",
            f"localhost:{server.port}:127.0.0.1",
            "--data-binary",
            "@-",
            "-H",
            "content-type: application/octet-stream",
            f"https://localhost:{server.port}/echo",
        ],
        input=payload,
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    echoed = json.loads(result.stdout)
    assert echoed["size"] == len(payload)
    assert echoed["sha256"] == hashlib.sha256(payload).hexdigest()


@needs_curl
def test_curl_client_certificate_required(server_factory, c):
    server = server_factory(
        APP, *tls_flags(c, "--ssl-ca-certs", c.ca_pem, "--ssl-cert-reqs", "required")
    )
    refused = curl_https(c, server.port, "/tls", "--http2")
    assert refused.returncode != 0  # no certificate: the handshake (or first read) fails
    body, used = body_and_version(
        curl_https(
            c,
            server.port,
            "/tls",
            "--http2",
            "--cert",
            c.path("client.pem"),
            "--key",
            c.path("client.key"),
        )
    )
    assert used == "2"
    tls = json.loads(body)["tls"]
    assert tls["client_cert_name"] == CLIENT_NAME_RFC4514
    assert tls["client_cert_error"] is None


def s_client(port, *args, stdin=b"Q\n", stdout_only=False):
    """``openssl s_client`` against the server: its exit code and output (stdout, plus
    stderr unless ``stdout_only``)."""
    result = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost", *args],
        input=stdin,
        capture_output=True,
        timeout=30,
    )
    out = result.stdout if stdout_only else result.stdout + result.stderr
    return result.returncode, out.decode("utf-8", "replace")


@needs_openssl
@pytest.mark.parametrize(
    "offered,chosen",
    [
        ("h2,http/1.1", "h2"),
        ("http/1.1", "http/1.1"),
    ],
)
def test_s_client_alpn_and_verification(server_factory, c, offered, chosen):
    server = server_factory(APP, *tls_flags(c))
    rc, out = s_client(server.port, "-alpn", offered, "-CAfile", c.ca_pem, "-verify_return_error")
    assert rc == 0, out
    assert f"ALPN protocol: {chosen}" in out, out
    assert "Verify return code: 0 (ok)" in out, out


@needs_openssl
def test_s_client_below_the_minimum_version_is_refused(server_factory, c):
    server = server_factory(APP, *tls_flags(c, "--ssl-min-version", "1.3"))
    rc, out = s_client(server.port, "-tls1_2", "-CAfile", c.ca_pem)
    assert rc != 0, out
    # RFC 8446 §4.2.1: the handshake ends with a protocol_version alert, not a bare close.
    assert "alert protocol version" in out, out
    rc, out = s_client(server.port, "-tls1_3", "-CAfile", c.ca_pem)
    assert rc == 0, out
    assert "TLSv1.3" in out, out


@needs_openssl
def test_s_client_speaks_http11_by_hand(server_factory, c):
    server = server_factory(APP, *tls_flags(c))
    request = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    rc, out = s_client(
        server.port,
        "-alpn",
        "http/1.1",
        "-CAfile",
        c.ca_pem,
        "-quiet",
        stdin=request,
        stdout_only=True,
    )
    assert "HTTP/1.1 200 OK" in out, out
    assert out.rstrip().endswith("hello world"), out


@needs_h2load
def test_h2load_over_tls(server_factory, c):
    server = server_factory(APP, *tls_flags(c), "--no-access-log")
    result = subprocess.run(
        ["h2load", "-n", "2000", "-c", "8", "-m", "10", f"https://127.0.0.1:{server.port}/"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Application protocol: h2" in result.stdout, result.stdout
    assert "2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, 0 errored" in (
        result.stdout
    ), result.stdout
    assert "status codes: 2000 2xx" in result.stdout, result.stdout
