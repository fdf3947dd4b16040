"""Soak run: a mixed load against a ferrocorn server this script starts, watching for leaks.

    python benchmarks/soak.py [--duration 600] [--workers 4] [--interval 10]
                               [--wrk-connections 64]

Each worker thread loops over a random mix of GET ``/``, POST ``/echo`` (random body, checked),
a streamed download (``/stream``, size checked) and a WebSocket echo session (``websockets``
sync client, a few text/binary messages, checked), against ``benchmarks/soak_app.py``.
With ``--wrk-connections N`` a ``wrk`` process adds bulk load for the whole run: N keep-alive
connections mixing GET ``/`` and POST ``/echo`` (a 1 KiB body), every response checked by a Lua
hook for status 200 and the exact body length (millions of requests in a ten-minute run, which
the Python threads alone cannot produce).
Every ``--interval`` seconds the server's RSS (VmRSS), open fds (/proc/PID/fd) and asyncio
task count (the app's ``/tasks`` route) are sampled.

After the warm-up (the first 20% of the run, ``--warmup``) the RSS growth is reported; the run fails
(exit 1) when RSS grew more than ``--max-rss-growth`` percent (default 5) between the end of
the warm-up and the end of the run, when fds or tasks trend upward (the quiescent values after
the load exceed the quiescent values before it, or the samples under load rise at every step
by more than the slack), on any request error, or if the server dies.
The server runs under ``$FERROCORN_TEST_PYTHON`` or this interpreter.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from tests.support.helpers import start_server  # noqa: E402

FD_SLACK = 3
TASK_SLACK = 1


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def get_tasks(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/tasks", headers={"Connection": "close"})
        resp = conn.getresponse()
        return int(resp.read())
    finally:
        conn.close()


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"get": 0, "echo": 0, "stream": 0, "ws_sessions": 0, "ws_messages": 0}
        self.errors = []

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def error(self, what):
        with self.lock:
            if len(self.errors) < 50:
                self.errors.append(what)
            self.counts.setdefault("errors", 0)
            self.counts["errors"] += 1


class Worker(threading.Thread):
    def __init__(self, port, stats, stop, seed):
        threading.Thread.__init__(self, daemon=True)
        self.port = port
        self.stats = stats
        self.stop = stop
        self.rng = random.Random(seed)
        self.conn = None

    def _http(self, method, target, body=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            self.conn.request(method, target, body=body)
            resp = self.conn.getresponse()
            data = resp.read()
        except Exception:
            self.conn.close()
            self.conn = None
            raise
        if resp.will_close:
            self.conn.close()
            self.conn = None
        return resp.status, data

    def do_get(self):
        status, data = self._http("GET", "/")
        if status != 200 or data != b"hello, soak":
            raise AssertionError("GET /: %d %r" % (status, data[:100]))
        self.stats.add("get")

    def do_echo(self):
        body = os.urandom(self.rng.choice((0, 10, 1000, 70000, 300000)))
        status, data = self._http("POST", "/echo", body)
        if status != 200 or data != body:
            raise AssertionError("POST /echo: %d, %d of %d bytes" % (status, len(data), len(body)))
        self.stats.add("echo")

    def do_stream(self):
        size = self.rng.choice((1, 16384, 262144, 1048576))
        status, data = self._http("GET", "/stream?size=%d" % size)
        if status != 200 or len(data) != size:
            raise AssertionError("GET /stream: %d, %d of %d bytes" % (status, len(data), size))
        self.stats.add("stream")

    def do_ws(self):
        from websockets.sync.client import connect

        # No client keepalive pings: the sessions are short, and the keepalive thread trips
        # over a threading bug of PyPy 3.9 ("cannot release un-acquired lock").
        with connect(
            "ws://127.0.0.1:%d/ws" % self.port,
            open_timeout=30,
            close_timeout=10,
            ping_interval=None,
        ) as ws:
            for _ in range(self.rng.randint(1, 10)):
                if self.rng.random() < 0.5:
                    msg = "soak-%d" % self.rng.randint(0, 10**9)
                else:
                    msg = os.urandom(self.rng.choice((1, 100, 5000)))
                ws.send(msg)
                if ws.recv(timeout=30) != msg:
                    raise AssertionError("websocket echo mismatch")
                self.stats.add("ws_messages")
        self.stats.add("ws_sessions")

    def run(self):
        actions = [self.do_get] * 5 + [self.do_echo] * 2 + [self.do_stream] + [self.do_ws]
        while not self.stop.is_set():
            action = self.rng.choice(actions)
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - counted and reported
                self.stats.error("%s: %s: %s" % (action.__name__, type(exc).__name__, exc))
        if self.conn is not None:
            self.conn.close()


WRK_ECHO_SIZE = 1024
# Every 4th request is a POST /echo; a response is wrong unless it is a 200 with the body
# length of one of the two routes (responses on a connection come back in request order, but
# wrk's Lua state is per thread, not per connection, so the length is the check).
WRK_SCRIPT = """
local n = 0
bad = 0  -- global: done() reads it from each thread
local get = wrk.format("GET", "/")
local echo = wrk.format("POST", "/echo", {["Content-Type"] = "application/octet-stream"},
                        string.rep("e", %d))
