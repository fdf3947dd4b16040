"""HTTP/3 throughput: ferrocorn ``--http3`` against hypercorn ``--quic-bind``, and ferrocorn's
own HTTP/3 against its HTTP/2 on TLS, one worker each, in one run.

The HTTP/3 load is ``benchmarks/h3load`` (our own small generator: HTTP/3 framing of its own
on quinn; built here with ``cargo build --release`` in its own workspace, into
``CARGO_TARGET_DIR`` when that is set), the HTTP/2 one h2load. The app is
``h2_tls:app`` (a plaintext "Hello, World!"), the certificate a self-signed one (openssl).
Each server runs pinned to CPU 0, the load generator to CPU 1; the server's CPU time is read
from /proc around each run, giving CPU µs per request beside req/s. Each round also shows
the load generator's own CPU per request and how busy its core was by anything: a round
where other work shared that core is one where the load generator, not the server, set
the rate. hypercorn needs aioquic in its environment (``--hypercorn PATH``, or
benchmarks/.venv/bin/hypercorn).

    python benchmarks/h3_bench.py [--duration 5] [--connections 4] [--streams 16] [--rounds 3]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from h2_tls import (  # noqa: E402
    CLIENT_CPU,
    SERVER_CPU,
    find_tool,
    free_port,
    pinned,
    run_h2load,
    wait_port,
)

from tests.support.tls_certs import certs  # noqa: E402

H3LOAD_DIR = os.path.join(HERE, "h3load")


def build_h3load():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=H3LOAD_DIR, check=True)
    # cargo puts the binary under CARGO_TARGET_DIR when that is set (relative to the project).
    target = os.path.join(H3LOAD_DIR, os.environ.get("CARGO_TARGET_DIR", "target"))
    return os.path.join(target, "release", "h3load")


def process_tree(pid):
    """``pid`` and its descendants (hypercorn serves from a child process)."""
    pids, i = [pid], 0
    while i < len(pids):
        try:
            for task in os.listdir(f"/proc/{pids[i]}/task"):
                with open(f"/proc/{pids[i]}/task/{task}/children") as f:
                    pids += [int(x) for x in f.read().split()]
        except OSError:
            pass
        i += 1
    return pids


def cpu_seconds(pid):
    """utime + stime of the process tree, in seconds."""
    ticks = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def core_busy(cpu):
    """(busy, total) jiffies of one CPU from /proc/stat (None where there is no such file)."""
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith(f"cpu{cpu} "):
                    ticks = [int(x) for x in line.split()[1:]]
                    idle = ticks[3] + ticks[4]  # idle + iowait
                    return sum(ticks[:8]) - idle, sum(ticks[:8])
    except OSError:
        pass
    return None


def children_cpu():
    """CPU seconds of this process's finished children (the load generator's runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def server_argv(name, port, tls, hypercorn):
    if name.startswith("ferrocorn"):
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
            "--ssl-certfile",
            tls[0],
            "--ssl-keyfile",
            tls[1],
        ]
        if name == "ferrocorn-h3":
            argv.append("--http3")
        return argv
    return [
        hypercorn,
        "--bind",
        f"127.0.0.1:{port}",
        "--quic-bind",
        f"127.0.0.1:{port}",
        "--workers",
        "1",
        "--log-level",
        "warning",
        "--certfile",
        tls[0],
        "--keyfile",
        tls[1],
        "h2_tls:app",
    ]


def run_h3load(h3load, port, cert, args):
    out = subprocess.run(
        pinned(
            [
                h3load,
                "--port",
                str(port),
                "--ca",
                cert,
                "--connections",
                str(args.connections),
                "--streams",
                str(args.streams),
                "--duration",
                str(args.duration),
            ],
            CLIENT_CPU,
            args.pin,
        ),
        capture_output=True,
        text=True,
    )
    try:
        result = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None, "h3load output not understood: " + (out.stdout + out.stderr)[-300:]
    return result, ""


