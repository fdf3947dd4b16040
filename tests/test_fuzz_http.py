"""Socket-level mutation fuzzer (issue #7): ~20 valid HTTP/1.1 requests (GET, POST with
Content-Length, chunked, pipelined pairs, Expect: 100-continue) mutated by byte flips,
truncation, duplicated header lines, CR/LF insertion and removal, huge lengths and random
bytes, from a fixed list of seeds (deterministic).

Every connection must end with a response or a close within LIVENESS_TIMEOUT (a bound on
hanging, not a performance assertion), and the server must stay alive and answer a normal
request afterwards. A client that stops sending but keeps its socket open may legitimately be
waited for, so after the server goes quiet the client half-closes: from then on the server must
close within the bound. The outcome of each connection (the first response's status class, or
"close" when nothing came back) is counted and printed.
"""

import collections
import random
import re
import socket

import pytest

from tests.support.helpers import RawConnection, start_server

LIVENESS_TIMEOUT = 10.0
SEEDS = list(range(1, 13))  # 12 seeds x 25 cases = 300 mutated exchanges
CASES_PER_SEED = 25

H = b"Host: test\r\n"
BASE = [
    b"GET / HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /hello?x=1&y=%20 HTTP/1.1\r\n" + H + b"Accept: */*\r\nUser-Agent: fuzz\r\n\r\n",
    b"HEAD /hello HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /hello HTTP/1.0\r\n\r\n",
    b"GET /hello HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n",
    b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: 5\r\n\r\nhello",
    b"POST /echo HTTP/1.1\r\n" + H + b"Content-Type: text/plain\r\nContent-Length: 0\r\n\r\n",
    b"PUT /echo HTTP/1.1\r\n" + H + b"Content-Length: 11\r\n\r\nhello world",
    b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
    b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n",
    b"POST /echo HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\nContent-Length: 4\r\n\r\nbody",
    b"POST /echo HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"4\r\nbody\r\n0\r\n\r\n",
    b"GET /hello HTTP/1.1\r\n" + H + b"\r\nGET /hello HTTP/1.1\r\n" + H + b"\r\n",
    b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: 3\r\n\r\nabc"
    b"GET /hello HTTP/1.1\r\n" + H + b"\r\n",
    b"POST /echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"
    b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: 2\r\n\r\nok",
    b"GET /hello HTTP/1.1\r\n"
    + H
    + b"\r\nGET /hello HTTP/1.1\r\n"
    + H
    + b"Connection: close\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\n" + H + b"\r\n",
    b"GET http://test/hello HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /hello HTTP/1.1\r\n" + H + b"Cookie: a=b; c=d\r\nX-Many: 1\r\nX-Many: 2\r\n\r\n",
    b"DELETE /echo HTTP/1.1\r\n" + H + b"Content-Length: 1\r\n\r\nx",
]


def _lines(data):
    return data.split(b"\r\n")


def mutate(rng, data):
    """One to three random mutations of ``data``."""
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(9)
        if op == 0 and data:  # byte flips
            buf = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(buf))
                buf[i] ^= 1 << rng.randrange(8)
            data = bytes(buf)
        elif op == 1 and data:  # truncation
            data = data[: rng.randrange(len(data))]
        elif op == 2:  # duplicate a header line
            lines = _lines(data)
            if len(lines) > 2:
                i = rng.randrange(1, len(lines) - 1)
                lines.insert(i, lines[i])
                data = b"\r\n".join(lines)
        elif op == 3:  # CR or LF insertion
            i = rng.randrange(len(data) + 1)
            data = data[:i] + rng.choice([b"\r", b"\n", b"\r\n", b"\n\n", b"\r\r"]) + data[i:]
        elif op == 4:  # CR or LF removal
            idx = [i for i, c in enumerate(data) if c in (13, 10)]
            if idx:
                i = rng.choice(idx)
                data = data[:i] + data[i + 1 :]
        elif op == 5:  # huge lengths
            huge = rng.choice(
                [
                    b"99999999999999999999999",
                    b"18446744073709551616",
                    b"4294967296",
                    b"-1",
                    b"0x10",
                    b"1e3",
                    b"fffffffffffffffff",
                ]
            )
            if b"Content-Length: " in data:
                start = data.index(b"Content-Length: ") + 16
                end = data.find(b"\r\n", start)
                data = data[:start] + huge + data[end:]
            elif b"chunked\r\n\r\n" in data:
                start = data.index(b"chunked\r\n\r\n") + 11
                end = data.find(b"\r\n", start)
                data = data[:start] + huge + data[end:]
            else:
                data = data.replace(b"\r\n\r\n", b"\r\nContent-Length: " + huge + b"\r\n\r\n", 1)
        elif op == 6:  # random bytes
            i = rng.randrange(len(data) + 1)
            data = (
                data[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))) + data[i:]
            )
        elif op == 7:  # a very long header line
            data = data.replace(
                b"\r\n", b"\r\nX-Long: " + b"a" * rng.choice([100, 9000, 70000]) + b"\r\n", 1
            )
        else:  # splice two requests
            other = rng.choice(BASE)
            data = data[: rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1) :]
    return data


