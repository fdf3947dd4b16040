"""TLS: handshakes, certificate verification both ways, ALPN, key formats, the ASGI TLS
extension and start-up errors.  Certificates come from tests/support/tls_certs.py (openssl CLI)."""

import json
import socket
import ssl
import subprocess
import time

import httpx
import pytest

from tests.support.helpers import RawConnection, request_bytes, run_ferrocorn
from tests.support.tls_certs import CLIENT_NAME_RFC4514, PASSWORD, certs

APP = "tests.apps.basic:app"

pytestmark = pytest.mark.skipif(
    subprocess.run(["openssl", "version"], capture_output=True).returncode != 0,
    reason="needs the openssl command line tool",
)


@pytest.fixture(scope="module")
def c():
    return certs()


def tls_flags(c, cert="server", key=None, *extra):
    key = key or cert
    return ("--ssl-certfile", c.path(cert + ".pem"), "--ssl-keyfile", c.path(key + ".key")) + extra


def client_context(c, alpn=("http/1.1",), cert=None, **versions):
    ctx = ssl.create_default_context(cafile=c.ca_pem)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    if cert:
        ctx.load_cert_chain(c.path(cert + ".pem"), c.path(cert + ".key"))
    for attr, value in versions.items():
        setattr(ctx, attr, value)
    return ctx


def tls_connect(port, ctx, server_hostname="localhost"):
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        return ctx.wrap_socket(raw, server_hostname=server_hostname)
    except BaseException:
        raw.close()
        raise


def https_get(port, path, ctx, server_hostname="localhost"):
    """One HTTP/1.1 request over TLS; returns (response, the TLS socket's facts)."""
    sock = tls_connect(port, ctx, server_hostname)
    facts = {
        "alpn": sock.selected_alpn_protocol(),
        "version": sock.version(),
        "cipher": sock.cipher()[0],
    }
    with RawConnection(sock=sock) as conn:
        conn.send(request_bytes("GET", path, [("Connection", "close")]))
        return conn.read_response(), facts


def get_scope(port, ctx, **kwargs):
    resp, facts = https_get(port, "/scope", ctx, **kwargs)
    assert resp is not None and resp.status == 200, resp
    return json.loads(resp.body), facts


def pem_text(path):
    with open(path) as f:
        return f.read()


def scope_tls(port, ctx):
    """The raw ``extensions["tls"]`` dict the app saw (route /tls of tests/apps/tls_app)."""
    sock = tls_connect(port, ctx)
    with RawConnection(sock=sock) as conn:
        conn.send(request_bytes("GET", "/tls", [("Connection", "close")]))
        resp = conn.read_response()
    assert resp.status == 200, resp
    return json.loads(resp.body)


def handshake_fails(port, ctx, server_hostname="localhost"):
    """True when the handshake (or, for TLS 1.3 client auth, the first read) is refused."""
    try:
        sock = tls_connect(port, ctx, server_hostname)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True
    try:
        # With TLS 1.3 the server judges the client certificate after the client considers
        # the handshake done; the refusal arrives with the first read.
        sock.sendall(request_bytes("GET", "/hello", [("Connection", "close")]))
        return sock.recv(1024) == b""
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True
    finally:
        sock.close()


# ---------------------------------------------------------------- handshakes and scope


def test_https_scope_and_tls_extension(server_factory, c):
    server = server_factory("tests.apps.tls_app:app", *tls_flags(c))
    assert "https://" in server.ready_line
    scope, facts = get_scope(server.port, client_context(c))
    assert facts["alpn"] == "http/1.1" and facts["version"] == "TLSv1.3"
    assert scope["scheme"] == "https" and scope["http_version"] == "1.1"
    tls = scope_tls(server.port, client_context(c))
    assert tls["types"] == {
        "server_cert": "str",
        "client_cert_chain": "list",
        "client_cert_name": "NoneType",
        "client_cert_error": "NoneType",
        "tls_version": "int",
        "cipher_suite": "int",
    }
    ext = tls["tls"]
    assert ext["server_cert"].strip() == pem_text(c.server_pem).strip()
    assert ext["client_cert_chain"] == [] and ext["client_cert_name"] is None
    assert ext["client_cert_error"] is None
    assert ext["tls_version"] == 0x0304
    assert ext["cipher_suite"] in (0x1301, 0x1302, 0x1303)


def test_cleartext_scope_has_no_tls_extension(server_factory):
    server = server_factory("tests.apps.tls_app:app")
    resp = httpx.get(server.url + "/tls")
    assert resp.json() == {"tls": None, "types": None, "scheme": "http"}