def measure(name, load, tls, args, tools):
    port = free_port()
    proc = subprocess.Popen(
        pinned(server_argv(name, port, tls, tools.get("hypercorn")), SERVER_CPU, args.pin),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=HERE,
    )
    try:
        wait_port(port, proc)
        time.sleep(0.5)  # the UDP socket is bound right after the TCP one; let start-up end
        before = cpu_seconds(proc.pid)
        client_before, core_before = children_cpu(), core_busy(CLIENT_CPU)
        if load == "h3":
            result, note = run_h3load(tools["h3load"], port, tls[2], args)
            if result is None:
                return None, note
            requests, rps = result["requests"], result["rps"]
            note = f"{result['failed']} failed" if result["failed"] else ""
        else:
            # No warm-up: the server's CPU is read around the whole h2load run, and h3load
            # has none either, so both figures cover the same span as their request counts.
            rps, note = run_h2load(f"https://127.0.0.1:{port}/", args, warm_up=0)
            if rps is None:
                return None, note
            requests = rps * args.duration
        used = cpu_seconds(proc.pid) - before
        client = children_cpu() - client_before
        core_after = core_busy(CLIENT_CPU)
        # How busy the load generator's core was, by anything: when other work shares it,
        # the load generator falls behind and the server waits (H3_RESULTS.md, "The stalls").
        busy = None
        if core_before and core_after and core_after[1] > core_before[1]:
            busy = (core_after[0] - core_before[0]) / (core_after[1] - core_before[1])
        return {
            "rps": rps,
            "cpu_us_per_req": used * 1e6 / max(requests, 1),
            "client_cpu_us_per_req": client * 1e6 / max(requests, 1),
            "load_core_busy": busy,
            "note": note,
        }, ""
    except RuntimeError as exc:
        return None, str(exc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of each load, interleaved; medians shown"
    )
    parser.add_argument("--hypercorn", default=None)
    parser.add_argument("--no-pin", dest="pin", action="store_false")
    args = parser.parse_args()
    tools = {"h3load": build_h3load(), "hypercorn": find_tool("hypercorn", args.hypercorn)}
    runs = [("ferrocorn-h3", "h3"), ("ferrocorn-h2", "h2")]
    if tools["hypercorn"]:
        runs.append(("hypercorn-h3", "h3"))
    else:
        print("hypercorn not found: its HTTP/3 run is skipped", file=sys.stderr)
    samples = {name: [] for name, _ in runs}
    # A CA-signed certificate: rustls (h3load) refuses a self-signed one as its own anchor.
    c = certs()
    tls = (c.path("server.pem"), c.path("server.key"), c.ca_pem)
    for round_no in range(args.rounds):
        for name, load in runs:
            result, note = measure(name, load, tls, args, tools)
            if result:
                samples[name].append(result)
            shown = f"failed: {note}"
            if result:
                busy = result["load_core_busy"]
                shown = (
                    f"{result['rps']:10.0f} req/s  {result['cpu_us_per_req']:7.1f} CPU µs/req  "
                    f"load generator {result['client_cpu_us_per_req']:4.1f} µs/req"
                    + (f", its core {busy:4.0%} busy" if busy is not None else "")
                    + f" {result['note']}"
                )
            print(f"{round_no + 1}: {name:14} {shown}", flush=True)
    results = {
        name: {
            "rps": median([r["rps"] for r in rs]),
            "cpu_us_per_req": median([r["cpu_us_per_req"] for r in rs]),
            "rounds": rs,
        }
        for name, rs in samples.items()
        if rs
    }
    for name, result in results.items():
        print(
            f"median {name:14} {result['rps']:10.0f} req/s  "
            f"{result['cpu_us_per_req']:7.1f} CPU µs/req",
            flush=True,
        )
    h3, h2, hyper = (results.get(k) for k in ("ferrocorn-h3", "ferrocorn-h2", "hypercorn-h3"))
    if h3 and h2:
        print(f"ferrocorn HTTP/3 / HTTP/2+TLS req/s: {h3['rps'] / h2['rps']:.2f}")
        print(
            "ferrocorn HTTP/2+TLS / HTTP/3 server CPU per request: "
            f"{h2['cpu_us_per_req'] / h3['cpu_us_per_req']:.2f}"
        )
    if h3 and hyper and hyper["rps"]:
        print(f"ferrocorn / hypercorn HTTP/3 req/s: {h3['rps'] / hyper['rps']:.1f}x")
        print(
            "hypercorn / ferrocorn HTTP/3 server CPU per request: "
            f"{hyper['cpu_us_per_req'] / h3['cpu_us_per_req']:.1f}x"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
