"""Test certificates, made at test time with the ``openssl`` command line tool.

The ``openssl`` CLI (rather than the ``cryptography`` package) works the same under CPython
and PyPy and needs no wheel.  Everything is generated once per test session into a temporary
directory: a CA, server certificates for 127.0.0.1/localhost with keys in every supported
format, an expired server certificate, one for another host name, and a client certificate.
"""

import atexit
import os
import shutil
import subprocess
import tempfile

PASSWORD = "s3cret-pass"
CLIENT_SUBJECT = "/O=Ferrocorn Tests/CN=test-client"
# RFC 4514 lists the most specific attribute first.
CLIENT_NAME_RFC4514 = "CN=test-client,O=Ferrocorn Tests"

_CA_CONF = """\
[ ca ]
default_ca = test_ca
[ test_ca ]
dir = {dir}
database = {dir}/index.txt
new_certs_dir = {dir}/issued
serial = {dir}/serial
default_md = sha256
policy = anything
copy_extensions = copy
unique_subject = no
[ anything ]
commonName = supplied
organizationName = optional
[ server_ext ]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = {san}
[ client_ext ]
basicConstraints = CA:FALSE
keyUsage = digitalSignature
extendedKeyUsage = clientAuth
"""


class Certs:
    """Paths of the generated files (attributes ending in the file's role)."""

    def __init__(self, directory):
        self.dir = directory

    def path(self, name):
        return os.path.join(self.dir, name)

    def __getattr__(self, name):
        # certs.ca_pem -> <dir>/ca.pem, certs.server_rsa_key -> <dir>/server-rsa.key
        if name.startswith("_"):
            raise AttributeError(name)
        stem, _, ext = name.rpartition("_")
        return self.path("{}.{}".format(stem.replace("_", "-"), ext))


def _openssl(*args, cwd):
    proc = subprocess.run(
        ("openssl",) + args,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
    )
    if proc.returncode != 0:
        raise RuntimeError("openssl {} failed: {}".format(" ".join(args), proc.stderr.decode()))


def _ec_key(path, cwd):
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path, cwd=cwd
    )


def _issue(d, name, key, subject, ext, san="DNS:localhost,IP:127.0.0.1", dates=None):
    """Sign a certificate for ``key`` with the test CA (``dates``: (start, end) YYMMDDHHMMSSZ)."""
    with open(os.path.join(d, "ca.cnf"), "w") as f:
        f.write(_CA_CONF.format(dir=d, san=san))
    _openssl("req", "-new", "-key", key, "-subj", subject, "-out", name + ".csr", cwd=d)
    args = [
        "ca",
        "-batch",
        "-config",
        "ca.cnf",
        "-cert",
        "ca.pem",
        "-keyfile",
        "ca.key",
        "-extensions",
        ext,
        "-notext",
        "-preserveDN",
        "-in",
        name + ".csr",
        "-out",
        name + ".pem",
    ]
    if dates:
        args += ["-startdate", dates[0], "-enddate", dates[1]]
    else:
        args += ["-days", "30"]
    _openssl(*args, cwd=d)


def generate(d):
    os.makedirs(os.path.join(d, "issued"))
    with open(os.path.join(d, "index.txt"), "w"):
        pass
    with open(os.path.join(d, "serial"), "w") as f:
        f.write("1000\n")
    _ec_key("ca.key", d)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        "/O=Ferrocorn Tests/CN=Test CA",
        "-days",
        "30",
        "-out",
        "ca.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )

    # Server: PKCS#8 EC key (what genpkey writes).
    _ec_key("server.key", d)
    _issue(d, "server", "server.key", "/CN=localhost", "server_ext")
    # The same certificate with its key in the other formats.
    _openssl("pkey", "-in", "server.key", "-out", "server-sec1.key", "-traditional", cwd=d)
    _openssl(
        "pkcs8",
        "-topk8",
        "-v2",
        "aes-256-cbc",
        "-in",
        "server.key",
        "-out",
        "server-enc.key",
        "-passout",
        "pass:" + PASSWORD,
        cwd=d,
    )
    # RSA with a PKCS#1 key.
    _openssl("genrsa", "-traditional", "-out", "server-rsa.key", "2048", cwd=d)
    _issue(d, "server-rsa", "server-rsa.key", "/CN=localhost", "server_ext")
    # Certificate and key in one file (no --ssl-keyfile).
    with open(os.path.join(d, "server-combined.pem"), "w") as out:
        for name in ("server.pem", "server.key"):
            with open(os.path.join(d, name)) as f:
                out.write(f.read())
    # Expired a year ago.
    _ec_key("expired.key", d)
    _issue(
        d,
        "expired",
        "expired.key",
        "/CN=localhost",
        "server_ext",
        dates=("200101000000Z", "210101000000Z"),
    )
    # Valid, but for another host name.
    _ec_key("otherhost.key", d)
    _issue(
        d, "otherhost", "otherhost.key", "/CN=other.example", "server_ext", san="DNS:other.example"
    )
    # A key that belongs to no certificate here (mismatch test).
    _ec_key("stranger.key", d)
    # Client certificate.
    _ec_key("client.key", d)
    _issue(d, "client", "client.key", CLIENT_SUBJECT, "client_ext", san="DNS:client")
    # A client certificate from a CA the server does not trust.
    _ec_key("rogue-ca.key", d)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "rogue-ca.key",
        "-subj",
        "/CN=Rogue CA",
        "-days",
        "30",
        "-out",
        "rogue-ca.pem",
        cwd=d,
    )
    _ec_key("rogue-client.key", d)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "rogue-client.key",
        "-subj",
        "/CN=rogue",
        "-days",
        "30",
        "-out",
        "rogue-client.pem",
        cwd=d,
    )


_CACHE = {}


def certs():
    """The session's certificates (generated on first use, removed at exit)."""
    if "certs" not in _CACHE:
        d = tempfile.mkdtemp(prefix="ferrocorn-certs-")
        atexit.register(shutil.rmtree, d, True)
        generate(d)
        _CACHE["certs"] = Certs(d)
    return _CACHE["certs"]
