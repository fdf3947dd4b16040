#!/usr/bin/env python3
"""Where a request's instructions go: ferrocorn and the hyper floor under callgrind.

Each server runs under `valgrind --tool=callgrind`; after a warm-up, the counters are zeroed
(`callgrind_control --zero`), N requests are sent over keep-alive connections (the request
wrk sends in run.py's scenario), and the counters are dumped. The dump holds those N requests
only, so instructions / N is the user-space cost of one request (syscalls count as their
wrappers only). Functions are grouped by what they belong to (hyper, tokio, PyO3, ferrocorn's
own modules, the CPython interpreter, the allocator, libc); the Python floor
(benchmarks/python_floor.py: the scope and the app's coroutine, nothing else) is measured the
same way, by the difference of two iteration counts, so the interpreter's share can be split
into "the floor's Python work" and "everything else Python does" (asyncio, task and future
plumbing, the send/receive calls).

Self costs are read from the dump itself (callgrind_annotate 3.19 reports cycle-inclusive
sums for a dump taken with callgrind_control). ferrocorn runs on uvloop, as run.py's servers
do (`--loop asyncio` for the other loop); `--python` picks the venv (for example
benchmarks/.venv-cp313/bin/python, which `run.py --python ...3.13` made), `--keep DIR` keeps
the dumps for a closer look.

    python benchmarks/floor_callgrind.py                       # plaintext, 1 connection
    python benchmarks/floor_callgrind.py --scenario json --connections 16 --requests 4000

Needs valgrind (Debian: valgrind) and the venv run.py made (benchmarks/.venv, ferrocorn and
the floor server built: run `python benchmarks/run.py --quick --servers ferrocorn,floor` once).
The figures are instruction counts, steady from run to run; they say nothing about cache
misses or the kernel, so use them to compare code paths, not to predict req/s.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.run import APP_TARGET, FLOOR_BIN, SCENARIOS, free_port  # noqa: E402

# Groups, first match wins: (name, object-file pattern, symbol pattern).
GROUPS = [
    ("hyper (HTTP/1 parse, encode, dispatch)", None, r"hyper::|httparse::|http::|h2::"),
    ("tokio (I/O driver, scheduler, wakers)", None, r"tokio::|mio::"),
    ("PyO3 (GIL, conversions, calls)", None, r"pyo3::|pyo3_ffi::"),
    ("ferrocorn: scope building", None, r"ferrocorn::asgi::scope|ferrocorn::asgi::headers"),
    ("ferrocorn: send/receive validation", None, r"ferrocorn::asgi::"),
    ("ferrocorn: loop bridge and wake-ups", None, r"ferrocorn::(bridge|relay|event_loop|loop_)"),
    ("ferrocorn: connection and service", None, r"ferrocorn::"),
    ("allocator (mimalloc)", None, r"^_?mi_|mimalloc"),
    ("Rust std/core/alloc", None, r"^(std|core|alloc)::|<(std|core|alloc)::"),
    ("uvloop (libuv, its callbacks)", r"^loop\.cpython|uvloop", None),
    ("libc (memcpy, syscall wrappers)", r"libc\.so|ld-linux", None),
    # Last: the interpreter and its C modules (_asyncio, ...); every Rust symbol of the
    # extension was claimed above, so what is left in _ferrocorn's object is its C glue.
    ("CPython interpreter (asyncio's C and Python parts too)", r"python|libpython", None),
]


def request_bytes(scenario: dict, host: str) -> bytes:
    path = scenario["path"]
    head = (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: {scenario['accept']}\r\n"
        "Accept-Language: en-US,en;q=0.5\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode()


def read_response(sock: socket.socket, buf: bytearray) -> None:
    """One response off `sock` (Content-Length or chunked), leaving what follows in buf."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = bytes(buf[:end]).lower()
            m = re.search(rb"\r\ncontent-length:\s*(\d+)", head)
            if m:
                total = end + 4 + int(m.group(1))
                while len(buf) < total:
                    buf += sock.recv(65536) or _eof()
                del buf[:total]
                return
            if b"transfer-encoding: chunked" in head:
                while (stop := buf.find(b"\r\n0\r\n\r\n", end)) < 0:
                    buf += sock.recv(65536) or _eof()
                del buf[: stop + 7]
                return
            raise RuntimeError("response without a length: %r" % head[:200])
        buf += sock.recv(65536) or _eof()


def _eof() -> bytes:
    raise RuntimeError("the server closed the connection")


