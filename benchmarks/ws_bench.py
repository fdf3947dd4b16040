#!/usr/bin/env python3
"""WebSocket echo benchmark: ferrocorn vs granian vs uvicorn (standalone; stdlib only).

    python3 benchmarks/ws_bench.py                      # all servers, both scenarios, 3 rounds
    python3 benchmarks/ws_bench.py --servers ferrocorn --rounds 1 --duration 3
    python3 benchmarks/ws_bench.py --client-ceiling     # also measure the websockets-library client

Every server runs the same pure-ASGI echo app (``app`` below), one worker pinned to CPU 0
(``taskset -c 0``); the load generator is pinned to CPU 1. Scenarios:

* ``text``:  N connections (default 64), each sends a small text message and waits for its echo,
  again and again, for a fixed duration -> messages/s (round trips).
* ``1mib``:  N connections (default 8), 1 MiB binary messages round-trip -> MB/s (echoed payload).

The load generator is a single-threaded epoll loop over raw sockets that sends one pre-built,
pre-masked frame per round trip and only parses frame headers of the echoes (a Python client
built on the ``websockets`` library is several times slower and would be the bottleneck; see
``--client-ceiling``). A fresh server process is started for every round; each round has a
warm-up that is not counted; the reported figure is the median of the rounds. The load
generator also reads the CPU time the server process tree and itself used in the measured
window, which shows which side was saturated.

Servers: ferrocorn from this checkout (``--ferrocorn-pythonpath``, default ``python/``) run by
``benchmarks/.venv/bin/python`` (which has uvloop), granian and uvicorn from
``benchmarks/.venv`` (``benchmarks/requirements.txt``). Results go to
``benchmarks/WS_RESULTS.md`` (``--out``).
"""

import argparse
import json
import os
import platform
import random
import select
import shlex
import socket
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
VENV_BIN = os.path.join(HERE, ".venv", "bin")
APP_TARGET = "benchmarks.ws_bench:app"
SERVER_CPU = "0"
CLIENT_CPU = "1"
MiB = 1 << 20


# ---------------------------------------------------------------------------- the app


async def app(scope, receive, send):
    """Pure ASGI echo: every WebSocket message is sent back as is."""
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return
            if message.get("text") is not None:
                await send({"type": "websocket.send", "text": message["text"]})
            else:
                await send({"type": "websocket.send", "bytes": message["bytes"]})
    elif scope["type"] == "http":
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ws echo"})
    elif scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return


# ---------------------------------------------------------------------------- load generator


