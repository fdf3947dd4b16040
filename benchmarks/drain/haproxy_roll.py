"""A rolling deploy behind HAProxy 2.6 (Debian) checking /readyz every 1 s: instances A
(1 worker) and B (2 workers), each stopped with SIGTERM and started again in turn while
CLIENTS keep-alive clients send requests through HAProxy; every response is checked.

usage: haproxy_roll.py PYTHON APP SHUTDOWN_DELAY
"""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

CLIENTS = 8
REQ = b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(python, app, port, health, delay, workers):
    argv = [python, "-m", "ferrocorn", app, "--port", str(port), "--no-access-log"]
    argv += ["--health-port", str(health), "--workers", str(workers)]
    argv += ["--shutdown-delay", str(delay)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = []
    threading.Thread(target=lambda: [out.append(r.decode()) for r in p.stdout], daemon=True).start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if sum("Started worker" in line or "Application startup complete" in line for line in out):
            if readyz(health) == 200:
                return p
        time.sleep(0.05)
    raise SystemExit("instance did not start: " + "".join(out))


def readyz(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = s.recv(100)
            return int(data.split()[1])
    except OSError:
        return None


def read_response(sock, buf):
    while b"\r\n\r\n" not in buf:
        d = sock.recv(65536)
        if not d:
            return None, buf
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)content-length:\s*(\d+)", head)
    n = int(m.group(1)) if m else 0
    while len(rest) < n:
        d = sock.recv(65536)
        if not d:
            return None, buf
        rest += d
    return (head, rest[:n]), rest[n:]


def client(port, stop, stats, lock):
    sock = None
    buf = b""
    while not stop.is_set():
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            buf = b""
        try:
            sock.sendall(REQ)
            resp, buf = read_response(sock, buf)
        except OSError:
            resp = None
        kind = "no-response" if resp is None else resp[0].split(b"\r\n")[0].decode()
        with lock:
            stats[kind] = stats.get(kind, 0) + 1
        if resp is None or b"connection: close" in resp[0].lower():
            sock.close()
            sock = None
        time.sleep(0.002)


def main():
    python, app, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ports = {name: (free_port(), free_port()) for name in ("a", "b")}
    front = free_port()
    cfg = f"""
global
    maxconn 1000
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
frontend f
    bind 127.0.0.1:{front}
    default_backend app
backend app
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 1s fall 2 rise 2
    server a 127.0.0.1:{ports["a"][0]} check port {ports["a"][1]}
    server b 127.0.0.1:{ports["b"][0]} check port {ports["b"][1]}
"""
    path = os.path.join(tempfile.mkdtemp(), "haproxy.cfg")
    with open(path, "w") as f:
        f.write(cfg)
    workers = {"a": 1, "b": 2}
    procs = {n: start(python, app, *ports[n], delay, workers[n]) for n in ("a", "b")}
    hap = subprocess.Popen(["haproxy", "-f", path], stdout=subprocess.DEVNULL)
    time.sleep(3)  # both marked up (rise 2)
    stop = threading.Event()
    stats = {}
    lock = threading.Lock()
    ts = [threading.Thread(target=client, args=(front, stop, stats, lock)) for _ in range(CLIENTS)]
    for t in ts:
        t.start()
    time.sleep(2)
    for _ in range(2):
        for n in ("a", "b"):
            procs[n].send_signal(signal.SIGTERM)
            procs[n].wait(60)
            procs[n] = start(python, app, *ports[n], delay, workers[n])
            time.sleep(3)  # marked up again before the next step
    stop.set()
    for t in ts:
        t.join(30)
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
        p.wait(60)
    hap.terminate()
    hap.wait(10)
    print(f"--shutdown-delay {delay}: 4 rolling steps:", stats)


if __name__ == "__main__":
    main()
