"""Start ``ferrocorn examples.hello:app`` on a free port, GET / once, stop it.

Usage: python packaging/hello_request.py PATH/TO/ferrocorn  (from the repository root)
Exits non-zero unless the answer is 200 with a body.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ask(proc: subprocess.Popen[bytes], port: int) -> bool:
    """GET / until the server answers (or exits, or 30 s pass); whether it said 200."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                body = resp.read()
                if resp.status == 200 and body:
                    return True
                print(f"unexpected answer: {resp.status} {body!r}", file=sys.stderr)
                return False
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                print("the server never answered", file=sys.stderr)
                return False
            time.sleep(0.1)


def main() -> int:
    exe = sys.argv[1]
    port = free_port()
    proc = subprocess.Popen(
        [exe, "examples.hello:app", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    answered = False
    try:
        answered = ask(proc, port)
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    # A clean stop on SIGTERM is part of a working install.
    if not answered or proc.returncode != 0:
        sys.stderr.write(out.decode("utf-8", "replace"))
        print(f"server exited {proc.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