request = function()
  n = n + 1
  if n %% 4 == 0 then return echo end
  return get
end
response = function(status, headers, body)
  if status ~= 200 or (#body ~= 11 and #body ~= %d) then bad = bad + 1 end
end
done = function(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do total = total + t:get("bad") end
  io.write(string.format("wrong responses: %%d\\n", total))
end
setup = function(thread) table.insert(threads, thread) end
threads = {}
""" % (WRK_ECHO_SIZE, WRK_ECHO_SIZE)


class WrkLoad(threading.Thread):
    """Bulk GET/echo load from wrk for ``duration`` seconds; ``result`` holds its counts."""

    def __init__(self, port, connections, duration):
        threading.Thread.__init__(self, daemon=True)
        self.port, self.connections, self.duration = port, connections, duration
        self.result = None

    def run(self):
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write(WRK_SCRIPT)
        try:
            out = subprocess.run(
                [
                    "wrk",
                    "-t1",
                    "-c%d" % self.connections,
                    "-d%ds" % max(1, int(self.duration)),
                    "--timeout",
                    "10s",
                    "-s",
                    f.name,
                    "http://127.0.0.1:%d/" % self.port,
                ],
                capture_output=True,
                text=True,
                timeout=self.duration + 120,
            ).stdout
        finally:
            os.unlink(f.name)
        self.result = parse_wrk(out)


def parse_wrk(out):
    """Requests, socket errors, non-2xx and Lua-checked wrong responses from wrk's report."""

    def number(pattern):
        m = re.search(pattern, out)
        return int(m.group(1)) if m else 0

    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "requests": number(r"(\d+) requests in"),
        "socket_errors": sum(int(g) for g in errors.groups()) if errors else 0,
        "non_2xx": number(r"Non-2xx or 3xx responses: (\d+)"),
        "wrong": number(r"wrong responses: (\d+)") if "wrong responses" in out else None,
    }


def quiescent(server, settle=1.5):
    """fds and tasks with no load running (lowest of a few samples)."""
    time.sleep(settle)
    fds, tasks = [], []
    for _ in range(5):
        tasks.append(get_tasks(server.port))
        fds.append(fd_count(server.pid))
        time.sleep(0.2)
    return min(fds), min(tasks)


def median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) // 2