def client_frame(opcode, payload):
    key = bytes(random.getrandbits(8) for _ in range(4))
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    repeated = (key * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big")
    return head + key + masked


def handshake(port, path="/"):
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(
        (
            "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n" % (path, port)
        ).encode()
    )
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("handshake: connection closed")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError("handshake refused: %r" % head[:200])
    sock.setblocking(False)
    return sock, rest


class Conn:
    __slots__ = ("sock", "fd", "hdr", "remaining", "opcode", "out", "out_pos")

    def __init__(self, sock):
        self.sock = sock
        self.fd = sock.fileno()
        self.hdr = b""  # an incomplete frame header carried over
        self.remaining = 0  # payload bytes of the current frame still to come
        self.opcode = -1
        self.out = None  # memoryview of a frame being written
        self.out_pos = 0


def proc_tree_cpu(pid):
    """utime+stime (seconds) of ``pid`` and its descendants, from /proc."""
    if not pid:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    parents = {}
    times = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    tree = {pid}
    changed = True
    while changed:
        changed = False
        for p, pp in parents.items():
            if pp in tree and p not in tree:
                tree.add(p)
                changed = True
    return sum(times.get(p, 0.0) for p in tree)


def run_raw_client(port, conns, size, warmup, duration, server_pid):
    """The epoll load generator; returns a result dict."""
    if size < 1024:
        opcode, payload = 0x1, (b"hello websocket " * (size // 16 + 1))[:size]
    else:
        opcode, payload = 0x2, bytes(range(256)) * (size // 256)
    frame = client_frame(opcode, payload)
    ep = select.epoll()
    table = {}
    for _ in range(conns):
        sock, rest = handshake(port)
        if rest:
            raise RuntimeError("unexpected data after the 101")
        c = Conn(sock)
        table[c.fd] = c
        ep.register(c.fd, select.EPOLLIN)
    IN, OUT = select.EPOLLIN, select.EPOLLOUT

    def start_send(c):
        try:
            n = c.sock.send(frame)
        except BlockingIOError:
            n = 0
        if n < len(frame):
            c.out = memoryview(frame)
            c.out_pos = n
            ep.modify(c.fd, IN | OUT)

    t0 = time.monotonic()
    t_warm = t0 + warmup
    t_end = t_warm + duration
    counting = False
    messages = 0
    pings = 0
    cpu0 = srv0 = 0.0
    for c in table.values():
        start_send(c)
    now = t0
    while now < t_end:
        for fd, ev in ep.poll(0.05):
            c = table[fd]
            if ev & OUT and c.out is not None:
                try:
                    n = c.sock.send(c.out[c.out_pos :])
                except BlockingIOError:
                    n = 0
                c.out_pos += n
                if c.out_pos >= len(c.out):
                    c.out = None
                    ep.modify(fd, IN)
            if not ev & (IN | select.EPOLLHUP | select.EPOLLERR):
                continue
            try:
                data = c.sock.recv(1 << 18)
            except BlockingIOError:
                continue
            if not data:
                raise RuntimeError("server closed a connection")
            if c.hdr:
                data = c.hdr + data
                c.hdr = b""
            pos, end = 0, len(data)
            while pos < end:
                if c.remaining:
                    take = min(c.remaining, end - pos)
                    c.remaining -= take
                    pos += take
                    if c.remaining:
                        break
                else:
                    if end - pos < 2:
                        c.hdr = data[pos:]
                        break
                    b0 = data[pos]
                    n = data[pos + 1] & 0x7F
                    hl = 2
                    if n == 126:
                        hl = 4
                        if end - pos < 4:
                            c.hdr = data[pos:]
                            break
                        n = (data[pos + 2] << 8) | data[pos + 3]
                    elif n == 127:
                        hl = 10
                        if end - pos < 10:
                            c.hdr = data[pos:]
                            break
                        n = int.from_bytes(data[pos + 2 : pos + 10], "big")
                    pos += hl
                    c.opcode = b0 & 0x0F
                    c.remaining = n
                    if n and pos < end:
                        continue
                    if n:
                        break
                # a whole frame is in
                op = c.opcode
                if op == 0x1 or op == 0x2:
                    if counting:
                        messages += 1
                    start_send(c)
                elif op == 0x9:
                    pings += 1
                elif op == 0x8:
                    raise RuntimeError("server sent a close frame")
        now = time.monotonic()
        if not counting and now >= t_warm:
            counting = True
            messages = 0
            cpu0 = time.process_time()
            srv0 = proc_tree_cpu(server_pid)
            t_start = now
    elapsed = now - t_start
    client_cpu = time.process_time() - cpu0
    server_cpu = proc_tree_cpu(server_pid) - srv0
    for c in table.values():
        c.sock.close()
    return {
        "messages": messages,
        "seconds": elapsed,
        "msgs_per_s": messages / elapsed,
        "mb_per_s": messages * size / elapsed / 1e6,
        "client_cpu": client_cpu / elapsed,
        "server_cpu": server_cpu / elapsed,
        "pings": pings,
    }


def run_websockets_client(port, conns, size, warmup, duration, server_pid):
    """The same round trips with the ``websockets`` library (asyncio): its ceiling."""
    import asyncio

    from websockets.asyncio.client import connect

    message = ("hello websocket " * (size // 16 + 1))[:size] if size < 1024 else bytes(size)
    state = {"counting": False, "messages": 0, "stop": False}

    async def one():
        async with connect(
            "ws://127.0.0.1:%d/" % port,
            proxy=None,
            compression=None,
            max_size=None,
            ping_interval=None,
        ) as ws:
            while not state["stop"]:
                await ws.send(message)
                await ws.recv()
                if state["counting"]:
                    state["messages"] += 1

    async def main():
        tasks = [asyncio.ensure_future(one()) for _ in range(conns)]
        await asyncio.sleep(warmup)
        state["counting"] = True
        cpu0, srv0, t0 = time.process_time(), proc_tree_cpu(server_pid), time.monotonic()
        await asyncio.sleep(duration)
        state["counting"] = False
        elapsed = time.monotonic() - t0
        result = {
            "messages": state["messages"],
            "seconds": elapsed,
            "msgs_per_s": state["messages"] / elapsed,
            "mb_per_s": state["messages"] * size / elapsed / 1e6,
            "client_cpu": (time.process_time() - cpu0) / elapsed,
            "server_cpu": (proc_tree_cpu(server_pid) - srv0) / elapsed,
        }
        state["stop"] = True
        await asyncio.wait(tasks, timeout=10)
        return result

    return asyncio.run(main())


# ---------------------------------------------------------------------------- servers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(name, port, args):
    py = os.path.join(VENV_BIN, "python")
    common = ["--host", "127.0.0.1", "--port", str(port)]
    if name == "ferrocorn":
        return (
            [args.ferrocorn_python, "-m", "ferrocorn", APP_TARGET]
            + common
            + ["--no-access-log", "--log-level", "warning"]
        )
    if name == "granian":
        return (
            [os.path.join(VENV_BIN, "granian"), "--interface", "asgi", "--ws"]
            + common
            + [
                "--workers",
                "1",
                "--runtime-mode",
                "st",
                "--runtime-threads",
                "1",
                "--http",
                "1",
                "--no-access-log",
                "--log-level",
                "warning",
                APP_TARGET,
            ]
        )
    if name == "uvicorn":
        return (
            [py, "-m", "uvicorn", APP_TARGET]
            + common
            + ["--ws", "websockets", "--no-access-log", "--log-level", "warning"]
        )
    raise ValueError(name)


def nice_prefix(args):
    return ["nice", "-n", str(args.nice)] if args.nice else []


def start_server(name, args):
    port = free_port()
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if name == "ferrocorn":
        env["PYTHONPATH"] = args.ferrocorn_pythonpath
    argv = nice_prefix(args) + ["taskset", "-c", SERVER_CPU] + server_command(name, port, args)
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited: %s" % (name, proc.stderr.read().decode()[-2000:]))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port, argv
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("%s did not start" % name)


def stop_server(proc):
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


SCENARIOS = {
    "text": dict(
        title="small text messages (32 B) round-trip", size=32, unit="msgs/s", key="msgs_per_s"
    ),
    "1mib": dict(title="1 MiB binary messages round-trip", size=MiB, unit="MB/s", key="mb_per_s"),
}


def loadgen_argv(args, port, pid, scenario, client="raw"):
    conns = args.conns if scenario == "text" else args.big_conns
    python = args.client_python or sys.executable
    return nice_prefix(args) + [
        "taskset",
        "-c",
        CLIENT_CPU,
        python,
        os.path.abspath(__file__),
        "--loadgen",
        "--port",
        str(port),
        "--server-pid",
        str(pid),
        "--conns",
        str(conns),
        "--size",
        str(SCENARIOS[scenario]["size"]),
        "--warmup",
        str(args.warmup),
        "--duration",
        str(args.duration),
        "--client",
        client,
    ]


def measure(args, name, scenario, client="raw"):
    proc, port, argv = start_server(name, args)
    try:
        out = subprocess.run(
            loadgen_argv(args, port, proc.pid, scenario, client),
            capture_output=True,
            timeout=args.warmup + args.duration + 120,
        )
        if out.returncode != 0:
            raise RuntimeError(
                "load generator failed against %s: %s" % (name, out.stderr.decode()[-2000:])
            )
        result = json.loads(out.stdout.decode().strip().splitlines()[-1])
    finally:
        stop_server(proc)
    return result, argv


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--servers", default="ferrocorn,granian,uvicorn")
    parser.add_argument("--scenarios", default="text,1mib")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--conns", type=int, default=64, help="connections, text scenario")
    parser.add_argument("--big-conns", type=int, default=8, help="connections, 1mib scenario")
    parser.add_argument("--ferrocorn-python", default=os.path.join(VENV_BIN, "python"))
    parser.add_argument("--ferrocorn-pythonpath", default=os.path.join(REPO, "python"))
    parser.add_argument(
        "--client-python",
        default=None,
        help="interpreter for the load generator (default: this one)",
    )
    parser.add_argument(
        "--client-ceiling",
        action="store_true",
        help="also run the websockets-library client against ferrocorn",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run servers and load generator under `nice -n N` (negative: a "
        "higher priority than concurrent background work; needs root)",
    )
    parser.add_argument("--note", default="", help="a line added to the report (build, ...)")
    parser.add_argument("--out", default=os.path.join(HERE, "WS_RESULTS.md"))
    # load generator mode (internal)
    parser.add_argument("--loadgen", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int)
    parser.add_argument("--server-pid", type=int, default=0)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--client", default="raw", choices=["raw", "websockets"])
    args = parser.parse_args()

    if args.loadgen:
        runner = run_raw_client if args.client == "raw" else run_websockets_client
        result = runner(
            args.port, args.conns, args.size, args.warmup, args.duration, args.server_pid
        )
        print(json.dumps(result))
        return 0

    servers = args.servers.split(",")
    scenarios = args.scenarios.split(",")
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_before = loadavg()
    results = {}
    commands = {}
    for scenario in scenarios:
        for rnd in range(args.rounds):
            for name in servers:  # interleaved, so drifting background load hits all alike
                result, argv = measure(args, name, scenario)
                commands[name] = argv
                results.setdefault((scenario, name), []).append(result)
                print(
                    "%-5s round %d %-10s %10.1f %s  server cpu %3.0f%%  client cpu %3.0f%%"
                    % (
                        scenario,
                        rnd + 1,
                        name,
                        result[SCENARIOS[scenario]["key"]],
                        SCENARIOS[scenario]["unit"],
                        100 * result["server_cpu"],
                        100 * result["client_cpu"],
                    ),
                    flush=True,
                )
    ceiling = None
    if args.client_ceiling and "ferrocorn" in servers:
        ceiling = []
        for rnd in range(args.rounds):
            result, _ = measure(args, "ferrocorn", "text", client="websockets")
            ceiling.append(result)
            print(
                "text  round %d ferrocorn, websockets client %10.1f msgs/s  server cpu %3.0f%%"
                "  client cpu %3.0f%%"
                % (
                    rnd + 1,
                    result["msgs_per_s"],
                    100 * result["server_cpu"],
                    100 * result["client_cpu"],
                ),
                flush=True,
            )
    load_after = loadavg()
    write_report(
        args, servers, scenarios, results, commands, ceiling, started, load_before, load_after
    )
    print("wrote", args.out)
    return 0


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def write_report(
    args, servers, scenarios, results, commands, ceiling, started, load_before, load_after
):
    lines = ["# WebSocket benchmark (echo)", ""]
    lines.append(
        "Generated by `%s` on %s."
        % (" ".join(["python3", "benchmarks/ws_bench.py"] + sys.argv[1:]), started)
    )
    lines.append("")
    lines.append(
        "One server worker pinned to CPU 0, the load generator (one epoll loop over raw sockets,"
        " pre-built masked frames, %s %s) pinned to CPU 1; a fresh server process per round,"
        " %.0f s warm-up + %.0f s measured, median of %d rounds (rounds interleaved across"
        " servers). Text: %d connections, 32-byte text messages, one in flight per connection."
        " 1 MiB: %d connections, 1 MiB binary messages, one in flight per connection; MB/s"
        " counts the echoed payload (10^6 bytes)."
        % (
            platform.python_implementation(),
            platform.python_version(),
            args.warmup,
            args.duration,
            args.rounds,
            args.conns,
            args.big_conns,
        )
    )
    lines.append("")
    lines.append(
        "Machine: %d cores, %s; **other work was running concurrently on this machine** "
        "(load average %s before, %s after), so absolute numbers are noisy; compare the "
        "servers within this run only. CPU%% is the CPU time used during the measured "
        "window (100%% = one core); a server at ~100%% is saturated. When neither side is "
        "near 100%%, both were starved by the concurrent work and the throughput mostly "
        "reflects their CPU share: the per-server-CPU-second column (throughput divided by "
        "the server's CPU use) is then the steadier comparison."
        % (os.cpu_count(), platform.platform(), load_before, load_after)
    )
    lines.append("")
    for scenario in scenarios:
        spec = SCENARIOS[scenario]
        key = spec["key"]
        lines.append("## %s (%s)" % (spec["title"], spec["unit"]))
        lines.append("")
        lines.append(
            "| server | median %s | rounds | server CPU | client CPU | %s per server "
            "CPU-second |" % (spec["unit"], spec["unit"].split("/")[0])
        )
        lines.append("|---|---:|---|---:|---:|---:|")
        medians = {}
        efficiency = {}
        for name in servers:
            runs = results.get((scenario, name), [])
            if not runs:
                continue
            medians[name] = median_of(runs, key)
            efficiency[name] = (
                statistics.median(r[key] / r["server_cpu"] for r in runs if r["server_cpu"] > 0)
                if any(r["server_cpu"] > 0 for r in runs)
                else 0.0
            )
            lines.append(
                "| %s | %.1f | %s | %.0f%% | %.0f%% | %.0f |"
                % (
                    name,
                    medians[name],
                    ", ".join("%.1f" % r[key] for r in runs),
                    100 * median_of(runs, "server_cpu"),
                    100 * median_of(runs, "client_cpu"),
                    efficiency[name],
                )
            )
        lines.append("")
        if "ferrocorn" in medians:
            ratios = []
            for other in ("granian", "uvicorn"):
                if medians.get(other):
                    ratios.append(
                        "ferrocorn / %s = **%.2f×** (per server CPU-second: %.2f×)"
                        % (
                            other,
                            medians["ferrocorn"] / medians[other],
                            efficiency["ferrocorn"] / efficiency[other]
                            if efficiency.get(other)
                            else float("nan"),
                        )
                    )
            if ratios:
                lines.append("Ratios (same run): " + "; ".join(ratios) + ".")
                lines.append("")
    lines.append("## Load generator")
    lines.append("")
    text_runs = [r for (sc, _), runs in results.items() if sc == "text" for r in runs]
    if text_runs:
        per_msg = statistics.median(
            r["client_cpu"] / r["msgs_per_s"] * 1e6 for r in text_runs if r["msgs_per_s"]
        )
        lines.append(
            "The raw client spends about %.0f µs of CPU per text round trip (mostly loopback TCP"
            " system calls), about as much as the fastest server here: on an idle machine, with"
            " a whole core each, the text figure of the fastest server would be close to"
            " client-bound (%.0f msgs/s for one core of client)." % (per_msg, 1e6 / per_msg)
        )
        lines.append("")
    if ceiling:
        lines.append(
            "Ceiling of a client built on the `websockets` library (asyncio, one process on"
            " CPU 1), same text scenario against ferrocorn: median %.1f msgs/s (%s), client CPU"
            " %.0f%%, server CPU %.0f%%, i.e. %.0f msgs per client CPU-second, against %.0f for"
            " the raw client: it would be the bottleneck, so the tables use the raw client."
            % (
                median_of(ceiling, "msgs_per_s"),
                ", ".join("%.1f" % r["msgs_per_s"] for r in ceiling),
                100 * median_of(ceiling, "client_cpu"),
                100 * median_of(ceiling, "server_cpu"),
                statistics.median(
                    r["msgs_per_s"] / r["client_cpu"] for r in ceiling if r["client_cpu"]
                ),
                statistics.median(
                    r["msgs_per_s"] / r["client_cpu"]
                    for r in results.get(("text", "ferrocorn"), [])
                    if r["client_cpu"]
                )
                if results.get(("text", "ferrocorn"))
                else float("nan"),
            )
        )
        lines.append("")
    lines.append("## Exact server commands")
    lines.append("")
    for name in servers:
        if name in commands:
            lines.append("- %s: `%s`" % (name, shlex.join(commands[name])))
    lines.append("")
    lines.append("ferrocorn's PYTHONPATH: `%s`." % args.ferrocorn_pythonpath)
    lines.append("")
    if args.note:
        lines.append(args.note)
        lines.append("")
    with open(args.out, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
