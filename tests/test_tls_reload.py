"""TLS certificate reload while serving: SIGHUP and --ssl-reload-interval switch new
handshakes to the new certificate, key and CA bundle; established connections keep working; a
broken file keeps the previous certificate and logs one error."""

import os
import shutil
import signal
import socket
import ssl
import tempfile

import pytest

from tests.support.helpers import RawConnection, request_bytes, wait_until
from tests.support.tls_certs import _ec_key, _issue, certs

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl command line tool"
)

RELOADED = "TLS certificate reloaded"
FAILED = "TLS reload failed, still serving the previous certificate"


@pytest.fixture(scope="module")
def c():
    """The session's certificates plus two server certificates told apart by subject."""
    c = certs()
    for name in ("reload-a", "reload-b"):
        if not os.path.exists(c.path(name + ".pem")):
            _ec_key(name + ".key", c.dir)
            _issue(c.dir, name, name + ".key", "/O=%s/CN=localhost" % name, "server_ext")
    return c


@pytest.fixture
def files(c):
    """A directory the server reads its certificate and key from, starting with reload-a."""
    d = tempfile.mkdtemp(prefix="ferrocorn-reload-")
    install(c, d, "reload-a")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def install(c, d, name, key=None):
    """Swap ``name``'s certificate (and ``key``'s key) in, as a deploy would: atomically."""
    for src, dst in (
        (c.path(name + ".pem"), "cert.pem"),
        (c.path((key or name) + ".key"), "key.pem"),
    ):
        tmp = os.path.join(d, dst + ".tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, os.path.join(d, dst))


def write(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def tls_flags(d, *extra):
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    return ("--ssl-certfile", cert, "--ssl-keyfile", key) + extra


def client_context(c, cert=None):
    ctx = ssl.create_default_context(cafile=c.ca_pem)
    ctx.set_alpn_protocols(["http/1.1"])
    if cert:
        ctx.load_cert_chain(c.path(cert + ".pem"), c.path(cert + ".key"))
    return ctx


def connect(port, ctx):
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        return ctx.wrap_socket(raw, server_hostname="localhost")
    except BaseException:
        raw.close()
        raise


def organization(sock):
    subject = dict(item[0] for item in sock.getpeercert()["subject"])
    return subject["organizationName"]


def served_subject(port, c):
    """The organization in the certificate a new connection gets, after a request on it."""
    with connect(port, client_context(c)) as sock:
        name = organization(sock)
        conn = RawConnection(sock=sock)
        conn.send(request_bytes("GET", "/hello", [("Connection", "close")]))
        resp = conn.read_response()
        assert resp is not None and resp.status == 200, resp
    return name


def get_on(conn):
    conn.send(request_bytes("GET", "/hello"))
    resp = conn.read_response()
    return resp is not None and resp.status == 200


def refused(port, ctx):
    """Whether the handshake (or, with TLS 1.3 client auth, the first read) is refused."""
    try:
        sock = connect(port, ctx)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True
    try:
        sock.sendall(request_bytes("GET", "/hello", [("Connection", "close")]))
        return sock.recv(1024) == b""
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True
    finally:
        sock.close()


def test_sighup_switches_new_handshakes_and_keeps_established_connections(server_factory, c, files):
    server = server_factory("tests.apps.basic:app", *tls_flags(files))
    assert served_subject(server.port, c) == "reload-a"
    established = connect(server.port, client_context(c))
    kept = RawConnection(sock=established)
    assert get_on(kept)

    install(c, files, "reload-b")
    os.kill(server.pid, signal.SIGHUP)
    assert server.wait_for_output(RELOADED, timeout=10), server.output()
    assert served_subject(server.port, c) == "reload-b"
    # The connection from before still serves requests, with the certificate it started on.
    assert get_on(kept) and organization(established) == "reload-a"
    kept.close()
    assert server.proc.poll() is None, "SIGHUP must not stop a TLS server"


@pytest.mark.parametrize(
    "breakage",
    ["garbage-cert", "missing-key", "mismatched-key"],
)
def test_failed_reload_keeps_the_certificate_and_logs_one_error(server_factory, c, files, breakage):
    server = server_factory("tests.apps.basic:app", *tls_flags(files))
    if breakage == "garbage-cert":
        write(os.path.join(files, "cert.pem"), b"-----BEGIN CERTIFICATE-----\nnot base64\n")
        named = "cert.pem"
    elif breakage == "missing-key":
        os.unlink(os.path.join(files, "key.pem"))
        named = "key.pem"
    else:
        install(c, files, "reload-b", key="stranger")
        named = "cert.pem"
    os.kill(server.pid, signal.SIGHUP)
    line = server.wait_for_output(FAILED + ".*", timeout=10)
    assert line, server.output()
    assert named in line.group(0)
    assert served_subject(server.port, c) == "reload-a"
    assert server.output().count(FAILED) == 1

    # Mended: the next reload takes it.
    install(c, files, "reload-b")
    os.kill(server.pid, signal.SIGHUP)
    assert server.wait_for_output(RELOADED, timeout=10), server.output()
    assert served_subject(server.port, c) == "reload-b"


def test_interval_reloads_changed_files_and_reports_a_broken_change_once(server_factory, c, files):
    server = server_factory(
        "tests.apps.basic:app", *tls_flags(files, "--ssl-reload-interval", "0.2")
    )
    assert served_subject(server.port, c) == "reload-a"
    install(c, files, "reload-b")
    assert wait_until(lambda: served_subject(server.port, c) == "reload-b", timeout=15)

    install(c, files, "reload-a", key="stranger")
    assert server.wait_for_output(FAILED, timeout=10), server.output()
    # Several more looks at the unchanged broken files: no second error, nor a reload.
    mark = len(server.output())
    assert not server.wait_for_output(FAILED + "|" + RELOADED, timeout=1.5, start=mark)
    assert served_subject(server.port, c) == "reload-b"


def test_ca_bundle_reloads_too(server_factory, c, files):
    ca = os.path.join(files, "ca.pem")
    shutil.copyfile(c.ca_pem, ca)
    flags = tls_flags(files, "--ssl-ca-certs", ca, "--ssl-cert-reqs", "required")
    server = server_factory("tests.apps.basic:app", *flags)
    assert not refused(server.port, client_context(c, cert="client"))

    # A CA that did not sign the client's certificate: that client is refused from now on.
    shutil.copyfile(c.rogue_ca_pem, ca + ".tmp")
    os.replace(ca + ".tmp", ca)
    os.kill(server.pid, signal.SIGHUP)
    assert server.wait_for_output(RELOADED, timeout=10), server.output()
    assert refused(server.port, client_context(c, cert="client"))


def test_sighup_to_the_supervisor_rolls_workers_onto_the_new_certificate(server_factory, c, files):
    server = server_factory("tests.apps.basic:app", *tls_flags(files, "--workers", "2"), timeout=60)
    assert served_subject(server.port, c) == "reload-a"
    install(c, files, "reload-b")
    os.kill(server.pid, signal.SIGHUP)

    def all_new():
        return all(served_subject(server.port, c) == "reload-b" for _ in range(6))

    assert wait_until(all_new, timeout=45), server.output()


def test_reload_interval_needs_tls():
    from tests.support.helpers import run_ferrocorn

    proc = run_ferrocorn("tests.apps.basic:app", "--ssl-reload-interval", "5")
    assert proc.returncode != 0
    assert b"ssl_reload_interval requires ssl_certfile" in proc.stderr