def test_tls12_and_cipher_selection(server_factory, c):
    server = server_factory(
        "tests.apps.tls_app:app",
        *tls_flags(c),
        "--ssl-ciphers",
        "ECDHE-ECDSA-CHACHA20-POLY1305:TLS13_AES_128_GCM_SHA256",
    )
    ext = scope_tls(server.port, client_context(c, maximum_version=ssl.TLSVersion.TLSv1_2))["tls"]
    assert ext["tls_version"] == 0x0303 and ext["cipher_suite"] == 0xCCA9
    ext = scope_tls(server.port, client_context(c))["tls"]
    assert ext["tls_version"] == 0x0304 and ext["cipher_suite"] == 0x1301


def test_min_version_13_refuses_tls12(server_factory, c):
    server = server_factory(APP, *tls_flags(c), "--ssl-min-version", "1.3")
    assert handshake_fails(server.port, client_context(c, maximum_version=ssl.TLSVersion.TLSv1_2))
    scope, facts = get_scope(server.port, client_context(c))
    assert facts["version"] == "TLSv1.3"


@pytest.mark.parametrize(
    "cert,key,extra",
    [
        ("server-rsa", "server-rsa", ()),  # PKCS#1 RSA key
        ("server", "server-sec1", ()),  # SEC1 EC key
        ("server", "server-enc", ("--ssl-keyfile-password", PASSWORD)),  # encrypted PKCS#8
    ],
    ids=["pkcs1-rsa", "sec1-ec", "encrypted-pkcs8"],
)
def test_key_formats(server_factory, c, cert, key, extra):
    server = server_factory(APP, *tls_flags(c, cert, key, *extra))
    scope, _ = get_scope(server.port, client_context(c))
    assert scope["scheme"] == "https"


def test_key_in_the_certificate_file(server_factory, c):
    server = server_factory(APP, "--ssl-certfile", c.server_combined_pem)
    scope, _ = get_scope(server.port, client_context(c))
    assert scope["scheme"] == "https"


def test_password_from_environment(server_factory, c):
    server = server_factory(
        APP,
        "--ssl-certfile",
        c.server_pem,
        "--ssl-keyfile",
        c.server_enc_key,
        env={"FERROCORN_SSL_KEYFILE_PASSWORD": PASSWORD},
    )
    assert get_scope(server.port, client_context(c))[0]["scheme"] == "https"


def test_verifying_client_rejects_wrong_host_name(server_factory, c):
    server = server_factory(APP, *tls_flags(c))
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|match"):
        tls_connect(server.port, client_context(c), server_hostname="wrong.example")
    other = server_factory(APP, *tls_flags(c, "otherhost"))
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_connect(other.port, client_context(c))
    # The server is unharmed by the failed handshakes.
    assert get_scope(server.port, client_context(c))[0]["scheme"] == "https"


def test_verifying_client_rejects_expired_certificate(server_factory, c):
    server = server_factory(APP, *tls_flags(c, "expired"))
    with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
        tls_connect(server.port, client_context(c))


def test_plain_http_on_a_tls_port_is_dropped(server_factory, c):
    server = server_factory(APP, *tls_flags(c))
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/hello"))
        # Not a TLS ClientHello: the handshake fails and the connection closes.
        assert conn.is_closed_by_peer(5.0) or conn.buf[:1] == b"\x15"


def test_handshake_timeout(server_factory, c):
    server = server_factory(APP, *tls_flags(c), "--ssl-handshake-timeout", "0.5")
    with RawConnection(server.port) as conn:
        started = time.monotonic()
        assert conn.is_closed_by_peer(5.0)
        assert time.monotonic() - started < 3.0
    assert get_scope(server.port, client_context(c))[0]["scheme"] == "https"


# ---------------------------------------------------------------- client certificates


def test_client_cert_required(server_factory, c):
    server = server_factory(
        "tests.apps.tls_app:app",
        *tls_flags(c),
        "--ssl-ca-certs",
        c.ca_pem,
        "--ssl-cert-reqs",
        "required",
    )
    assert handshake_fails(server.port, client_context(c))
    assert handshake_fails(server.port, client_context(c, cert="rogue-client"))
    ext = scope_tls(server.port, client_context(c, cert="client"))["tls"]
    assert ext["client_cert_name"] == CLIENT_NAME_RFC4514
    # Leaf first (OpenSSL clients may append the CA from their trust store).
    chain = [p.strip() for p in ext["client_cert_chain"]]
    assert chain[0] == pem_text(c.client_pem).strip()
    assert all(p.startswith("-----BEGIN CERTIFICATE-----") for p in chain)
    assert ext["client_cert_error"] is None


def test_client_cert_optional(server_factory, c):
    server = server_factory(
        "tests.apps.tls_app:app",
        *tls_flags(c),
        "--ssl-ca-certs",
        c.ca_pem,
        "--ssl-cert-reqs",
        "optional",
    )
    ext = scope_tls(server.port, client_context(c))["tls"]
    assert ext["client_cert_chain"] == [] and ext["client_cert_name"] is None
    ext = scope_tls(server.port, client_context(c, cert="client"))["tls"]
    assert ext["client_cert_name"] == CLIENT_NAME_RFC4514
    # An untrusted certificate is refused even when certificates are optional.
    assert handshake_fails(server.port, client_context(c, cert="rogue-client"))


