#!/usr/bin/env python3
"""HTTP/2 request serving, two ferrocorn builds A/B: h2load over h2c, req/s and server CPU µs
per request, the builds alternating round by round (the one that goes first alternating too).

    python3 benchmarks/h2_ab.py --python VENV/bin/python --a DIR_A --b DIR_B [--rounds 6]

DIR_A / DIR_B: directories that hold a ``ferrocorn`` package (an unpacked wheel, or
``python/`` with a dev build), put first on PYTHONPATH for that build's server. The app is
``benchmarks.h2_tls:app`` (a plaintext "Hello, World!"), one worker pinned to CPU 0, h2load
pinned to CPU 1. Server CPU is the server process's utime + stime over h2load's whole run
(its warm-up included), divided by the requests h2load reports for the measured window plus
its warm-up's estimate at the same rate: a figure to compare builds with, not an absolute.
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wait_listening(port, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not listen")


def one_round(args, path):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([path, REPO]))
    server = subprocess.Popen(
        ["taskset", "-c", "0", args.python, "-m", "ferrocorn", "benchmarks.h2_tls:app"]
        + ["--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
        + ["--log-level", "warning"],
        env=env,
        cwd=REPO,
    )
    try:
        wait_listening(port, server)
        before = cpu_seconds(server.pid)
        out = subprocess.run(
            ["taskset", "-c", "1", "h2load", "-D", f"{args.duration:g}"]
            + ["--warm-up-time", f"{args.warmup:g}", "-c", str(args.connections)]
            + ["-m", str(args.streams), "-t", "1", f"http://127.0.0.1:{port}/"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, LC_ALL="C"),
        ).stdout
        used = cpu_seconds(server.pid) - before
    finally:
        server.terminate()
        server.wait(20)
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    counts = re.search(r"(\d+) succeeded, (\d+) failed, (\d+) errored", out)
    if not rate or not counts or int(counts.group(2)) or int(counts.group(3)):
        raise RuntimeError("h2load: " + out[-400:])
    rps = float(rate.group(1))
    requests = rps * (args.duration + args.warmup)
    return rps, used / requests * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--warmup", type=float, default=1)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--streams", type=int, default=10)
    args = parser.parse_args()
    results = {"a": [], "b": []}
    for i in range(args.rounds):
        order = ("a", "b") if i % 2 == 0 else ("b", "a")
        for name in order:
            rps, us = one_round(args, getattr(args, name))
            results[name].append((rps, us))
            print(f"round {i + 1} {name}: {rps:9.0f} req/s {us:6.2f} µs/req", flush=True)
    for name in ("a", "b"):
        rps = [r for r, _ in results[name]]
        us = [u for _, u in results[name]]
        print(
            f"{name} ({getattr(args, name)}): median {statistics.median(rps):.0f} req/s, "
            f"{statistics.median(us):.2f} µs/req"
        )
    pairs = [b[1] / a[1] for a, b in zip(results["a"], results["b"])]
    print("b/a CPU per request, pair by pair: " + ", ".join(f"{p:.3f}" for p in pairs))


if __name__ == "__main__":
    main()
