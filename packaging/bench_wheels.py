"""Two builds of the same source, A and B, serving ``examples.hello:app``: requests/s and
server CPU per request, rounds alternating A, B, A, B... in one run (a busy machine drifts;
alternation spreads the drift over both). The server is pinned to one core, wrk to another.

Usage (Linux, wrk on PATH; each venv has one ferrocorn wheel installed):
    python packaging/bench_wheels.py VENV_A VENV_B [--rounds 5] [--duration 5]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import time
import urllib.request

SERVER_CPU, CLIENT_CPU = "0", "1"
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def one_run(venv: str, duration: int) -> tuple[float, float]:
    port = free_port()
    server = subprocess.Popen(
        [
            "taskset",
            "-c",
            SERVER_CPU,
            f"{venv}/bin/ferrocorn",
            "examples.hello:app",
            "--port",
            str(port),
            "--no-access-log",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/"
        wrk = ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", "-c64"]
        subprocess.run(wrk + ["-d1s", url], capture_output=True, check=True)  # warm-up
        before = cpu_seconds(server.pid)
        out = subprocess.run(
            wrk + [f"-d{duration}s", url], capture_output=True, text=True, check=True
        ).stdout
        used = cpu_seconds(server.pid) - before
        requests = int(re.search(r"(\d+) requests in", out).group(1))
        return requests / duration, used / requests * 1e6
    finally:
        server.terminate()
        server.wait(timeout=15)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("venv_a")
    p.add_argument("venv_b")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--duration", type=int, default=5)
    args = p.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    for _ in range(args.rounds):
        for name, venv in (("A", args.venv_a), ("B", args.venv_b)):
            rps, us = one_run(venv, args.duration)
            results[name].append((rps, us))
            print(f"{name}: {rps:9.0f} req/s  {us:6.1f} server CPU us/request", flush=True)
    med = {
        k: (statistics.median(r for r, _ in v), statistics.median(u for _, u in v))
        for k, v in results.items()
    }
    for k, (rps, us) in med.items():
        print(f"median {k}: {rps:.0f} req/s, {us:.1f} us/request")
    ratio_rps = med["B"][0] / med["A"][0]
    ratio_cpu = med["B"][1] / med["A"][1]
    print(f"B/A: req/s {ratio_rps:.3f}, CPU/request {ratio_cpu:.3f}")


if __name__ == "__main__":
    main()
