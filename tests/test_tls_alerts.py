"""TLS closes properly (RFC 8446 §5.2, §6; RFC 5246 §7.2): after the handshake, a fatal error
sends its alert before the socket closes, a graceful close sends close_notify, and an HTTP/1.x
response goes out in as few records as its size allows.

A raw TLS client: Python's ``ssl.SSLObject`` over memory BIOs does the handshake and the
cryptography, the test owns the socket, so it can corrupt a record, send an oversized one or
a handshake message in the clear, and then hand every byte the server sent back to the TLS
object, which names the alert it finds (alerts after the handshake are encrypted)."""

import os
import socket
import ssl
import struct
import subprocess

import pytest

from tests.support.tls_certs import certs

APP = "tests.apps.basic:app"

pytestmark = pytest.mark.skipif(
    subprocess.run(["openssl", "version"], capture_output=True).returncode != 0,
    reason="needs the openssl command line tool",
)

VERSIONS = {"tls1.2": ssl.TLSVersion.TLSv1_2, "tls1.3": ssl.TLSVersion.TLSv1_3}


@pytest.fixture(scope="module")
def tls_server():
    from tests.support.helpers import start_server

    c = certs()
    flags = ("--ssl-certfile", c.path("server.pem"), "--ssl-keyfile", c.path("server.key"))
    with start_server(APP, *flags) as server:
        yield server, c


class RawTls:
    """A TLS client whose records pass through the test's hands."""

    def __init__(self, port, cafile, version, keylog=None):
        ctx = ssl.create_default_context(cafile=cafile)
        ctx.minimum_version = ctx.maximum_version = version
        if keylog:
            ctx.keylog_filename = keylog
        ctx.set_alpn_protocols(["http/1.1"])
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outgoing.read())
                data = self.sock.recv(65536)
                assert data, "server closed during the handshake"
                self.incoming.write(data)
        self.sock.sendall(self.outgoing.read())  # the client's Finished (TLS 1.3)

    def records(self, plaintext):
        """``plaintext`` encrypted: the raw records, not sent."""
        self.tls.write(plaintext)
        return self.outgoing.read()

    def read_all_raw(self):
        """Every byte until the server closes (a reset ends it too)."""
        chunks = []
        while True:
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, TimeoutError, socket.timeout):
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)

    def outcome(self, raw):
        """What the TLS object makes of the server's bytes, as (how it ended, data before):
        ('alert', reason), ('eof', data) without a close_notify, ('close_notify', data)."""
        self.incoming.write(raw)
        self.incoming.write_eof()
        data = b""
        while True:
            try:
                piece = self.tls.read(65536)
            except ssl.SSLZeroReturnError:
                return ("close_notify", data)
            except ssl.SSLEOFError:
                return ("eof", data)
            except ssl.SSLError as exc:
                return ("alert", exc.reason or str(exc))
            if not piece:
                # Python's TLS object reads a close_notify as b"" (a clean end).
                return ("close_notify", data)
            data += piece

    def close(self):
        self.sock.close()


def hkdf_expand_label(hash_cls, secret, label, length):
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    full = b"tls13 " + label
    info = struct.pack("!HB", length, len(full)) + full + b"\x00"
    return HKDFExpand(hash_cls(), length, info).derive(secret)


class Tls13Sealer:
    """Seals records of the client's choosing with its TLS 1.3 application traffic keys
    (from the key log): what no TLS library sends, such as a record whose plaintext is larger
    than a record may hold, or a malformed KeyUpdate. Sequence numbers start at 0: use it
    before the TLS object sends any application data."""

    def __init__(self, keylog, cipher):
        from cryptography.hazmat.primitives import hashes

        secret = None
        with open(keylog) as f:
            for line in f:
                if line.startswith("CLIENT_TRAFFIC_SECRET_0 "):
                    secret = bytes.fromhex(line.split()[2])
        assert secret, "no client traffic secret in the key log"
        if cipher == "TLS_AES_256_GCM_SHA384":
            hash_cls, key_len = hashes.SHA384, 32
        else:
            assert cipher == "TLS_AES_128_GCM_SHA256", cipher
            hash_cls, key_len = hashes.SHA256, 16
        self.key = hkdf_expand_label(hash_cls, secret, b"key", key_len)
        self.iv = hkdf_expand_label(hash_cls, secret, b"iv", 12)
        self.seq = 0

    def seal(self, content_type, plaintext):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        inner = plaintext + bytes([content_type])
        header = struct.pack("!BHH", 23, 0x0303, len(inner) + 16)
        nonce = bytes(a ^ b for a, b in zip(self.iv, self.seq.to_bytes(12, "big")))
        self.seq += 1
        return header + AESGCM(self.key).encrypt(nonce, inner, header)


def sealer_client(server, c, tmp_path):
    keylog = str(tmp_path / "keys.log")
    client = RawTls(server.port, c.ca_pem, VERSIONS["tls1.3"], keylog=keylog)
    if not os.path.exists(keylog):  # PyPy 3.9's ssl writes no key log
        client.close()
        pytest.skip("this Python's ssl module writes no key log")
    return client, Tls13Sealer(keylog, client.tls.cipher()[0])


