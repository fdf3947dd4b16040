"""16 busy keep-alive clients that reconnect after Connection: close; SIGHUP x3 to a
supervised server; every request is checked (no retries): lost = sent, not answered."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from drain_check import REQ, read_response

CONNS = 16


def client(port, stop, stats, lock):
    sock = None
    buf = b""
    while not stop.is_set():
        if sock is None:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                buf = b""
            except OSError:
                with lock:
                    stats["connect-fail"] = stats.get("connect-fail", 0) + 1
                time.sleep(0.01)
                continue
        try:
            sock.sendall(REQ)
            resp, buf = read_response(sock, buf)
        except OSError:
            resp = None
        if resp is None:
            with lock:
                stats["lost"] = stats.get("lost", 0) + 1
            sock.close()
            sock = None
            continue
        with lock:
            stats["ok"] = stats.get("ok", 0) + 1
        if b"connection: close" in resp[0].lower():
            sock.close()
            sock = None
    if sock:
        sock.close()


python, app = sys.argv[1], sys.argv[2]
p = subprocess.Popen(
    [python, "-m", "ferrocorn", app, "--port", "0", "--no-access-log", "--workers", "2"],
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
)
port = None
lines = []
while port is None:
    line = p.stdout.readline().decode()
    lines.append(line)
    m = re.search(r"running on http://[\d.]+:(\d+)", line)
    if m:
        port = int(m.group(1))
out = []
threading.Thread(target=lambda: [out.append(raw.decode()) for raw in p.stdout], daemon=True).start()
while sum("Started worker" in line for line in out) < 2:
    time.sleep(0.1)
stop = threading.Event()
stats = {}
lock = threading.Lock()
ts = [threading.Thread(target=client, args=(port, stop, stats, lock)) for _ in range(CONNS)]
for t in ts:
    t.start()
time.sleep(1)
for _ in range(3):
    started = sum("Started worker" in line for line in out)
    p.send_signal(signal.SIGHUP)
    while sum("Started worker" in line for line in out) < started + 2:
        time.sleep(0.1)
    time.sleep(1.5)
stop.set()
for t in ts:
    t.join(30)
p.send_signal(signal.SIGTERM)
p.wait(60)
print("SIGHUP x3:", stats)
