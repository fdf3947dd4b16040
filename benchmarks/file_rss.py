#!/usr/bin/env python3
"""A 1 GiB download's server memory: for each server, through Starlette's FileResponse
(`benchmarks/file_app.py`) and through its own static route where it has one, the growth of
the serving process's VmRSS while one client downloads a sparse 1 GiB file
(`benchmarks/.work/files/1g.bin`) as fast as it can. The target for ferrocorn: < 32 MiB.

Run it with the benchmark venv's interpreter (run.py made it, with the servers installed):

    benchmarks/.venv/bin/python benchmarks/file_rss.py [--servers ferrocorn,granian]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.run import (  # noqa: E402
    BENCH_FILE_SIZES,
    SCENARIOS,
    Running,
    Server,
    ensure_bench_files,
    raise_nofile,
    rss_kib,
    serving_pid,
)

SIZE = BENCH_FILE_SIZES["1g.bin"]
SAMPLE_EVERY = 32 << 20  # bytes between two RSS samples


def download(port: int, path: str, pid: int) -> tuple[int, int]:
    """GET `path` once; returns (body bytes received, peak RSS in KiB seen meanwhile)."""
    peak = rss_kib(pid)
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode())
        buf = bytearray(1 << 20)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError(f"no response head: {head[:200]!r}")
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
        got = len(head) - head.index(b"\r\n\r\n") - 4
        next_sample = SAMPLE_EVERY
        while True:
            n = s.recv_into(buf)
            if not n:
                break
            got += n
            if got >= next_sample:
                peak = max(peak, rss_kib(pid))
                next_sample += SAMPLE_EVERY
    return got, max(peak, rss_kib(pid))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="ferrocorn,granian,uvicorn,h2corn")
    args = parser.parse_args()
    ensure_bench_files()
    nofile = raise_nofile()
    for name in args.servers.split(","):
        server = Server(name, [])
        reason = server.check()
        if reason:
            print(f"SKIP {name}: {reason}")
            continue
        for scenario, path in (("file-5m", "/files/1g.bin"), ("static-5m", "/static/1g.bin")):
            if server.base not in SCENARIOS[scenario]["bases"]:
                continue
            run = Running(server, scenario, 0, False, nofile)
            try:
                problem = run.wait_ready(30)
                if problem:
                    print(f"SKIP {name} {scenario}: {problem}")
                    continue
                pid = serving_pid(run.pids())
                before = rss_kib(pid)
                got, peak = download(run.port, path, pid)
                row = {
                    "server": name,
                    "route": "static" if scenario.startswith("static") else "FileResponse",
                    "bytes": got,
                    "complete": got >= SIZE,  # chunked framing adds bytes
                    "rss_before_mib": round(before / 1024, 1),
                    "rss_growth_mib": round((peak - before) / 1024, 1),
                }
                print(json.dumps(row), flush=True)
            finally:
                run.stop()


if __name__ == "__main__":
    main()