def split_records(raw):
    """``raw`` cut into whole TLS records."""
    records, i = [], 0
    while i + 5 <= len(raw):
        (length,) = struct.unpack("!H", raw[i + 3 : i + 5])
        records.append(raw[i : i + 5 + length])
        i += 5 + length
    return records


GET = b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_corrupted_record_gets_bad_record_mac(tls_server, version):
    server, c = tls_server
    client = RawTls(server.port, c.ca_pem, VERSIONS[version])
    try:
        record = bytearray(client.records(GET))
        record[-3] ^= 0x55  # inside the authentication tag / MAC
        client.sock.sendall(bytes(record))
        outcome = client.outcome(client.read_all_raw())
    finally:
        client.close()
    assert outcome[0] == "alert" and "BAD_RECORD_MAC" in outcome[1], outcome


def test_sealing_works(tls_server, tmp_path):
    """The hand-sealed records are valid: a request sealed by hand is answered (so the
    failures below are the ones intended)."""
    server, c = tls_server
    client, sealer = sealer_client(server, c, tmp_path)
    try:
        client.sock.sendall(
            sealer.seal(23, b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        )
        outcome = client.outcome(client.read_all_raw())
    finally:
        client.close()
    assert outcome[0] == "close_notify" and outcome[1].endswith(b"hello world"), outcome


def test_oversized_record_gets_record_overflow(tls_server, tmp_path):
    """RFC 8446 §5.1/§5.2: a record whose plaintext is longer than 2^14 bytes: record_overflow."""
    server, c = tls_server
    client, sealer = sealer_client(server, c, tmp_path)
    try:
        client.sock.sendall(sealer.seal(23, b"G" * ((1 << 14) + 1)))
        outcome = client.outcome(client.read_all_raw())
    finally:
        client.close()
    assert outcome[0] == "alert" and "RECORD_OVERFLOW" in outcome[1], outcome


def test_bad_key_update_gets_illegal_parameter(tls_server, tmp_path):
    """RFC 8446 §4.6.3: a KeyUpdate whose request_update is neither 0 nor 1 is answered with
    illegal_parameter."""
    server, c = tls_server
    client, sealer = sealer_client(server, c, tmp_path)
    try:
        client.sock.sendall(sealer.seal(22, b"\x18\x00\x00\x01\x05"))
        outcome = client.outcome(client.read_all_raw())
    finally:
        client.close()
    assert outcome[0] == "alert" and "ILLEGAL_PARAMETER" in outcome[1], outcome


def test_plaintext_key_update_gets_an_alert(tls_server):
    """A KeyUpdate sent in the clear after a TLS 1.3 handshake (a handshake record outside
    the encryption): a fatal error, which the peer must be told of."""
    server, c = tls_server
    client = RawTls(server.port, c.ca_pem, VERSIONS["tls1.3"])
    try:
        key_update = b"\x18\x00\x00\x01\x00"  # KeyUpdate, update_not_requested
        client.sock.sendall(struct.pack("!BHH", 22, 0x0303, len(key_update)) + key_update)
        outcome = client.outcome(client.read_all_raw())
    finally:
        client.close()
    assert outcome[0] == "alert", outcome


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_graceful_close_sends_close_notify(tls_server, version):
    server, c = tls_server
    client = RawTls(server.port, c.ca_pem, VERSIONS[version])
    try:
        client.sock.sendall(
            client.records(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        )
        raw = client.read_all_raw()
        outcome = client.outcome(raw)
    finally:
        client.close()
    assert outcome[0] == "close_notify", outcome
    assert outcome[1].startswith(b"HTTP/1.1 200 OK") and outcome[1].endswith(b"hello world")


@pytest.mark.parametrize("version", sorted(VERSIONS))
@pytest.mark.parametrize("http", ["1.0", "1.1"])
def test_small_response_is_one_record(tls_server, version, http):
    """Head and body of a small response in one TLS record (each record costs a header, a
    tag and, for the reader, a decryption call)."""
    server, c = tls_server
    client = RawTls(server.port, c.ca_pem, VERSIONS[version])
    try:
        request = b"GET /hello HTTP/%s\r\nHost: x\r\nConnection: close\r\n\r\n" % http.encode()
        client.sock.sendall(client.records(request))
        raw = client.read_all_raw()
        # Decrypted record by record: which records carry response bytes (TLS 1.3 session
        # tickets and close_notify are records of the same outer type, and carry none).
        carrying, response = [], b""
        for record in split_records(raw):
            client.incoming.write(record)
            try:
                piece = client.tls.read(65536)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                continue
            if piece:  # b"": the close_notify
                carrying.append(len(piece))
            response += piece
    finally:
        client.close()
    assert response.startswith(b"HTTP/1.1 200 OK") and response.endswith(b"hello world")
    assert carrying == [len(response)], carrying
