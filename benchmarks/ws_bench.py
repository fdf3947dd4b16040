#!/usr/bin/env python3
"""WebSocket echo benchmark: ferrocorn vs granian vs uvicorn (standalone; stdlib only).

    python3 benchmarks/ws_bench.py                      # all servers, both scenarios, 3 rounds
    python3 benchmarks/ws_bench.py --servers ferrocorn --rounds 1 --duration 3
    python3 benchmarks/ws_bench.py --client-ceiling     # also measure the websockets-library client
    python3 benchmarks/ws_bench.py --servers ferrocorn --transports h1,h2   # WS over HTTP/2 too

Every server runs the same pure-ASGI echo app (``app`` below), one worker pinned to CPU 0
(``taskset -c 0``); the load generator is pinned to CPU 1. Scenarios:

* ``text``:  N connections (default 64), each sends a small text message and waits for its echo,
  again and again, for a fixed duration -> messages/s (round trips).
* ``1mib``:  N connections (default 8), 1 MiB binary messages round-trip -> MB/s (echoed payload).

``--transports h1,h2`` also runs ferrocorn's sockets over HTTP/2 (RFC 8441: one extended
CONNECT stream per connection, h2c with prior knowledge), framed by a minimal HTTP/2 client
here (no HPACK decoding: the answer's first field must be the static ``:status: 200``), and
reports the two transports side by side with the server CPU µs per message; each HTTP/2 round
runs right after the HTTP/1.1 round it is compared with, and the ratio is also given pair by
pair.

The load generator is a single-threaded epoll loop over raw sockets that sends one pre-built,
pre-masked frame per round trip and only parses frame headers of the echoes (a Python client
built on the ``websockets`` library is several times slower and would be the bottleneck; see
``--client-ceiling``). A fresh server process is started for every round; each round has a
warm-up that is not counted; the reported figure is the median of the rounds. The load
generator also reads the CPU time the server process tree and itself used in the measured
window, which shows which side was saturated.

Servers: ferrocorn from this checkout (``--ferrocorn-pythonpath``, default ``python/``) run by
``benchmarks/.venv/bin/python`` (which has uvloop), granian and uvicorn from
``benchmarks/.venv`` (``benchmarks/requirements.txt``). Results go to
``benchmarks/WS_RESULTS.md`` (``--out``).
"""

import argparse
import json
import os
import platform
import random
import select
import shlex
import socket
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
VENV_BIN = os.path.join(HERE, ".venv", "bin")
APP_TARGET = "benchmarks.ws_bench:app"
SERVER_CPU = "0"
CLIENT_CPU = "1"
MiB = 1 << 20


# ---------------------------------------------------------------------------- the app


async def app(scope, receive, send):
    """Pure ASGI echo: every WebSocket message is sent back as is."""
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return
            if message.get("text") is not None:
                await send({"type": "websocket.send", "text": message["text"]})
            else:
                await send({"type": "websocket.send", "bytes": message["bytes"]})
    elif scope["type"] == "http":
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ws echo"})
    elif scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return


# ---------------------------------------------------------------------------- load generator


