"""HTTP/2 and TLS throughput: ferrocorn against granian, one worker each.

Runs three loads against each server and prints requests/s and the ferrocorn/granian ratio:

- h2load over cleartext HTTP/2 with prior knowledge (h2c),
- h2load over HTTP/2 on TLS (ALPN h2),
- wrk over HTTPS (HTTP/1.1 on TLS).

Standalone: the app served is ``app`` below (a plaintext "Hello, World!"), the certificate a
self-signed one made with the openssl CLI.  Needs h2load (nghttp2-client), wrk and openssl;
granian from ``benchmarks/.venv/bin/granian``, ``--granian PATH`` or PATH.  ferrocorn runs
under the interpreter running this script (build it in release mode first, and make sure
``import ferrocorn`` finds that build, e.g. with PYTHONPATH=python).

    python benchmarks/h2_tls.py [--duration 8] [--connections 10] [--streams 10]
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BODY = b"Hello, World!"
HEADERS = [(b"content-type", b"text/plain"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


# ---------------------------------------------------------------- helpers


def make_cert(directory):
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not start listening")


def find_granian(explicit):
    for candidate in (explicit, os.path.join(HERE, ".venv", "bin", "granian"),
                      shutil.which("granian")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def server_argv(name, port, tls, granian):
    if name == "ferrocorn":
        argv = [sys.executable, "-m", "ferrocorn", "h2_tls:app", "--app-dir", HERE,
                "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
                "--log-level", "warning"]
        if tls:
            argv += ["--ssl-certfile", tls[0], "--ssl-keyfile", tls[1]]
    else:
        argv = [granian, "--interface", "asgi", "--http", "auto", "--host", "127.0.0.1",
                "--port", str(port), "--workers", "1", "--no-access-log",
                "--log-level", "warning", "--working-dir", HERE]
        if tls:
            argv += ["--ssl-certificate", tls[0], "--ssl-keyfile", tls[1]]
        argv.append("h2_tls:app")
    return argv


def run_h2load(url, args):
    out = subprocess.run(
        ["h2load", "-D", str(args.duration), "--warm-up-time", "1", "-c", str(args.connections),
         "-m", str(args.streams), "-t", "1", url],
        capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"),
    ).stdout
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    counts = re.search(r"(\d+) succeeded, (\d+) failed, (\d+) errored", out)
    if not rate or not counts:
        return None, "h2load output not understood: " + out[-300:]
    failed = int(counts.group(2)) + int(counts.group(3))
    return float(rate.group(1)), (f"{failed} failed/errored" if failed else "")


def run_wrk(url, args):
    out = subprocess.run(
        ["wrk", "-t", "1", "-c", str(args.connections * 5), "-d", f"{args.duration}s", url],
        capture_output=True, text=True,
    ).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: .*", out)
    if not rate:
        return None, "wrk output not understood: " + out[-300:]
    return float(rate.group(1)), (errors.group(0) if errors else "")


LOADS = [
    ("h2load h2c", False, lambda port, a: run_h2load(f"http://127.0.0.1:{port}/", a)),
    ("h2load h2 (TLS)", True, lambda port, a: run_h2load(f"https://127.0.0.1:{port}/", a)),
    ("wrk HTTPS (HTTP/1.1)", True, lambda port, a: run_wrk(f"https://127.0.0.1:{port}/", a)),
]


def measure(name, tls_files, args, granian):
    results = {}
    for label, tls, load in LOADS:
        port = free_port()
        proc = subprocess.Popen(
            server_argv(name, port, tls_files if tls else None, granian),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            wait_port(port, proc)
            results[label] = load(port, args)
        except RuntimeError as exc:
            results[label] = (None, str(exc))
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per load")
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--streams", type=int, default=10, help="h2load streams per connection")
    parser.add_argument("--granian", help="path of the granian executable")
    args = parser.parse_args()
    missing = [tool for tool in ("h2load", "wrk", "openssl") if shutil.which(tool) is None]
    if missing:
        sys.exit("missing tools: " + ", ".join(missing))
    granian = find_granian(args.granian)
    servers = ["ferrocorn"] + (["granian"] if granian else [])
    if not granian:
        print("granian not found: measuring ferrocorn only", file=sys.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        tls_files = make_cert(tmp)
        results = {name: measure(name, tls_files, args, granian) for name in servers}

    print(f"\n{os.cpu_count()} CPU(s); load generator and server share them. "
          f"{args.connections} connections, {args.streams} streams each (h2load), "
          f"{args.duration}s per load.")
    print(f"{'load':<24}" + "".join(f"{name + ' req/s':>18}" for name in servers)
          + ("      ratio" if granian else ""))
    for label, _, _ in LOADS:
        row = f"{label:<24}"
        rates = []
        notes = []
        for name in servers:
            rate, note = results[name][label]
            rates.append(rate)
            row += f"{rate:>18,.0f}" if rate is not None else f"{'n/a':>18}"
            if note:
                notes.append(f"{name}: {note}")
        if granian and all(rates):
            row += f"{rates[0] / rates[1]:>11.2f}"
        print(row + ("   (" + "; ".join(notes) + ")" if notes else ""))


if __name__ == "__main__":
    main()
