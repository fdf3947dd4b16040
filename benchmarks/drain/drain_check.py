"""16 busy keep-alive connections, SIGTERM mid-load; how each connection ends.

clean: its last request got a complete response (with Connection: close, or the server then
closed between requests having answered everything); lost: a request was sent and got no
complete response (EOF/reset before or during it)."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

CONNS = int(os.environ.get("CONNS", "16"))
TRIALS = int(os.environ.get("TRIALS", "5"))
EXTRA = os.environ.get("EXTRA", "").split()
REQ = b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"


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


def client(port, stop_evt, out, i):
    sock = socket.create_connection(("127.0.0.1", port))
    buf = b""
    n = 0
    while True:
        try:
            sock.sendall(REQ)
        except OSError as e:
            out[i] = ("lost-send", n, repr(e))
            return
        try:
            resp, buf = read_response(sock, buf)
        except OSError as e:
            out[i] = ("lost", n, repr(e))
            return
        if resp is None:
            out[i] = ("lost", n, "eof")
            return
        n += 1
        if n == 1:
            stop_evt.release()
        if not resp[0].startswith(b"HTTP/1.1 200"):
            out[i] = ("bad-status", n, resp[0][:40])
            return
        if b"connection: close" in resp[0].lower():
            out[i] = ("clean-close", n, "")
            return


def trial(python, app):
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen(
        [python, "-m", "ferrocorn", app, "--port", "0", "--no-access-log", *EXTRA],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=os.getcwd(),
    )
    port = None
    lines = []
    while port is None:
        line = p.stdout.readline().decode()
        lines.append(line)
        if not line:
            raise SystemExit("server died: " + "".join(lines))
        m = re.search(r"running on http://[\d.]+:(\d+)", line)
        if m:
            port = int(m.group(1))
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    out = [None] * CONNS
    served = threading.Semaphore(0)
    ts = [threading.Thread(target=client, args=(port, served, out, i)) for i in range(CONNS)]
    for t in ts:
        t.start()
    for _ in range(CONNS):  # every connection served once: the server is up
        served.acquire(timeout=60)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    for t in ts:
        t.join(60)
    p.wait(60)
    return out


def main():
    python = sys.argv[1]
    app = sys.argv[2]
    total = {}
    for k in range(TRIALS):
        out = trial(python, app)
        kinds = {}
        for o in out:
            kinds[o[0] if o else "hung"] = kinds.get(o[0] if o else "hung", 0) + 1
        print(
            "trial", k, kinds, [o[1:] for o in out if o and o[0] != "clean-close"][:3], flush=True
        )
        for kk, v in kinds.items():
            total[kk] = total.get(kk, 0) + v
    print("TOTAL", total, "of", CONNS * TRIALS)


if __name__ == "__main__":
    main()