def test_client_cert_not_requested_by_default(server_factory, c):
    server = server_factory("tests.apps.tls_app:app", *tls_flags(c), "--ssl-ca-certs", c.ca_pem)
    ext = scope_tls(server.port, client_context(c, cert="client"))["tls"]
    assert ext["client_cert_chain"] == [] and ext["client_cert_name"] is None


# ---------------------------------------------------------------- ALPN and HTTP/2 over TLS


@pytest.mark.parametrize(
    "mode,offered,chosen",
    [
        ("auto", ("h2", "http/1.1"), "h2"),
        ("auto", ("http/1.1",), "http/1.1"),
        ("auto", ("http/1.1", "h2"), "h2"),  # the server's preference wins
        ("1", ("h2", "http/1.1"), "http/1.1"),
        ("2", ("h2", "http/1.1"), "h2"),
    ],
)
def test_alpn_selection(server_factory, c, mode, offered, chosen):
    server = server_factory(APP, *tls_flags(c), "--http", mode)
    sock = tls_connect(server.port, client_context(c, alpn=offered))
    try:
        assert sock.selected_alpn_protocol() == chosen
    finally:
        sock.close()


def test_no_alpn_falls_back_to_http11(server_factory, c):
    server = server_factory(APP, *tls_flags(c))
    scope, facts = get_scope(server.port, client_context(c, alpn=None))
    assert facts["alpn"] is None and scope["http_version"] == "1.1"


def test_httpx_http2_over_tls(server_factory, c):
    server = server_factory(APP, *tls_flags(c))
    ctx = ssl.create_default_context(cafile=c.ca_pem)
    with httpx.Client(http2=True, verify=ctx, base_url=f"https://localhost:{server.port}") as cl:
        resp = cl.get("/scope?x=1", headers={"x-custom": "yes"})
        assert resp.http_version == "HTTP/2"
        scope = resp.json()
        assert scope["http_version"] == "2" and scope["scheme"] == "https"
        headers = dict(scope["headers"])
        assert headers["host"] == f"localhost:{server.port}"
        assert headers["x-custom"] == "yes"
        assert not any(name.startswith(":") for name, _ in scope["headers"])
        assert scope["query_string"] == "x=1"
        # Several requests share the connection.
        for i in range(5):
            assert cl.get("/index", params={"i": str(i)}).text == str(i)


# ---------------------------------------------------------------- start-up errors


def assert_startup_error(*args, needle):
    proc = run_ferrocorn(APP, "--port", "0", *args)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 1, (proc.returncode, err)
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    matching = [line for line in lines if needle in line]
    assert matching, (needle, err)
    assert len(lines) <= 3, err
    return matching[0]


def test_error_missing_certificate(c):
    line = assert_startup_error(
        "--ssl-certfile", c.path("nope.pem"), "--ssl-keyfile", c.server_key, needle="nope.pem"
    )
    assert "No such file" in line


def test_error_missing_key(c):
    assert_startup_error(
        "--ssl-certfile", c.server_pem, "--ssl-keyfile", c.path("nokey.key"), needle="nokey.key"
    )


def test_error_mismatched_key(c):
    line = assert_startup_error(*tls_flags(c, "server", "stranger"), needle="stranger.key")
    assert "cannot be used together" in line


def test_error_wrong_password(c):
    line = assert_startup_error(
        *tls_flags(c, "server", "server-enc"),
        "--ssl-keyfile-password",
        "wrong",
        needle="server-enc.key",
    )
    assert "wrong password" in line


def test_error_encrypted_key_without_password(c):
    assert_startup_error(*tls_flags(c, "server", "server-enc"), needle="is encrypted")


def test_error_not_a_certificate(c):
    assert_startup_error(
        "--ssl-certfile", c.server_key, "--ssl-keyfile", c.server_key, needle="no PEM certificate"
    )


def test_error_unknown_cipher(c):
    assert_startup_error(
        *tls_flags(c), "--ssl-ciphers", "TLS_AES_128_GCM_SHA256:RC4-MD5", needle="RC4-MD5"
    )


def test_error_cert_reqs_without_ca(c):
    assert_startup_error(*tls_flags(c), "--ssl-cert-reqs", "required", needle="ssl_ca_certs")


def test_error_keyfile_without_certfile(c):
    assert_startup_error("--ssl-keyfile", c.server_key, needle="requires ssl_certfile")


def test_error_no_cipher_for_the_minimum_version(c):
    # Only TLS 1.2 suites while TLS 1.3 is the minimum: nothing could ever be negotiated.
    assert_startup_error(
        *tls_flags(c),
        "--ssl-min-version",
        "1.3",
        "--ssl-ciphers",
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        needle="nothing usable",
    )