STATUS_RE = re.compile(rb"HTTP/1\.[01] (\d{3})")


def exchange(port, data, idle=0.2):
    """Sends ``data`` and reads until the server goes quiet (``idle`` s) or closes; if it is
    still open, half-closes (the client has nothing more to send) and then the server must close
    within LIVENESS_TIMEOUT. Returns the status of the first response, or "close"."""
    out = bytearray()
    with RawConnection(port, timeout=idle) as conn:
        try:
            conn.send(data)
        except OSError:
            pass  # the server may have answered and closed already
        eof = False
        while not eof:
            try:
                piece = conn.sock.recv(65536)
            except socket.timeout:
                break
            except OSError:
                piece = b""
            eof = not piece
            out += piece
        if not eof:
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            conn.sock.settimeout(LIVENESS_TIMEOUT)
            while True:
                try:
                    piece = conn.sock.recv(65536)
                except socket.timeout:
                    raise AssertionError(
                        "connection not closed within %.0fs after the client's "
                        "EOF for %r (got %r)" % (LIVENESS_TIMEOUT, data[:300], bytes(out[:300]))
                    ) from None
                except OSError:
                    break
                if not piece:
                    break
                out += piece
    if not out:
        return "close"
    assert STATUS_RE.match(out), "not an HTTP response for %r: %r" % (data[:300], bytes(out[:300]))
    statuses = [int(m.group(1)) for m in STATUS_RE.finditer(out)]
    final = [st for st in statuses if st >= 200]  # skip 100 Continue
    return final[0] if final else statuses[0]


def bucket(status):
    return status if status == "close" else "%dxx" % (status // 100)


@pytest.fixture(scope="module")
def server():
    with start_server("tests.apps.basic:app", "--no-access-log", "--timeout-keep-alive", "2") as s:
        yield s


def assert_healthy(server):
    assert server.proc.poll() is None, "server died:\n" + server.output()[-3000:]
    with RawConnection(server.port, timeout=LIVENESS_TIMEOUT) as conn:
        conn.send(b"GET /hello HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        resp = conn.read_response()
    assert resp is not None and resp.status == 200, resp


def test_unmutated_requests_are_answered(server):
    for data in BASE:
        status = exchange(server.port, data)
        assert status != "close" and 200 <= status < 500, (data, status)  # OPTIONS * -> 404
    assert_healthy(server)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", SEEDS)
def test_mutated_requests(server, seed):
    rng = random.Random(seed)
    counts = collections.Counter()
    for _ in range(CASES_PER_SEED):
        data = mutate(rng, rng.choice(BASE))
        counts[bucket(exchange(server.port, data))] += 1
        assert server.proc.poll() is None, "server died after %r:\n%s" % (
            data[:300],
            server.output()[-3000:],
        )
    assert_healthy(server)
    print("\nseed %d: %d cases, outcomes %s" % (seed, CASES_PER_SEED, dict(sorted(counts.items()))))
    out = server.output()
    for bad in ("panicked", "SystemError", "Fatal Python error"):
        assert bad not in out, out[-3000:]
