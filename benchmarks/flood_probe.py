"""Probe latency on one connection while another floods HTTP/2 frames that make no progress.

    python benchmarks/flood_probe.py KIND      (KIND: window_update, ping, settings,
                                                empty_data, priority)

Starts ``tests.apps.basic:app`` with the installed ferrocorn, pins it to CPU 0 and this
script to CPU 1, floods from one connection for 3 s while timing ``GET /hello`` on new
connections, and prints the probes' p50/p99/max (RELIABILITY.md, "Floods").
"""

import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support import h2frames as f  # noqa: E402
from tests.support.helpers import start_server  # noqa: E402


def flood(port, kind, stop, sent):
    conn = f.H2Conn(port).handshake()
    if kind == "window_update":
        conn.send(f.headers(1, conn.block(conn.request_fields("GET", "/hello")), end_stream=False))
        frame = f.window_update(0, 1) + f.window_update(1, 1)
    elif kind == "ping":
        frame = f.ping(b"12345678")
    elif kind == "settings":
        frame = f.settings()
    elif kind == "empty_data":
        conn.send(f.headers(1, conn.block(conn.request_fields("POST", "/echo")), end_stream=False))
        frame = f.data(1, b"")
    elif kind == "priority":
        frame = f.priority(3)
    else:
        raise SystemExit("unknown kind %r" % kind)
    burst = frame * 2000
    conn.sock.settimeout(0.5)
    try:
        while not stop.is_set():
            conn.sock.sendall(burst)
            sent[0] += 2000
            if kind in ("ping", "settings"):
                try:
                    conn.sock.recv(1 << 20)  # read the ACKs
                except socket.timeout:
                    pass
    except OSError as exc:
        sent.append(repr(exc))


def probe(port, seconds):
    latencies = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while not data.endswith(b"hello world"):
                got = sock.recv(65536)
                if not got:
                    raise SystemExit("probe connection closed")
                data += got
        latencies.append(time.monotonic() - start)
        time.sleep(0.01)
    return sorted(latencies)


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "settings"
    with start_server("tests.apps.basic:app", "--no-access-log") as server:
        subprocess.run(["taskset", "-a", "-p", "-c", "0", str(server.pid)], capture_output=True)
        os.sched_setaffinity(0, {1})
        stop, sent = threading.Event(), [0]
        thread = threading.Thread(target=flood, args=(server.port, kind, stop, sent))
        thread.start()
        time.sleep(0.3)
        lat = probe(server.port, 3)
        stop.set()
        thread.join()
    print(
        "%s: frames sent %s, probes %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms"
        % (
            kind,
            sent,
            len(lat),
            lat[len(lat) // 2] * 1e3,
            lat[int(len(lat) * 0.99)] * 1e3,
            lat[-1] * 1e3,
        )
    )


if __name__ == "__main__":
    main()
