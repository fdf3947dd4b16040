"""HTTP/2 and TLS throughput: ferrocorn against granian, one worker each.

Runs three loads against each server and prints requests/s and the ferrocorn/granian ratio:

- h2load over cleartext HTTP/2 with prior knowledge (h2c),
- h2load over HTTP/2 on TLS (ALPN h2),
- wrk over HTTPS (HTTP/1.1 on TLS).

Standalone: the app served is ``app`` below (a plaintext "Hello, World!"), the certificate a
self-signed one made with the openssl CLI.  Needs h2load (nghttp2-client), wrk and openssl;
granian from ``benchmarks/.venv/bin/granian``, ``--granian PATH`` or PATH; hypercorn (for the
HTTP/2 loads) when ``benchmarks/.venv/bin/hypercorn`` or ``--hypercorn PATH`` exists.  ferrocorn
runs under the interpreter running this script (build it in release mode first, and make sure
``import ferrocorn`` finds that build, e.g. with PYTHONPATH=python).

Each server runs one worker pinned to CPU 0 (``taskset``), the load generator is pinned to
CPU 1 (``--no-pin`` turns that off); a fresh server per measurement, ``--rounds`` rounds
interleaved across servers, the median kept.  ``--out FILE`` also writes a Markdown table.

    python benchmarks/h2_tls.py [--duration 8] [--rounds 3] [--connections 10] [--streams 10]
"""

import argparse
import os
import platform
import re
import shutil
import socket
import statistics
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
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
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


