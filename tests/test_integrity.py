"""Integrity at size (issue #7): big uploads and downloads arrive bit-exact with bounded server
memory, and thousands of concurrent keep-alive connections are held and served twice.

Sizes: 256 MiB by default, 1 GiB with FERROCORN_SLOW=1.  10,000 connections always (about
10-15 s here on CPython and PyPy).  The figures (peak RSS growth, sizes, per-connection memory)
are printed (``pytest -s``).
"""

import hashlib
import json
import os
import resource
import selectors
import socket
import threading
import time

import pytest

from tests.apps.common import iter_pattern, pattern_sha256
from tests.support import hostile
from tests.support.helpers import RawConnection, request_bytes, start_server, wait_until

SLOW = os.environ.get("FERROCORN_SLOW", "") not in ("", "0", "false", "no")
BIG = (1 << 30) if SLOW else (256 << 20)
CONNECTIONS = 10000
RSS_GROWTH_LIMIT_MB = 200


def vm_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("%s missing" % field)


class PeakRss:
    """Peak resident memory of ``pid`` over a ``with`` block: resets VmHWM (clear_refs 5)
    where the kernel lets us, and samples VmRSS in a thread as well."""

    def __init__(self, pid):
        self.pid = pid
        self.peak_kb = 0
        self._stop = threading.Event()
        self._hwm_reset = False

    def __enter__(self):
        self.base_kb = vm_kb(self.pid, "VmRSS")
        try:
            with open("/proc/%d/clear_refs" % self.pid, "w") as f:
                f.write("5")
            self._hwm_reset = True
        except OSError:
            pass
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            try:
                self.peak_kb = max(self.peak_kb, vm_kb(self.pid, "VmRSS"))
            except (OSError, AssertionError):
                return

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        if self._hwm_reset:
            self.peak_kb = max(self.peak_kb, vm_kb(self.pid, "VmHWM"))

    @property
    def growth_mb(self):
        return (self.peak_kb - self.base_kb) / 1024.0

    def describe(self):
        return "server RSS %.1f MB before, peak %.1f MB (%s), growth %.1f MB" % (
            self.base_kb / 1024.0,
            self.peak_kb / 1024.0,
            "VmHWM" if self._hwm_reset else "sampled VmRSS",
            self.growth_mb,
        )


@pytest.fixture(scope="module")
def server():
    with start_server("tests.apps.hostile_app:app", "--no-access-log") as s:
        yield s


def _warm(server):
    for _ in range(3):
        hostile.get_json(server.port, "/tasks")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_big_upload_intact_and_memory_bounded(server, chunked):
    size = BIG if not chunked else BIG // 4
    _warm(server)
    headers = [("Transfer-Encoding", "chunked")] if chunked else [("Content-Length", str(size))]
    with PeakRss(server.pid) as rss, RawConnection(server.port, timeout=120) as conn:
        conn.send(request_bytes("POST", "/upload_sha", headers))
        for piece in iter_pattern(size, 1 << 20):
            if chunked:
                conn.sock.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            else:
                conn.sock.sendall(piece)
        if chunked:
            conn.sock.sendall(b"0\r\n\r\n")
        resp = conn.read_response()
    assert resp.status == 200, resp
    result = json.loads(resp.body)
    assert result["size"] == size
    assert result["sha256"] == pattern_sha256(size)
    print(
        "\nupload %d MiB (%s): %s"
        % (size >> 20, "chunked" if chunked else "content-length", rss.describe())
    )
    assert rss.growth_mb < RSS_GROWTH_LIMIT_MB, rss.describe()


@pytest.mark.timeout(600)
def test_big_download_intact_and_memory_bounded(server):
    size = BIG
    _warm(server)
    h = hashlib.sha256()
    received = 0
    with PeakRss(server.pid) as rss, RawConnection(server.port, timeout=120) as conn:
        conn.send(request_bytes("GET", "/stream?size=%d&chunk=%d" % (size, 1 << 20)))
        head = conn.read_head()
        assert head is not None and head[1] == 200, head
        headers = dict((k.lower(), v) for k, v in head[3])
        assert headers.get("transfer-encoding") == "chunked", headers
        # decode the chunked stream incrementally (no need to keep 1 GiB around)
        while True:
            line = conn.read_line()
            n = int(line.split(b";")[0], 16)
            if n == 0:
                assert conn.read_line() == b""
                break
            while n:
                if not conn.buf:
                    assert conn.fill(1 << 20), "EOF in the middle of the body"
                take = min(n, len(conn.buf))
                h.update(bytes(conn.buf[:take]))
                del conn.buf[:take]
                received += take
                n -= take
            assert conn.read_exact(2) == b"\r\n"
    assert received == size
    assert h.hexdigest() == pattern_sha256(size)
    print("\ndownload %d MiB: %s" % (size >> 20, rss.describe()))
    assert rss.growth_mb < RSS_GROWTH_LIMIT_MB, rss.describe()


