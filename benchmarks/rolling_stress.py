"""Worker replacement under load: nothing may be lost while workers are recycled.

Runs ferrocorn with ``--workers N --limit-max-requests M`` (each worker is replaced every M
requests, so a replacement happens every few hundred milliseconds) and sends sequential
``Connection: close`` requests for ``--duration`` seconds. Every request must be answered
with a 200: a timeout, a connection closed without a response or a reset is a failure. On a
timeout the state of every worker thread is printed from /proc (wchan, current syscall), the
evidence that found a worker stuck in a blocking ``accept4()``.

    python benchmarks/rolling_stress.py [--python pypy3] [--duration 120] [--workers 2]
        [--limit-max-requests 20]

Needs ``import ferrocorn`` to work for ``--python`` (PYTHONPATH=python after a build).
Exit code 1 when any request failed.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = "tests.apps.workers:app"  # GET /pid answers the worker's pid


def start(args, log):
    argv = [
        args.python,
        "-m",
        "ferrocorn",
        APP,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--workers",
        str(args.workers),
        "--limit-max-requests",
        str(args.limit_max_requests),
        "--no-access-log",
    ]
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(log.name) as f:
            m = re.search(r"http://127\.0\.0\.1:(\d+)", f.read())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit("the server did not start:\n" + open(log.name).read())


def worker_threads(supervisor):
    """One line per thread of each worker: comm, wchan, current syscall (from /proc)."""
    out = subprocess.run(["pgrep", "-P", str(supervisor)], capture_output=True, text=True)
    lines = []
    for pid in out.stdout.split():
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):

            def read(name, base=f"/proc/{pid}/task/{tid}"):
                try:
                    with open(f"{base}/{name}") as f:
                        return f.read().strip()
                except OSError as exc:
                    return repr(exc)

            lines.append(
                f"  {pid}/{tid} {read('comm')}: wchan={read('wchan')} "
                f"syscall={read('syscall').split(' ')[0]}"
            )
    return "\n".join(lines)


def one_request(port, timeout):
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(b"GET /pid HTTP/1.1\r\nHost: stress\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
    finally:
        sock.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter for the server")
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit-max-requests", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=5.0, help="per request, seconds")
    args = parser.parse_args()

    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        proc, port = start(args, log)
        sent = failures = 0
        try:
            time.sleep(1.0)
            end = time.monotonic() + args.duration
            while time.monotonic() < end:
                sent += 1
                try:
                    data = one_request(port, args.timeout)
                except socket.timeout:
                    failures += 1
                    print(
                        f"request {sent}: no response in {args.timeout} s; worker threads:\n"
                        + worker_threads(proc.pid)
                    )
                    continue
                except OSError as exc:
                    failures += 1
                    print(f"request {sent}: {exc!r}")
                    continue
                if not data.startswith(b"HTTP/1.1 200 "):
                    failures += 1
                    print(f"request {sent}: {data[:80]!r}")
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            with open(log.name) as f:
                replaced = f.read().count("is serving: stopping worker")
    print(f"{sent} requests, {replaced} worker replacements, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