def client_frame(opcode, payload):
    key = bytes(random.getrandbits(8) for _ in range(4))
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    repeated = (key * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big")
    return head + key + masked


def handshake(port, path="/"):
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(
        (
            "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n" % (path, port)
        ).encode()
    )
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("handshake: connection closed")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError("handshake refused: %r" % head[:200])
    sock.setblocking(False)
    return sock, rest


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_DATA, H2_HEADERS, H2_RST, H2_SETTINGS, H2_PING, H2_GOAWAY, H2_WINDOW = 0, 1, 3, 4, 6, 7, 8
H2_BIG_WINDOW = (1 << 31) - 1
H2_STREAM = 1  # each connection's one WebSocket stream


def h2_frame(kind, flags, stream, payload=b""):
    return struct.pack("!I", len(payload))[1:] + struct.pack("!BBI", kind, flags, stream) + payload


def hpack_literal(name, value):
    """A literal field without indexing, new name, no Huffman (RFC 7541 §6.2.2)."""
    name, value = name.encode(), value.encode()
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def h2_read_frame(sock, buf):
    """One whole frame from a blocking socket: (type, flags, stream, payload, rest of buf)."""
    while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("h2 handshake: connection closed")
        buf += chunk
    n = int.from_bytes(buf[:3], "big")
    kind, flags, stream = buf[3], buf[4], struct.unpack("!I", buf[5:9])[0] & 0x7FFFFFFF
    return kind, flags, stream, buf[9 : 9 + n], buf[9 + n :]


def h2_handshake(port, path="/"):
    """h2c prior knowledge, the server's SETTINGS (which must enable extended CONNECT), then
    the CONNECT with :protocol websocket on stream 1 answered 200. Returns (socket, bytes
    after the answer, the server's stream window, its connection window, its max frame
    size)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Our windows as large as allowed, so the server never waits for a WINDOW_UPDATE.
    settings = struct.pack("!HI", 0x4, H2_BIG_WINDOW)
    sock.sendall(
        H2_PREFACE
        + h2_frame(H2_SETTINGS, 0, 0, settings)
        + h2_frame(H2_WINDOW, 0, 0, struct.pack("!I", H2_BIG_WINDOW - 65535))
    )
    buf = b""
    window, conn_window, max_frame, connect_ok = 65535, 65535, 16384, False
    updates = 0  # WINDOW_UPDATE increments for our stream, from before it opened too

    def took(kind, stream, payload):
        nonlocal conn_window, updates
        if kind == H2_WINDOW:
            increment = struct.unpack("!I", payload)[0] & 0x7FFFFFFF
            if stream == 0:
                conn_window += increment
            else:
                updates += increment

    while True:
        kind, flags, stream, payload, buf = h2_read_frame(sock, buf)
        took(kind, stream, payload)
        if kind == H2_SETTINGS and not flags & 1:
            for i in range(0, len(payload), 6):
                ident, value = struct.unpack("!HI", payload[i : i + 6])
                if ident == 0x4:
                    window = value
                elif ident == 0x5:
                    max_frame = value
                elif ident == 0x8:
                    connect_ok = value == 1
            sock.sendall(h2_frame(H2_SETTINGS, 1, 0))
            break
    if not connect_ok:
        raise RuntimeError("the server did not enable extended CONNECT (RFC 8441)")
    block = b"".join(
        hpack_literal(n, v)
        for n, v in [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "127.0.0.1:%d" % port),
            ("sec-websocket-version", "13"),
        ]
    )
    sock.sendall(h2_frame(H2_HEADERS, 0x4, H2_STREAM, block))
    while True:
        kind, flags, stream, payload, buf = h2_read_frame(sock, buf)
        took(kind, stream, payload)
        if kind == H2_HEADERS and stream == H2_STREAM:
            if not payload.startswith(b"\x88"):  # indexed :status 200
                raise RuntimeError("h2 CONNECT refused: %r" % payload[:40])
            break
        if kind in (H2_RST, H2_GOAWAY):
            raise RuntimeError("h2 CONNECT failed: frame type %d" % kind)
    sock.setblocking(False)
    return sock, buf, window + updates, conn_window, max_frame


class Conn:
    __slots__ = (
        "sock",
        "fd",
        "hdr",
        "remaining",
        "opcode",
        "out",
        "out_pos",
        "h2buf",
        "h2_pending",
        "h2_window",
        "h2_conn_window",
        "h2_unacked",
    )

    def __init__(self, sock):
        self.sock = sock
        self.fd = sock.fileno()
        self.hdr = b""  # an incomplete frame header carried over
        self.remaining = 0  # payload bytes of the current frame still to come
        self.opcode = -1
        self.out = None  # memoryview of a frame being written
        self.out_pos = 0
        # HTTP/2 only: bytes of an incomplete h2 frame, DATA payloads waiting for window, the
        # server's stream and connection windows, received bytes not yet given back.
        self.h2buf = b""
        self.h2_pending = []
        self.h2_window = 0
        self.h2_conn_window = 65535
        self.h2_unacked = 0


def proc_tree_cpu(pid):
    """utime+stime (seconds) of ``pid`` and its descendants, from /proc."""
    if not pid:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    parents = {}
    times = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    tree = {pid}
    changed = True
    while changed:
        changed = False
        for p, pp in parents.items():
            if pp in tree and p not in tree:
                tree.add(p)
                changed = True
    return sum(times.get(p, 0.0) for p in tree)


def ws_frames(c, data):
    """Feeds received WebSocket bytes to ``c``'s frame parser; the opcodes of the frames
    completed, in order."""
    done = []
    if c.hdr:
        data = c.hdr + data
        c.hdr = b""
    pos, end = 0, len(data)
    while pos < end:
        if c.remaining:
            take = min(c.remaining, end - pos)
            c.remaining -= take
            pos += take
            if c.remaining:
                break
        else:
            if end - pos < 2:
                c.hdr = data[pos:]
                break
            b0 = data[pos]
            n = data[pos + 1] & 0x7F
            hl = 2
            if n == 126:
                hl = 4
                if end - pos < 4:
                    c.hdr = data[pos:]
                    break
                n = (data[pos + 2] << 8) | data[pos + 3]
            elif n == 127:
                hl = 10
                if end - pos < 10:
                    c.hdr = data[pos:]
                    break
                n = int.from_bytes(data[pos + 2 : pos + 10], "big")
            pos += hl
            c.opcode = b0 & 0x0F
            c.remaining = n
            if n and pos < end:
                continue
            if n:
                break
        done.append(c.opcode)  # a whole frame is in
    return done


def h2_data_frames(frame, max_frame):
    """The WebSocket frame cut into DATA frames of at most ``max_frame`` payload bytes:
    (h2 frame bytes, flow-controlled length) pairs."""
    return [
        (h2_frame(H2_DATA, 0, H2_STREAM, frame[i : i + max_frame]), len(frame[i : i + max_frame]))
        for i in range(0, len(frame), max_frame)
    ]


def h2_unwrap(c, data):
    """Takes the HTTP/2 frames in ``data``: the WebSocket bytes of our stream's DATA frames,
    with window updates and SETTINGS/PING answered (returned as bytes to send)."""
    if c.h2buf:
        data = c.h2buf + data
        c.h2buf = b""
    ws = []
    reply = []
    pos, end = 0, len(data)
    while end - pos >= 9:
        n = int.from_bytes(data[pos : pos + 3], "big")
        if end - pos < 9 + n:
            break
        kind, flags = data[pos + 3], data[pos + 4]
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        payload = data[pos + 9 : pos + 9 + n]
        pos += 9 + n
        if kind == H2_DATA:
            if flags & 0x8:  # padded
                payload = payload[1 : len(payload) - payload[0]]
            ws.append(payload)
            c.h2_unacked += n
        elif kind == H2_WINDOW:
            increment = struct.unpack("!I", payload)[0] & 0x7FFFFFFF
            if stream == 0:
                c.h2_conn_window += increment
            else:
                c.h2_window += increment
        elif kind == H2_SETTINGS and not flags & 1:
            reply.append(h2_frame(H2_SETTINGS, 1, 0))
        elif kind == H2_PING and not flags & 1:
            reply.append(h2_frame(H2_PING, 1, 0, payload))
        elif kind in (H2_RST, H2_GOAWAY):
            raise RuntimeError("server sent h2 frame type %d" % kind)
    c.h2buf = data[pos:]
    if c.h2_unacked > 1 << 30:
        increment = struct.pack("!I", c.h2_unacked)
        reply.append(h2_frame(H2_WINDOW, 0, 0, increment))
        reply.append(h2_frame(H2_WINDOW, 0, H2_STREAM, increment))
        c.h2_unacked = 0
    return b"".join(ws), b"".join(reply)


def run_raw_client(port, conns, size, warmup, duration, server_pid, transport="h1"):
    """The epoll load generator; returns a result dict."""
    if size < 1024:
        opcode, payload = 0x1, (b"hello websocket " * (size // 16 + 1))[:size]
    else:
        opcode, payload = 0x2, bytes(range(256)) * (size // 256)
    frame = client_frame(opcode, payload)
    h2 = transport == "h2"
    ep = select.epoll()
    table = {}
    chunks = None
    for _ in range(conns):
        if h2:
            sock, rest, window, conn_window, max_frame = h2_handshake(port)
            chunks = h2_data_frames(frame, max_frame)
        else:
            sock, rest = handshake(port)
        c = Conn(sock)
        if h2:
            c.h2buf = rest
            c.h2_window = window
            c.h2_conn_window = conn_window
        elif rest:
            raise RuntimeError("unexpected data after the 101")
        table[c.fd] = c
        ep.register(c.fd, select.EPOLLIN)
    IN, OUT = select.EPOLLIN, select.EPOLLOUT

    def write(c, data):
        if c.out is not None:
            c.out = memoryview(bytes(c.out[c.out_pos :]) + data)
            c.out_pos = 0
            return
        try:
            n = c.sock.send(data)
        except BlockingIOError:
            n = 0
        if n < len(data):
            c.out = memoryview(data)
            c.out_pos = n
            ep.modify(c.fd, IN | OUT)

    def h2_flush(c):
        """Sends the DATA frames the server's windows allow."""
        out = []
        while c.h2_pending:
            data, length = c.h2_pending[0]
            if length > c.h2_window or length > c.h2_conn_window:
                break
            c.h2_window -= length
            c.h2_conn_window -= length
            out.append(data)
            c.h2_pending.pop(0)
        if out:
            write(c, b"".join(out))

    def start_send(c):
        if h2:
            c.h2_pending.extend(chunks)
            h2_flush(c)
        else:
            write(c, frame)

    t0 = time.monotonic()
    t_warm = t0 + warmup
    t_end = t_warm + duration
    counting = False
    messages = 0
    pings = 0
    cpu0 = srv0 = 0.0
    for c in table.values():
        start_send(c)
    now = t0
    while now < t_end:
        for fd, ev in ep.poll(0.05):
            c = table[fd]
            if ev & OUT and c.out is not None:
                try:
                    n = c.sock.send(c.out[c.out_pos :])
                except BlockingIOError:
                    n = 0
                c.out_pos += n
                if c.out_pos >= len(c.out):
                    c.out = None
                    ep.modify(fd, IN)
            if not ev & (IN | select.EPOLLHUP | select.EPOLLERR):
                continue
            try:
                data = c.sock.recv(1 << 18)
            except BlockingIOError:
                continue
            if not data:
                raise RuntimeError("server closed a connection")
            if h2:
                data, reply = h2_unwrap(c, data)
                if reply:
                    write(c, reply)
                if c.h2_pending:
                    h2_flush(c)
            for op in ws_frames(c, data):
                if op == 0x1 or op == 0x2:
                    if counting:
                        messages += 1
                    start_send(c)
                elif op == 0x9:
                    pings += 1
                elif op == 0x8:
                    raise RuntimeError("server sent a close frame")
        now = time.monotonic()
        if not counting and now >= t_warm:
            counting = True
            messages = 0
            cpu0 = time.process_time()
            srv0 = proc_tree_cpu(server_pid)
            t_start = now
    elapsed = now - t_start
    client_cpu = time.process_time() - cpu0
    server_cpu = proc_tree_cpu(server_pid) - srv0
    for c in table.values():
        c.sock.close()
    return {
        "messages": messages,
        "seconds": elapsed,
        "msgs_per_s": messages / elapsed,
        "mb_per_s": messages * size / elapsed / 1e6,
        "client_cpu": client_cpu / elapsed,
        "server_cpu": server_cpu / elapsed,
        "server_us_per_msg": server_cpu / messages * 1e6 if messages else float("nan"),
        "pings": pings,
    }


def run_websockets_client(port, conns, size, warmup, duration, server_pid):
    """The same round trips with the ``websockets`` library (asyncio): its ceiling."""
    import asyncio

    from websockets.asyncio.client import connect

    message = ("hello websocket " * (size // 16 + 1))[:size] if size < 1024 else bytes(size)
    state = {"counting": False, "messages": 0, "stop": False}

    async def one():
        async with connect(
            "ws://127.0.0.1:%d/" % port,
            proxy=None,
            compression=None,
            max_size=None,
            ping_interval=None,
        ) as ws:
            while not state["stop"]:
                await ws.send(message)
                await ws.recv()
                if state["counting"]:
                    state["messages"] += 1

    async def main():
        tasks = [asyncio.ensure_future(one()) for _ in range(conns)]
        await asyncio.sleep(warmup)
        state["counting"] = True
        cpu0, srv0, t0 = time.process_time(), proc_tree_cpu(server_pid), time.monotonic()
        await asyncio.sleep(duration)
        state["counting"] = False
        elapsed = time.monotonic() - t0
        result = {
            "messages": state["messages"],
            "seconds": elapsed,
            "msgs_per_s": state["messages"] / elapsed,
            "mb_per_s": state["messages"] * size / elapsed / 1e6,
            "client_cpu": (time.process_time() - cpu0) / elapsed,
            "server_cpu": (proc_tree_cpu(server_pid) - srv0) / elapsed,
        }
        state["stop"] = True
        await asyncio.wait(tasks, timeout=10)
        return result

    return asyncio.run(main())


# ---------------------------------------------------------------------------- servers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(name, port, args):
    py = os.path.join(VENV_BIN, "python")
    common = ["--host", "127.0.0.1", "--port", str(port)]
    if name == "ferrocorn":
        return (
            [args.ferrocorn_python, "-m", "ferrocorn", APP_TARGET]
            + common
            + ["--no-access-log", "--log-level", "warning"]
        )
    if name == "granian":
        return (
            [os.path.join(VENV_BIN, "granian"), "--interface", "asgi", "--ws"]
            + common
            + [
                "--workers",
                "1",
                "--runtime-mode",
                "st",
                "--runtime-threads",
                "1",
                "--http",
                "1",
                "--no-access-log",
                "--log-level",
                "warning",
                APP_TARGET,
            ]
        )
    if name == "uvicorn":
        return (
            [py, "-m", "uvicorn", APP_TARGET]
            + common
            + ["--ws", "websockets", "--no-access-log", "--log-level", "warning"]
        )
    raise ValueError(name)


def nice_prefix(args):
    return ["nice", "-n", str(args.nice)] if args.nice else []


def start_server(name, args):
    port = free_port()
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if name == "ferrocorn":
        env["PYTHONPATH"] = args.ferrocorn_pythonpath
    argv = nice_prefix(args) + ["taskset", "-c", SERVER_CPU] + server_command(name, port, args)
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited: %s" % (name, proc.stderr.read().decode()[-2000:]))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port, argv
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("%s did not start" % name)


def stop_server(proc):
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


SCENARIOS = {
    "text": dict(
        title="small text messages (32 B) round-trip", size=32, unit="msgs/s", key="msgs_per_s"
    ),
    "1mib": dict(title="1 MiB binary messages round-trip", size=MiB, unit="MB/s", key="mb_per_s"),
}


def loadgen_argv(args, port, pid, scenario, client="raw", transport="h1"):
    conns = args.conns if scenario == "text" else args.big_conns
    python = args.client_python or sys.executable
    return nice_prefix(args) + [
        "taskset",
        "-c",
        CLIENT_CPU,
        python,
        os.path.abspath(__file__),
        "--loadgen",
        "--port",
        str(port),
        "--server-pid",
        str(pid),
        "--conns",
        str(conns),
        "--size",
        str(SCENARIOS[scenario]["size"]),
        "--warmup",
        str(args.warmup),
        "--duration",
        str(args.duration),
        "--client",
        client,
        "--transport",
        transport,
    ]


def measure(args, name, scenario, client="raw", transport="h1"):
    proc, port, argv = start_server(name, args)
    try:
        out = subprocess.run(
            loadgen_argv(args, port, proc.pid, scenario, client, transport),
            capture_output=True,
            timeout=args.warmup + args.duration + 120,
        )
        if out.returncode != 0:
            raise RuntimeError(
                "load generator failed against %s: %s" % (name, out.stderr.decode()[-2000:])
            )
        result = json.loads(out.stdout.decode().strip().splitlines()[-1])
    finally:
        stop_server(proc)
    return result, argv


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--servers", default="ferrocorn,granian,uvicorn")
    parser.add_argument("--scenarios", default="text,1mib")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--conns", type=int, default=64, help="connections, text scenario")
    parser.add_argument("--big-conns", type=int, default=8, help="connections, 1mib scenario")
    parser.add_argument("--ferrocorn-python", default=os.path.join(VENV_BIN, "python"))
    parser.add_argument("--ferrocorn-pythonpath", default=os.path.join(REPO, "python"))
    parser.add_argument(
        "--client-python",
        default=None,
        help="interpreter for the load generator (default: this one)",
    )
    parser.add_argument(
        "--client-ceiling",
        action="store_true",
        help="also run the websockets-library client against ferrocorn",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run servers and load generator under `nice -n N` (negative: a "
        "higher priority than concurrent background work; needs root)",
    )
    parser.add_argument(
        "--transports",
        default="h1",
        help="h1, or h1,h2: also run ferrocorn's sockets over HTTP/2 (RFC 8441) and compare",
    )
    parser.add_argument("--note", default="", help="a line added to the report (build, ...)")
    parser.add_argument("--out", default=os.path.join(HERE, "WS_RESULTS.md"))
    # load generator mode (internal)
    parser.add_argument("--loadgen", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int)
    parser.add_argument("--server-pid", type=int, default=0)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--client", default="raw", choices=["raw", "websockets"])
    parser.add_argument("--transport", default="h1", choices=["h1", "h2"])
    args = parser.parse_args()

    if args.loadgen:
        if args.client == "raw":
            result = run_raw_client(
                args.port,
                args.conns,
                args.size,
                args.warmup,
                args.duration,
                args.server_pid,
                args.transport,
            )
        else:
            result = run_websockets_client(
                args.port, args.conns, args.size, args.warmup, args.duration, args.server_pid
            )
        print(json.dumps(result))
        return 0

    servers = args.servers.split(",")
    scenarios = args.scenarios.split(",")
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_before = loadavg()
    results = {}
    commands = {}
    # ferrocorn's HTTP/2 rounds run right after its HTTP/1.1 round of the same scenario: the
    # machine's background load drifts over minutes, and the ratio compares the two.
    with_h2 = "h2" in args.transports.split(",") and "ferrocorn" in servers
    transports = {}  # (scenario, transport) -> ferrocorn's runs
    for scenario in scenarios:
        for rnd in range(args.rounds):
            for name in servers:  # interleaved, so drifting background load hits all alike
                result, argv = measure(args, name, scenario)
                commands[name] = argv
                results.setdefault((scenario, name), []).append(result)
                print(
                    "%-5s round %d %-10s %10.1f %s  server cpu %3.0f%%  client cpu %3.0f%%"
                    % (
                        scenario,
                        rnd + 1,
                        name,
                        result[SCENARIOS[scenario]["key"]],
                        SCENARIOS[scenario]["unit"],
                        100 * result["server_cpu"],
                        100 * result["client_cpu"],
                    ),
                    flush=True,
                )
                if name == "ferrocorn" and with_h2:
                    transports.setdefault((scenario, "h1"), []).append(result)
                    result, _ = measure(args, "ferrocorn", scenario, transport="h2")
                    transports.setdefault((scenario, "h2"), []).append(result)
                    print(
                        "%-5s round %d ferrocorn over h2 %10.1f %s  server cpu %3.0f%%  "
                        "%.1f server µs/msg"
                        % (
                            scenario,
                            rnd + 1,
                            result[SCENARIOS[scenario]["key"]],
                            SCENARIOS[scenario]["unit"],
                            100 * result["server_cpu"],
                            result["server_us_per_msg"],
                        ),
                        flush=True,
                    )
    ceiling = None
    if args.client_ceiling and "ferrocorn" in servers:
        ceiling = []
        for rnd in range(args.rounds):
            result, _ = measure(args, "ferrocorn", "text", client="websockets")
            ceiling.append(result)
            print(
                "text  round %d ferrocorn, websockets client %10.1f msgs/s  server cpu %3.0f%%"
                "  client cpu %3.0f%%"
                % (
                    rnd + 1,
                    result["msgs_per_s"],
                    100 * result["server_cpu"],
                    100 * result["client_cpu"],
                ),
                flush=True,
            )
    load_after = loadavg()
    write_report(
        args, servers, scenarios, results, commands, ceiling, started, load_before, load_after
    )
    if transports:
        with open(args.out, "a") as f:
            f.write(transport_report(scenarios, transports))
    print("wrote", args.out)
    return 0


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def transport_report(scenarios, transports):
    """The WebSocket-over-HTTP/2 section: ferrocorn's two transports side by side."""
    lines = ["", "## ferrocorn: WebSocket over HTTP/2 (RFC 8441) vs over HTTP/1.1", ""]
    lines.append(
        "Same scenarios and connections; over HTTP/2 each connection carries its socket as one"
        " extended CONNECT stream (h2c prior knowledge), the WebSocket frames in DATA frames."
    )
    lines.append("")
    lines.append("| scenario | transport | median | rounds | server CPU | server µs per message |")
    lines.append("|---|---|---:|---|---:|---:|")
    for scenario in scenarios:
        spec = SCENARIOS[scenario]
        key = spec["key"]
        medians = {}
        for transport in ("h1", "h2"):
            runs = transports.get((scenario, transport), [])
            if not runs:
                continue
            us = median_of(runs, "server_us_per_msg")
            medians[transport] = (median_of(runs, key), us)
            lines.append(
                "| %s | %s | %.1f %s | %s | %.0f%% | %.1f |"
                % (
                    scenario,
                    "HTTP/2" if transport == "h2" else "HTTP/1.1",
                    medians[transport][0],
                    spec["unit"],
                    ", ".join("%.1f" % r[key] for r in runs),
                    100 * median_of(runs, "server_cpu"),
                    us,
                )
            )
        if len(medians) == 2:
            pairs = [
                h2["server_us_per_msg"] / h1["server_us_per_msg"]
                for h1, h2 in zip(transports[(scenario, "h1")], transports[(scenario, "h2")])
            ]
            lines.append(
                "| %s | **h2 / h1.1** | **%.2f×** | %s | | **%.2f×** |"
                % (
                    scenario,
                    medians["h2"][0] / medians["h1"][0],
                    "CPU per message, pair by pair: " + ", ".join("%.2f×" % r for r in pairs),
                    medians["h2"][1] / medians["h1"][1],
                )
            )
    lines.append("")
    lines.append(
        "Each HTTP/2 round ran right after the HTTP/1.1 round of the same number; the pair-by-pair"
        " ratios compare the two runs of each pair."
    )
    lines.append("")
    return "\n".join(lines)


def write_report(
    args, servers, scenarios, results, commands, ceiling, started, load_before, load_after
):
    lines = ["# WebSocket benchmark (echo)", ""]
    lines.append(
        "Generated by `%s` on %s."
        % (" ".join(["python3", "benchmarks/ws_bench.py"] + sys.argv[1:]), started)
    )
    lines.append("")
    lines.append(
        "One server worker pinned to CPU 0, the load generator (one epoll loop over raw sockets,"
        " pre-built masked frames, %s %s) pinned to CPU 1; a fresh server process per round,"
        " %.0f s warm-up + %.0f s measured, median of %d rounds (rounds interleaved across"
        " servers). Text: %d connections, 32-byte text messages, one in flight per connection."
        " 1 MiB: %d connections, 1 MiB binary messages, one in flight per connection; MB/s"
        " counts the echoed payload (10^6 bytes)."
        % (
            platform.python_implementation(),
            platform.python_version(),
            args.warmup,
            args.duration,
            args.rounds,
            args.conns,
            args.big_conns,
        )
    )
    lines.append("")
    lines.append(
        "Machine: %d cores, %s; **other work was running concurrently on this machine** "
        "(load average %s before, %s after), so absolute numbers are noisy; compare the "
        "servers within this run only. CPU%% is the CPU time used during the measured "
        "window (100%% = one core); a server at ~100%% is saturated. When neither side is "
        "near 100%%, both were starved by the concurrent work and the throughput mostly "
        "reflects their CPU share: the per-server-CPU-second column (throughput divided by "
        "the server's CPU use) is then the steadier comparison."
        % (os.cpu_count(), platform.platform(), load_before, load_after)
    )
    lines.append("")
    for scenario in scenarios:
        spec = SCENARIOS[scenario]
        key = spec["key"]
        lines.append("## %s (%s)" % (spec["title"], spec["unit"]))
        lines.append("")
        lines.append(
            "| server | median %s | rounds | server CPU | client CPU | %s per server "
            "CPU-second |" % (spec["unit"], spec["unit"].split("/")[0])
        )
        lines.append("|---|---:|---|---:|---:|---:|")
        medians = {}
        efficiency = {}
        for name in servers:
            runs = results.get((scenario, name), [])
            if not runs:
                continue
            medians[name] = median_of(runs, key)
            efficiency[name] = (
                statistics.median(r[key] / r["server_cpu"] for r in runs if r["server_cpu"] > 0)
                if any(r["server_cpu"] > 0 for r in runs)
                else 0.0
            )
            lines.append(
                "| %s | %.1f | %s | %.0f%% | %.0f%% | %.0f |"
                % (
                    name,
                    medians[name],
                    ", ".join("%.1f" % r[key] for r in runs),
                    100 * median_of(runs, "server_cpu"),
                    100 * median_of(runs, "client_cpu"),
                    efficiency[name],
                )
            )
        lines.append("")
        if "ferrocorn" in medians:
            ratios = []
            for other in ("granian", "uvicorn"):
                if medians.get(other):
                    ratios.append(
                        "ferrocorn / %s = **%.2f×** (per server CPU-second: %.2f×)"
                        % (
                            other,
                            medians["ferrocorn"] / medians[other],
                            efficiency["ferrocorn"] / efficiency[other]
                            if efficiency.get(other)
                            else float("nan"),
                        )
                    )
            if ratios:
                lines.append("Ratios (same run): " + "; ".join(ratios) + ".")
                lines.append("")
    lines.append("## Load generator")
    lines.append("")
    text_runs = [r for (sc, _), runs in results.items() if sc == "text" for r in runs]
    if text_runs:
        per_msg = statistics.median(
            r["client_cpu"] / r["msgs_per_s"] * 1e6 for r in text_runs if r["msgs_per_s"]
        )
        lines.append(
            "The raw client spends about %.0f µs of CPU per text round trip (mostly loopback TCP"
            " system calls), about as much as the fastest server here: on an idle machine, with"
            " a whole core each, the text figure of the fastest server would be close to"
            " client-bound (%.0f msgs/s for one core of client)." % (per_msg, 1e6 / per_msg)
        )
        lines.append("")
    if ceiling:
        lines.append(
            "Ceiling of a client built on the `websockets` library (asyncio, one process on"
            " CPU 1), same text scenario against ferrocorn: median %.1f msgs/s (%s), client CPU"
            " %.0f%%, server CPU %.0f%%, i.e. %.0f msgs per client CPU-second, against %.0f for"
            " the raw client: it would be the bottleneck, so the tables use the raw client."
            % (
                median_of(ceiling, "msgs_per_s"),
                ", ".join("%.1f" % r["msgs_per_s"] for r in ceiling),
                100 * median_of(ceiling, "client_cpu"),
                100 * median_of(ceiling, "server_cpu"),
                statistics.median(
                    r["msgs_per_s"] / r["client_cpu"] for r in ceiling if r["client_cpu"]
                ),
                statistics.median(
                    r["msgs_per_s"] / r["client_cpu"]
                    for r in results.get(("text", "ferrocorn"), [])
                    if r["client_cpu"]
                )
                if results.get(("text", "ferrocorn"))
                else float("nan"),
            )
        )
        lines.append("")
    lines.append("## Exact server commands")
    lines.append("")
    for name in servers:
        if name in commands:
            lines.append("- %s: `%s`" % (name, shlex.join(commands[name])))
    lines.append("")
    lines.append("ferrocorn's PYTHONPATH: `%s`." % args.ferrocorn_pythonpath)
    lines.append("")
    if args.note:
        lines.append(args.note)
        lines.append("")
    with open(args.out, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