def drive(port: int, request: bytes, connections: int, total: int) -> None:
    """`total` requests, one in flight per connection, round-robin over the connections."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    bufs = [bytearray() for _ in socks]
    try:
        for _ in range(total // connections):
            for sock in socks:
                sock.sendall(request)
            for sock, buf in zip(socks, bufs):
                read_response(sock, buf)
    finally:
        for sock in socks:
            sock.close()


def wait_ready(port: int, proc: subprocess.Popen, request: bytes, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited (%s)" % proc.returncode)
        try:
            drive(port, request, 1, 1)
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the server did not answer within %.0f s" % timeout)


def measure_server(argv: list[str], port: int, request: bytes, args, outdir: Path) -> Path:
    out = outdir / ("callgrind.%s" % Path(argv[0]).name)
    vg = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=%s.%%p" % out,
        "--dump-line=no",
        "--compress-strings=no",
    ]
    proc = subprocess.Popen(vg + argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ready(port, proc, request, 120)
        drive(port, request, args.connections, args.warmup)
        subprocess.run(
            ["callgrind_control", "--zero", str(proc.pid)], check=True, stdout=subprocess.DEVNULL
        )
        drive(port, request, args.connections, args.requests)
        subprocess.run(
            ["callgrind_control", "--dump=measured", str(proc.pid)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    dumps = sorted(outdir.glob(out.name + ".%d.*" % proc.pid))
    if not dumps:
        raise RuntimeError("no callgrind dump for %s: %s" % (argv[0], proc.stderr.read()[-2000:]))
    return dumps[0]


def annotate(dump: Path) -> list[tuple[int, str]]:
    """Self instructions per function of a callgrind dump, as (cost, "function [object]").

    Read from the dump itself: callgrind_annotate 3.19 reports cycle-inclusive figures for a
    dump taken with callgrind_control (sums above 100%). A cost line counts for the current
    function unless it follows a `calls=` line (then it is that call's inclusive cost)."""
    costs: dict[tuple[str, str], int] = {}
    obj = fn = ""
    after_calls = False
    npos = 1  # position columns before the cost ("positions: line", or "instr line")
    with open(dump, encoding="utf-8", errors="replace") as f:
        for line in f:
            head = line[:1]
            if head.isdigit() or head in "+-*":
                if after_calls:
                    after_calls = False
                    continue
                parts = line.split()
                if len(parts) > npos:
                    costs[(obj, fn)] = costs.get((obj, fn), 0) + int(parts[npos])
            elif line.startswith("ob="):
                obj = line[3:].strip()
            elif line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                after_calls = True
            elif line.startswith("positions:"):
                npos = len(line.split()) - 1
    return [(c, "%s [%s]" % (fn, obj)) for (obj, fn), c in costs.items() if c]


def group_of(location: str) -> str:
    # "file:function [object]"
    func, _, obj = location.rpartition(" [")
    obj = obj.rstrip("]")
    for name, obj_pat, sym_pat in GROUPS:
        if obj_pat and re.search(obj_pat, Path(obj).name):
            return name
        if sym_pat and re.search(sym_pat, func):
            return name
    return "other (%s)" % (Path(obj).name or "?")


def breakdown(dump: Path, requests: int) -> dict:
    groups: dict[str, int] = {}
    top: list[tuple[int, str]] = []
    total = 0
    for cost, location in annotate(dump):
        total += cost
        g = group_of(location)
        groups[g] = groups.get(g, 0) + cost
        top.append((cost, location))
    top.sort(reverse=True)
    return {
        "per_request": total / requests,
        "groups": {g: c / requests for g, c in sorted(groups.items(), key=lambda kv: -kv[1])},
        "top": [(c / requests, loc[:110]) for c, loc in top[:30]],
    }


def python_floor_instructions(python: str, scenario: str, outdir: Path) -> float:
    """Instructions per request of python_floor.py's loop: two counts, the difference."""
    costs = []
    for n in (2000, 4000):
        out = outdir / ("callgrind.pyfloor.%d" % n)
        code = (
            "import sys; sys.path.insert(0, %r); "
            "from benchmarks import python_floor as f; f.callgrind_loop(%r, %d)"
            % (str(REPO), scenario, n)
        )
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=%s" % out,
                "--compress-strings=no",
                python,
                "-c",
                code,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        costs.append(sum(c for c, _ in annotate(out)))
    return (costs[1] - costs[0]) / 2000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="plaintext", choices=["plaintext", "json", "10k"])
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--python", default=str(HERE / ".venv" / "bin" / "python"))
    p.add_argument(
        "--loop",
        default="uvloop",
        choices=["uvloop", "asyncio"],
        help="ferrocorn's event loop (run.py's servers use uvloop)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--keep", metavar="DIR", help="write the callgrind dumps here and keep them")
    args = p.parse_args()
    scenario = SCENARIOS[args.scenario]
    results = {}
    with tempfile.TemporaryDirectory(prefix="floor-callgrind-") as tmp:
        outdir = Path(args.keep or tmp)
        outdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        request = request_bytes(scenario, "127.0.0.1:%d" % port)
        ferrocorn = [
            args.python,
            "-m",
            "ferrocorn",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--loop",
            args.loop,
            APP_TARGET,
        ]
        results["ferrocorn"] = breakdown(
            measure_server(ferrocorn, port, request, args, outdir), args.requests
        )
        port = free_port()
        request = request_bytes(scenario, "127.0.0.1:%d" % port)
        floor = [str(FLOOR_BIN), "--host", "127.0.0.1", "--port", str(port)]
        results["hyper floor"] = breakdown(
            measure_server(floor, port, request, args, outdir), args.requests
        )
        results["python floor"] = python_floor_instructions(args.python, args.scenario, outdir)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    fer, hyp, pyf = results["ferrocorn"], results["hyper floor"], results["python floor"]
    floor_total = hyp["per_request"] + pyf
    print(
        "%s, %d connection(s), %d requests, ferrocorn on %s: instructions per request"
        % (args.scenario, args.connections, args.requests, args.loop)
    )
    print("  ferrocorn      %9.0f" % fer["per_request"])
    print("  hyper floor    %9.0f" % hyp["per_request"])
    print("  python floor   %9.0f   (scope + app coroutine, python_floor.py)" % pyf)
    print("  ferrocorn / (hyper + python floor) = %.2fx" % (fer["per_request"] / floor_total))
    for name, res in (("ferrocorn", fer), ("hyper floor", hyp)):
        print("\n%s by group:" % name)
        for g, c in res["groups"].items():
            print("  %9.0f  %5.1f%%  %s" % (c, 100 * c / res["per_request"], g))
    print("\nferrocorn's top functions (self instructions per request):")
    for c, f in fer["top"]:
        print("  %9.0f  %s" % (c, f))


if __name__ == "__main__":
    main()