def find_tool(name, explicit):
    for candidate in (explicit, os.path.join(HERE, ".venv", "bin", name), shutil.which(name)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


SERVER_CPU, CLIENT_CPU = "0", "1"


def pinned(argv, cpu, pin):
    return ["taskset", "-c", cpu, *argv] if pin else argv


def server_argv(name, port, tls, tools):
    if name == "ferrocorn":
        argv = [
            sys.executable,
            "-m",
            "ferrocorn",
            "h2_tls:app",
            "--app-dir",
            HERE,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
        if tls:
            argv += ["--ssl-certfile", tls[0], "--ssl-keyfile", tls[1]]
    elif name == "granian":
        argv = [
            tools["granian"],
            "--interface",
            "asgi",
            "--http",
            "auto",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--no-access-log",
            "--runtime-mode",
            "st",
            "--log-level",
            "warning",
            "--working-dir",
            HERE,
        ]
        if tls:
            argv += ["--ssl-certificate", tls[0], "--ssl-keyfile", tls[1]]
        argv.append("h2_tls:app")
    else:
        # hypercorn speaks h2c (prior knowledge) on a plain bind, and h2 by ALPN with TLS.
        argv = [
            tools["hypercorn"],
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--worker-class",
            "uvloop",
            "--log-level",
            "warning",
            "h2_tls:app",
        ]
        if tls:
            argv += ["--certfile", tls[0], "--keyfile", tls[1]]
    return argv


def run_h2load(url, args, warm_up=1):
    out = subprocess.run(
        pinned(
            [
                "h2load",
                "-D",
                str(args.duration),
                "--warm-up-time",
                str(warm_up),
                "-c",
                str(args.connections),
                "-m",
                str(args.streams),
                "-t",
                "1",
                url,
            ],
            CLIENT_CPU,
            args.pin,
        ),
        capture_output=True,
        text=True,
        env=dict(os.environ, LC_ALL="C"),
    ).stdout
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    counts = re.search(r"(\d+) succeeded, (\d+) failed, (\d+) errored", out)
    if not rate or not counts:
        return None, "h2load output not understood: " + out[-300:]
    failed = int(counts.group(2)) + int(counts.group(3))
    return float(rate.group(1)), (f"{failed} failed/errored" if failed else "")


def run_wrk(url, args):
    out = subprocess.run(
        pinned(
            ["wrk", "-t", "1", "-c", str(args.connections * 5), "-d", f"{args.duration}s", url],
            CLIENT_CPU,
            args.pin,
        ),
        capture_output=True,
        text=True,
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
# hypercorn is the HTTP/2 reference; its HTTP/1.1-over-TLS figure is not asked for.
SKIP = {("hypercorn", "wrk HTTPS (HTTP/1.1)")}


def measure_one(name, label, tls, load, tls_files, args, tools):
    port = free_port()
    proc = subprocess.Popen(
        pinned(server_argv(name, port, tls_files if tls else None, tools), SERVER_CPU, args.pin),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=HERE,
    )
    try:
        wait_port(port, proc)
        return load(port, args)
    except RuntimeError as exc:
        return None, str(exc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per load")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per measurement (median)")
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--streams", type=int, default=10, help="h2load streams per connection")
    parser.add_argument("--granian", help="path of the granian executable")
    parser.add_argument("--hypercorn", help="path of the hypercorn executable")
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="do not pin the server and the load generator to CPUs",
    )
    parser.add_argument("--out", help="also write the results as Markdown to this file")
    args = parser.parse_args()
    missing = [tool for tool in ("h2load", "wrk", "openssl") if shutil.which(tool) is None]
    if args.pin and shutil.which("taskset") is None:
        missing.append("taskset")
    if missing:
        sys.exit("missing tools: " + ", ".join(missing))
    tools = {
        "granian": find_tool("granian", args.granian),
        "hypercorn": find_tool("hypercorn", args.hypercorn),
    }
    servers = ["ferrocorn"] + [name for name in ("granian", "hypercorn") if tools[name]]
    for name in ("granian", "hypercorn"):
        if not tools[name]:
            print(f"{name} not found: not measured", file=sys.stderr)

    rounds = {}  # (server, load) -> [(rate, note)]
    with tempfile.TemporaryDirectory() as tmp:
        tls_files = make_cert(tmp)
        for r in range(args.rounds):
            for label, tls, load in LOADS:
                for name in servers:
                    if (name, label) in SKIP:
                        continue
                    rate, note = measure_one(name, label, tls, load, tls_files, args, tools)
                    rounds.setdefault((name, label), []).append((rate, note))
                    shown = f"{rate:,.0f} req/s" if rate is not None else "n/a"
                    print(
                        f"round {r + 1}/{args.rounds} {label:<22} {name:<10} {shown}"
                        + (f" ({note})" if note else ""),
                        flush=True,
                    )

    def median(name, label):
        rates = [rate for rate, _ in rounds.get((name, label), []) if rate is not None]
        return statistics.median(rates) if rates else None

    header = (
        f"{os.cpu_count()} CPU(s), {platform.platform()}; server pinned to CPU "
        f"{SERVER_CPU}, load generator to CPU {CLIENT_CPU}"
        if args.pin
        else f"{os.cpu_count()} CPU(s), not pinned"
    )
    lines = [
        header,
        "",
        f"{args.connections} connections, {args.streams} streams each (h2load; wrk: "
        f"{args.connections * 5} connections), {args.duration} s per load, median of "
        f"{args.rounds} round(s), a fresh server each time.",
        "",
        "| load | "
        + " | ".join(f"{n} req/s" for n in servers)
        + " | ferrocorn / granian | ferrocorn / hypercorn |",
        "|---|" + "---:|" * (len(servers) + 2),
    ]
    for label, _, _ in LOADS:
        meds = {name: median(name, label) for name in servers}
        cells = [f"{meds[n]:,.0f}" if meds[n] is not None else "–" for n in servers]
        ratios = []
        for other in ("granian", "hypercorn"):
            if meds.get("ferrocorn") and meds.get(other):
                ratios.append(f"{meds['ferrocorn'] / meds[other]:.2f}×")
            else:
                ratios.append("–")
        lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
    notes = sorted(
        {
            f"{name} {label}: {note}"
            for (name, label), rs in rounds.items()
            for _, note in rs
            if note
        }
    )
    if notes:
        lines += ["", "Notes: " + "; ".join(notes)]
    text = "\n".join(lines)
    print("\n" + text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(
                "# HTTP/2 and TLS benchmark\n\nGenerated by `python benchmarks/h2_tls.py "
                + " ".join(sys.argv[1:])
                + "` on "
                + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                + ".\n\n"
                + text
                + "\n"
            )


if __name__ == "__main__":
    main()