def rising(values, slack):
    """True when every step goes up and the total rise exceeds ``slack`` (at least 4 samples)."""
    if len(values) < 4:
        return False
    return all(b > a for a, b in zip(values, values[1:])) and values[-1] - values[0] > slack


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--max-rss-growth", type=float, default=5.0)
    parser.add_argument(
        "--warmup",
        type=float,
        default=0.2,
        help="fraction of the run before RSS is compared (default 0.2)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--wrk-connections",
        type=int,
        default=0,
        help="add wrk bulk load with this many connections (default 0: off)",
    )
    args = parser.parse_args(argv)

    server = start_server(
        "benchmarks.soak_app:app", "--no-access-log", "--timeout-keep-alive", "30"
    )
    stats = Stats()
    stop = threading.Event()
    samples = []  # (t, rss_kb, fds, tasks)
    failures = []
    try:
        base_fds, base_tasks = quiescent(server, settle=0.5)
        print(
            "soak: pid %d port %d, %d workers, %.0fs, sample every %.0fs; quiescent fds %d "
            "tasks %d"
            % (
                server.pid,
                server.port,
                args.workers,
                args.duration,
                args.interval,
                base_fds,
                base_tasks,
            ),
            flush=True,
        )
        workers = [
            Worker(server.port, stats, stop, args.seed * 1000 + i) for i in range(args.workers)
        ]
        wrk = None
        if args.wrk_connections:
            if shutil.which("wrk") is None:
                parser.error("--wrk-connections needs wrk (apt install wrk)")
            wrk = WrkLoad(server.port, args.wrk_connections, args.duration)
        start = time.monotonic()
        for w in workers:
            w.start()
        if wrk is not None:
            wrk.start()
        next_sample = start + args.interval
        while True:
            now = time.monotonic()
            if server.proc.poll() is not None:
                failures.append("server died with code %s" % server.proc.returncode)
                break
            if now >= next_sample:
                sample = (
                    round(now - start, 1),
                    rss_kb(server.pid),
                    fd_count(server.pid),
                    get_tasks(server.port),
                )
                samples.append(sample)
                with stats.lock:
                    done = sum(
                        v
                        for k, v in stats.counts.items()
                        if k not in ("ws_messages", "errors", "wrk")
                    )
                print(
                    "  t=%6.1fs rss=%d KiB fds=%d tasks=%d requests=%d errors=%d"
                    % (sample + (done, stats.counts.get("errors", 0))),
                    flush=True,
                )
                next_sample += args.interval
            if now - start >= args.duration:
                break
            time.sleep(min(0.2, max(0.0, next_sample - time.monotonic())))
        stop.set()
        for w in workers:
            w.join(60)
        if wrk is not None:
            wrk.join(args.duration + 180)
            stats.counts["wrk"] = wrk.result
        if server.proc.poll() is not None:
            if not failures:
                failures.append("server died with code %s" % server.proc.returncode)
            end_fds = end_tasks = None
        else:
            end_fds, end_tasks = quiescent(server)
    finally:
        stop.set()
        server.close()

    warm = [s for s in samples if s[0] >= args.warmup * args.duration]
    figures = {
        "duration_s": args.duration,
        "workers": args.workers,
        "counts": dict(stats.counts),
        "samples": samples,
        "quiescent_before": {"fds": base_fds, "tasks": base_tasks},
        "quiescent_after": {"fds": end_fds, "tasks": end_tasks},
    }
    if len(warm) >= 2:
        # RSS moves by a few MiB with the bodies in flight at the sampling instant: compare the
        # median of the first third of the post-warm-up samples with that of the last third.
        third = max(1, len(warm) // 3)
        rss0, rss1 = median([s[1] for s in warm[:third]]), median([s[1] for s in warm[-third:]])
        growth = 100.0 * (rss1 - rss0) / rss0
        figures.update(
            rss_after_warmup_kb=rss0,
            rss_end_kb=rss1,
            rss_growth_pct=round(growth, 2),
            rss_max_kb=max(s[1] for s in samples),
        )
        print(
            "soak: RSS after warm-up %d KiB, at end %d KiB (medians of %d samples): growth "
            "%+.2f%% (bound %.1f%%); max %d KiB"
            % (rss0, rss1, third, growth, args.max_rss_growth, figures["rss_max_kb"])
        )
        if growth > args.max_rss_growth:
            failures.append("RSS grew %.2f%% (> %.1f%%)" % (growth, args.max_rss_growth))
        if rising([s[2] for s in warm], FD_SLACK * 4):
            failures.append("fds rise at every sample: %r" % [s[2] for s in warm])
        if rising([s[3] for s in warm], TASK_SLACK * 4):
            failures.append("tasks rise at every sample: %r" % [s[3] for s in warm])
    else:
        failures.append("fewer than 2 samples after the warm-up: run longer or sample more often")
    if end_fds is not None:
        print(
            "soak: quiescent fds %d -> %d, tasks %d -> %d"
            % (base_fds, end_fds, base_tasks, end_tasks)
        )
        if end_fds > base_fds + FD_SLACK:
            failures.append(
                "fds after the load %d > before %d + %d" % (end_fds, base_fds, FD_SLACK)
            )
        if end_tasks > base_tasks + TASK_SLACK:
            failures.append(
                "tasks after the load %d > before %d + %d" % (end_tasks, base_tasks, TASK_SLACK)
            )
    print("soak: requests %s" % json.dumps(stats.counts, sort_keys=True))
    bulk = stats.counts.get("wrk")
    if args.wrk_connections:
        if not bulk or not bulk["requests"]:
            failures.append("wrk produced no requests")
        elif bulk["socket_errors"] or bulk["non_2xx"] or bulk["wrong"]:
            failures.append("wrk errors: %s" % json.dumps(bulk, sort_keys=True))
        elif bulk["wrong"] is None:
            failures.append("wrk did not report its response checks")
    if stats.errors:
        failures.append(
            "%d request errors, first: %s" % (stats.counts.get("errors", 0), stats.errors[:5])
        )
    figures["failures"] = failures
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    if failures:
        print("soak: FAIL\n  " + "\n  ".join(failures))
        return 1
    print("soak: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
