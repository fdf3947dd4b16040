#!/usr/bin/env python3
"""Paired rounds of ws_h2_direct's echo servers under ws_bench.py's load generator.

    python3 benchmarks/ws_h2_direct/run.py --rounds 5 --variants h1,hyper,direct

Each round starts every variant's server afresh (``taskset -c 0``), runs ws_bench.py's raw
load generator against it (``--loadgen``, pinned to CPU 1 by ws_bench's own argv), and
records the server CPU µs per message; the variants' order rotates from round to round, so
drifting background load hits them alike. A variant is ``MODE[:nobatch][:noappcopy][:pieceN]`` (see
src/main.rs); ``h1`` runs the HTTP/1.1 load, the others HTTP/2 (h2c prior knowledge,
extended CONNECT). Prints a JSON line per measurement and a summary table of medians and
of each HTTP/2 variant's ratio to ``h1`` pair by pair. ``ferrocorn-h1`` and ``ferrocorn-h2``
run ferrocorn itself (``--ferrocorn-python``, ``--ferrocorn-pythonpath``) with ws_bench.py's
echo app, so its HTTP/1.1 cost and its HTTP/2 ratio are measured in the same rounds.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(HERE), "ws_bench.py")
REPO = os.path.dirname(os.path.dirname(HERE))
SIZES = {"1mib": 1 << 20, "text": 32}
CONNS = {"1mib": 8, "text": 64}


def server_argv(binary, variant):
    mode, *flags = variant.split(":")
    argv = ["taskset", "-c", "0", binary, "--mode", mode, "--port", "0"]
    for flag in flags:
        if flag == "nobatch":
            argv.append("--no-batch")
        elif flag == "noappcopy":
            argv.append("--no-app-copy")
        elif flag.startswith("piece"):
            argv += ["--piece", flag[len("piece") :]]
        else:
            raise SystemExit("unknown variant flag %r" % flag)
    return mode, argv


def start_ferrocorn(args):
    """ferrocorn itself with ws_bench.py's echo app, as ws_bench.py starts it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["taskset", "-c", "0", args.ferrocorn_python, "-m", "ferrocorn"]
    argv += ["benchmarks.ws_bench:app", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--no-access-log", "--log-level", "warning"]
    env = dict(os.environ, PYTHONPATH=args.ferrocorn_pythonpath)
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("ferrocorn did not start")


def measure(args, variant):
    binary, scenario, warmup, duration = args.binary, args.scenario, args.warmup, args.duration
    if variant.startswith("ferrocorn-"):
        # ferrocorn-h1 / ferrocorn-h2: the real server, for the cost C1 the deltas add to.
        mode = variant[len("ferrocorn-") :]
        proc, port = start_ferrocorn(args)
    else:
        mode, argv = server_argv(binary, variant)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        if not variant.startswith("ferrocorn-"):
            port = int(proc.stdout.readline().split()[-1])
        loadgen = [
            "taskset",
            "-c",
            "1",
            sys.executable,
            BENCH,
            "--loadgen",
            "--port",
            str(port),
            "--server-pid",
            str(proc.pid),
            "--conns",
            str(CONNS[scenario]),
            "--size",
            str(SIZES[scenario]),
            "--warmup",
            str(warmup),
            "--duration",
            str(duration),
            "--transport",
            "h1" if mode == "h1" else "h2",
        ]
        out = subprocess.run(
            loadgen, capture_output=True, text=True, timeout=warmup + duration + 60
        )
        if out.returncode != 0:
            raise RuntimeError("%s: %s" % (variant, out.stderr[-2000:]))
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        proc.terminate()
        proc.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="/work/target-ws2/release/ws_h2_direct")
    parser.add_argument("--variants", default="h1,hyper,direct")
    parser.add_argument("--ferrocorn-python", default=sys.executable)
    parser.add_argument("--ferrocorn-pythonpath", default=os.path.join(REPO, "python"))
    parser.add_argument("--scenario", default="1mib", choices=sorted(SIZES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=1.5)
    parser.add_argument("--duration", type=float, default=4.0)
    args = parser.parse_args()
    variants = args.variants.split(",")
    runs = {v: [] for v in variants}
    for rnd in range(args.rounds):
        k = rnd % len(variants)
        for variant in variants[k:] + variants[:k]:
            result = measure(args, variant)
            result.update(variant=variant, round=rnd, at=time.strftime("%H:%M:%S"))
            print(json.dumps(result), flush=True)
            runs[variant].append(result)
    print()
    print("| variant | median server µs/msg | rounds (µs/msg) | server CPU | msgs/s |")
    print("|---|---:|---|---:|---:|")
    for variant in variants:
        us = [r["server_us_per_msg"] for r in runs[variant]]
        print(
            "| %s | %.1f | %s | %.0f%% | %.0f |"
            % (
                variant,
                statistics.median(us),
                ", ".join("%.0f" % u for u in us),
                100 * statistics.median(r["server_cpu"] for r in runs[variant]),
                statistics.median(r["msgs_per_s"] for r in runs[variant]),
            )
        )
    for base in ("h1", "ferrocorn-h1"):
        if base not in runs:
            continue
        print()
        for variant in variants:
            if variant == base or variant.startswith("ferrocorn-") != base.startswith("ferrocorn-"):
                continue
            pairs = [
                b["server_us_per_msg"] / a["server_us_per_msg"]
                for a, b in zip(runs[base], runs[variant])
            ]
            deltas = [
                b["server_us_per_msg"] - a["server_us_per_msg"]
                for a, b in zip(runs[base], runs[variant])
            ]
            print(
                "%s / %s: median %.2fx (pairs %s); minus %s: median %.0f µs (pairs %s)"
                % (
                    variant,
                    base,
                    statistics.median(pairs),
                    ", ".join("%.2f" % p for p in pairs),
                    base,
                    statistics.median(deltas),
                    ", ".join("%.0f" % d for d in deltas),
                )
            )


if __name__ == "__main__":
    main()
