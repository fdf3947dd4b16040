"""kill -9 of one of 2 workers whose app takes 5 s to start (slow_start_app.py): what it costs
the new connections opened meanwhile.

CLIENTS threads each open a new connection every ~5 ms, send one request and time the
response (connect to last byte, no retries). After 2 s one worker is killed with SIGKILL; the
run goes on until its replacement serves plus 1 s. Printed: the latency before the kill and,
for the connections opened between the kill and the replacement serving, how many there
were, how many failed, their p50/p99/max and how many took longer than 50 ms.

usage: python crash_check.py PYTHON   (ferrocorn importable by PYTHON; run from the repo root)
"""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

CLIENTS = 4
GAP = 0.005
REQ = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
HERE = os.path.dirname(os.path.abspath(__file__))


def one(port):
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(REQ)
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        ok = data.startswith(b"HTTP/1.1 200")
    except OSError:
        ok = False
    return start, time.monotonic() - start, ok


def client(port, stop, results):
    while not stop.is_set():
        results.append(one(port))
        time.sleep(GAP)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main():
    python = sys.argv[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, env_path()]), SLOW_START="5")
    p = subprocess.Popen(
        [
            python,
            "-m",
            "ferrocorn",
            "slow_start_app:app",
            "--port",
            "0",
            "--workers",
            "2",
            "--no-access-log",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    out = []
    port = None
    while port is None:
        line = p.stdout.readline().decode()
        out.append(line)
        m = re.search(r"running on http://[\d.]+:(\d+)", line)
        if m:
            port = int(m.group(1))
    threading.Thread(target=lambda: [out.append(r.decode()) for r in p.stdout], daemon=True).start()

    def started():
        return [int(x) for x in re.findall(r"Started worker \[(\d+)\]", "".join(out))]

    while len(started()) < 2:
        time.sleep(0.1)
    stop = threading.Event()
    results = []
    threads = [threading.Thread(target=client, args=(port, stop, results)) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    time.sleep(2)
    victim = started()[0]
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    while len(started()) < 3 and time.monotonic() - killed_at < 30:
        time.sleep(0.01)
    serving_at = time.monotonic()
    time.sleep(1)
    stop.set()
    for t in threads:
        t.join(60)
    p.send_signal(signal.SIGTERM)
    p.wait(60)
    before = [lat for s, lat, ok in results if s < killed_at and ok]
    during = [(lat, ok) for s, lat, ok in results if killed_at <= s < serving_at]
    lats = [lat for lat, _ in during]
    print(f"replacement serving {serving_at - killed_at:.2f} s after the kill")
    print(
        f"before the kill: {len(before)} connections, p50 {pct(before, 0.5) * 1e3:.1f} ms, "
        f"max {max(before) * 1e3:.1f} ms"
    )
    print(
        f"kill -> replacement serving: {len(during)} connections, "
        f"{sum(not ok for _, ok in during)} failed, p50 {pct(lats, 0.5) * 1e3:.1f} ms, "
        f"p99 {pct(lats, 0.99) * 1e3:.1f} ms, max {max(lats) * 1e3:.1f} ms, "
        f"{sum(lat > 0.05 for lat in lats)} over 50 ms"
    )
    slow = sorted(
        (round((s - killed_at) * 1e3), round(lat * 1e3))
        for s, lat, ok in results
        if killed_at <= s < serving_at and lat > 0.05
    )
    print("over 50 ms (opened ms after the kill, latency ms):", slow[:20])


def env_path():
    return os.environ.get("PYTHONPATH", "")


if __name__ == "__main__":
    main()