# ---------------------------------------------------------------- many connections


def _raise_nofile(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        try:  # root (CAP_SYS_RESOURCE) may raise the hard limit too
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
            return
        except (ValueError, OSError):
            pytest.skip("RLIMIT_NOFILE hard limit %d < %d needed" % (hard, needed))
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


REQUEST = request_bytes("GET", "/hello")


def _connect_all(count, port, wave=500, timeout=60.0):
    sel = selectors.DefaultSelector()
    socks = []
    try:
        while len(socks) < count:
            pending = set()
            for _ in range(min(wave, count - len(socks))):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                err = s.connect_ex(("127.0.0.1", port))
                assert err in (0, 115), os.strerror(err)  # EINPROGRESS
                socks.append(s)
                pending.add(s)
                sel.register(s, selectors.EVENT_WRITE)
            deadline = time.monotonic() + timeout
            while pending:
                assert time.monotonic() < deadline, "%d connects pending" % len(pending)
                for key, _ in sel.select(1.0):
                    s = key.fileobj
                    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    assert err == 0, "connect failed: %s" % os.strerror(err)
                    sel.unregister(s)
                    pending.discard(s)
    finally:
        sel.close()
    return socks


def _round(socks, timeout=120.0):
    """Send one request on every socket, then read every response; returns the count of
    intact 'hello world' responses."""
    for s in socks:
        s.sendall(REQUEST)  # tiny: fits the empty send buffer of a non-blocking socket
    sel = selectors.DefaultSelector()
    bufs = {}
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
        bufs[s] = bytearray()
    ok = 0
    deadline = time.monotonic() + timeout
    try:
        remaining = len(socks)
        while remaining:
            assert time.monotonic() < deadline, "%d responses missing" % remaining
            for key, _ in sel.select(1.0):
                s = key.fileobj
                data = s.recv(65536)
                assert data, "server closed a keep-alive connection"
                buf = bufs[s]
                buf += data
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    continue
                head = bytes(buf[:end]).lower()
                length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
                if len(buf) < end + 4 + length:
                    continue
                assert head.startswith(b"http/1.1 200"), head
                assert bytes(buf[end + 4 : end + 4 + length]) == b"hello world"
                assert len(buf) == end + 4 + length, "extra bytes after the response"
                sel.unregister(s)
                ok += 1
                remaining -= 1
    finally:
        sel.close()
    return ok


@pytest.mark.timeout(900)
def test_many_concurrent_keep_alive_connections():
    count = CONNECTIONS
    _raise_nofile(count + 1000)  # the server process inherits the raised limit
    server = start_server(
        "tests.apps.hostile_app:app",
        "--no-access-log",
        "--timeout-keep-alive",
        "300",
        "--header-read-timeout",
        "300",
    )
    socks = []
    try:
        watch = hostile.ServerWatch(server).take_baseline()
        base_rss = vm_kb(server.pid, "VmRSS")
        t0 = time.monotonic()
        socks = _connect_all(count, server.port)
        t_connect = time.monotonic() - t0
        # every connection is held open by the server at the same time
        assert wait_until(lambda: watch.fds() >= watch.base_fds + count, timeout=60), (
            "server holds %d fds, expected >= %d" % (watch.fds(), watch.base_fds + count)
        )
        first = _round(socks)
        assert first == count
        second = _round(socks)
        assert second == count
        t_total = time.monotonic() - t0
        held_rss = vm_kb(server.pid, "VmRSS")
        print(
            "\n%d connections: connect %.1fs, two rounds done at %.1fs; server RSS %.1f MB "
            "idle -> %.1f MB holding them (%.1f KB per connection)"
            % (
                count,
                t_connect,
                t_total,
                base_rss / 1024.0,
                held_rss / 1024.0,
                (held_rss - base_rss) / float(count),
            )
        )
        for s in socks:
            s.close()
        socks = []
        watch.assert_recovered(timeout=30)
    finally:
        for s in socks:
            s.close()
        server.close()
