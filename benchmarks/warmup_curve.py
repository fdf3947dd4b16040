#!/usr/bin/env python3
"""Warm-up curve: req/s in each second of the first N seconds after a server starts answering.

    python3 benchmarks/warmup_curve.py --servers ferrocorn-pypy,socketify-pypy --scenario plaintext
    python3 benchmarks/warmup_curve.py --servers granian-pypy --seconds 10   # a short look

PyPy's JIT compiles a server's hot loops only after they have run a while, so a PyPy server is
slow at first; this shows how long "a while" is, which is what run.py's --pypy-warmup must
cover. Each server is started exactly as run.py starts it (its Server.argv, pinned to CPU 0,
the same RLIMIT_NOFILE), and as soon as it answers, wrk (pinned to CPU 1) runs back to back
one-second runs of the scenario's load, N of them. Each row: the second's start (from the
first answer), wrk's req/s over its own measured second, and the server's CPU µs per request
in that second. Back-to-back runs leave a gap of a few ms between seconds (wrk starting and
connecting), shown by the start column; one long wrk run cannot report per second without a
Lua response() hook, which costs wrk more CPU per response than the servers spend.

Needs the venvs and builds run.py makes: run `run.py --pypy` (or with --servers) once first.
Writes warmup[-SCENARIO].json and WARMUP[-SCENARIO].md into --output-dir (default
benchmarks/.work/warmup/).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import run as bench  # noqa: E402  (the path is set just above)

# Warm from the first second after which every second stays within this fraction of the
# median of the last five: req/s at least 90% of it, CPU µs/req at most 1/0.9 of it. CPU µs/req
# is the one to trust on a busy machine: another process on the server's core lowers req/s
# but hardly changes what each request costs.
WARM_FRACTION = 0.9


def curve(server: bench.Server, scenario: str, seconds: int, pin: bool, nofile: int) -> dict:
    """Start `server`, wait for its first answer, then `seconds` one-second wrk runs."""
    spec = bench.SCENARIOS[scenario]
    t_spawn = time.monotonic()
    run = bench.Running(server, f"warmup-{scenario}", 0, pin, nofile)
    try:
        problem = run.wait_ready(30.0 * (3 if server.pypy else 1))
        if problem:
            return {"error": f"{problem}\n{run.log_tail()}", "command": shlex.join(run.wrapped)}
        t_ready = time.monotonic()
        rows = []
        for i in range(seconds):
            pids = run.pids()
            cpu0 = bench.cpu_seconds(pids)
            start = time.monotonic() - t_ready
            res = bench.run_wrk(run.port, scenario, spec, 1.0, 1, pin)
            cpu1 = bench.cpu_seconds(run.pids())
            if "error" in res:
                rows.append({"second": i + 1, "start_s": round(start, 3), "error": res["error"]})
                if not run.alive():
                    break
                continue
            secs = res["duration_us"] / 1e6
            errors = sum(res[k] for k in ("connect", "read", "write", "timeout", "status"))
            rows.append(
                {
                    "second": i + 1,
                    "start_s": round(start, 3),
                    "rps": res["requests"] / secs if secs else 0.0,
                    "requests": res["requests"],
                    "cpu_us_per_req": (cpu1 - cpu0) * 1e6 / res["requests"]
                    if res["requests"]
                    else None,
                    "p99_us": res["p99_us"],
                    "errors": errors,
                }
            )
        return {
            "command": shlex.join(run.wrapped),
            "startup_s": round(t_ready - t_spawn, 3),
            "rows": rows,
            "warm_after_s": warm_after(rows, "rps"),
            "cpu_warm_after_s": warm_after(rows, "cpu_us_per_req"),
        }
    finally:
        run.stop()


def warm_after(rows: list[dict], key: str) -> int | None:
    """The number of seconds before `key` (rps: higher is better; cpu_us_per_req: lower is)
    stays within WARM_FRACTION of its plateau, the median of the last five seconds; None if
    there are too few good seconds to tell."""
    vals = [r.get(key) for r in rows]
    tail = sorted(v for v in vals[-5:] if v)
    if len(tail) < 3:
        return None
    plateau = tail[len(tail) // 2]

    def ok(v) -> bool:
        if v is None:
            return False
        return v >= WARM_FRACTION * plateau if key == "rps" else v <= plateau / WARM_FRACTION

    for i in range(len(vals)):
        if all(ok(v) for v in vals[i:]):
            return i
    return None


def _tail_median(rows: list[dict], key: str) -> float | None:
    tail = sorted(r[key] for r in rows[-5:] if r.get(key))
    return tail[len(tail) // 2] if tail else None


def render(results: dict) -> str:
    """A markdown table: one row per second, one req/s column (and CPU µs/req) per server."""
    meta, curves = results["meta"], results["curves"]
    names = list(curves)
    lines = [
        f"# Warm-up curves — {meta['scenario']}",
        "",
        f"- Date: {meta['date']}; command: `{meta['command']}`",
        f"- {meta['seconds']} back-to-back 1 s wrk runs from the server's first answer; "
        + (
            f"server pinned to CPU {bench.SERVER_CPU}, wrk to CPU {bench.CLIENT_CPU}"
            if meta["pinned"]
            else "no CPU pinning"
        ),
        f"- Warm after: the seconds before req/s stays ≥ {WARM_FRACTION:.0%} of the median of "
        f"the last 5 s (CPU: before CPU µs/req stays ≤ 1/{WARM_FRACTION:g} of its median), "
        "counted in 1 s runs; the runs start a little more than 1 s apart (see the JSON's "
        "start_s).",
        "",
        "| server | start-up (spawn to first answer) | warm after (req/s) | warm after (CPU) | "
        "plateau req/s | plateau CPU µs/req |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        c = curves[n]
        if "error" in c:
            lines.append(f"| {n} | failed: {bench._oneline(c['error'])} |" + " |" * 5)
            continue
        warm, cpu_warm = c["warm_after_s"], c["cpu_warm_after_s"]
        lines.append(
            f"| {n} | {c['startup_s']:.2f} s | {'?' if warm is None else f'{warm} s'} | "
            f"{'?' if cpu_warm is None else f'{cpu_warm} s'} | "
            f"{bench.fmt_num(_tail_median(c['rows'], 'rps'))} | "
            f"{bench.fmt_num(_tail_median(c['rows'], 'cpu_us_per_req'), 1)} |"
        )
    lines += [
        "",
        "req/s in each second (CPU µs/req in brackets):",
        "",
        "| second | " + " | ".join(names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for i in range(meta["seconds"]):
        cells = []
        for n in names:
            rows = curves[n].get("rows", [])
            r = rows[i] if i < len(rows) else None
            if r is None:
                cells.append("–")
            elif "error" in r:
                cells.append("error")
            else:
                cells.append(f"{r['rps']:,.0f} ({bench.fmt_num(r['cpu_us_per_req'], 1)})")
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="req/s per second after a server starts answering")
    p.add_argument(
        "--servers",
        default=",".join(bench.PYPY_SERVERS),
        help=f"comma-separated, from: {', '.join(bench.ALL_SERVERS)} "
        f"(default {','.join(bench.PYPY_SERVERS)})",
    )
    wrk_scenarios = [n for n, s in bench.SCENARIOS.items() if s["kind"] == "wrk"]
    p.add_argument(
        "--scenario",
        default="plaintext",
        choices=wrk_scenarios,
        help="the load, as run.py's scenario of that name (default plaintext)",
    )
    p.add_argument("--seconds", type=int, default=30, help="seconds of load (default 30)")
    p.add_argument(
        "--extra-args",
        action="append",
        default=[],
        metavar="SERVER=ARGS",
        help="extra CLI arguments for one server, as in run.py",
    )
    p.add_argument("--output-dir", help="default benchmarks/.work/warmup/")
    p.add_argument("--no-pin", action="store_true", help="do not pin the server and wrk")
    args = p.parse_args(argv)
    if args.seconds < 1:
        p.error("--seconds must be >= 1")
    return args


def main() -> None:
    args = parse_args(sys.argv[1:])
    names = [s.strip() for s in args.servers.split(",") if s.strip()]
    bad = [n for n in names if n not in bench.ALL_SERVERS or n == bench.FLOOR]
    if bad:
        raise SystemExit(f"unknown or unsupported server(s) {bad}")
    extra: dict[str, list[str]] = {}
    for item in args.extra_args:
        key, _, value = item.partition("=")
        extra.setdefault(key, []).extend(shlex.split(value))
    pin = (os.cpu_count() or 1) >= 2 and not args.no_pin
    if pin:
        os.sched_setaffinity(0, {int(bench.CLIENT_CPU)})  # our own work stays off the server's
    nofile = bench.raise_nofile(bench.NOFILE)

    curves: dict[str, dict] = {}
    for n in names:
        server = bench.Server(n, extra.get(n, []))
        reason = server.check()
        if reason is None and not server.runs(args.scenario):
            reason = f"does not run {args.scenario} (see run.py's SCENARIO_LIMITS)"
        if reason:
            bench.log(f"SKIP {n}: {reason}")
            curves[n] = {"error": reason}
            continue
        bench.log(f"== {n}: {args.seconds} s of {args.scenario} from its first answer")
        c = curve(server, args.scenario, args.seconds, pin, nofile)
        curves[n] = c
        for r in c.get("rows", []):
            cell = r.get("error") or (
                f"{r['rps']:>10,.0f} req/s  {bench.fmt_num(r['cpu_us_per_req'], 1):>7} µs/req"
            )
            bench.log(f"   {r['second']:3d}  +{r['start_s']:6.2f}s  {cell}")
        if "error" in c:
            bench.warn(f"{n}: {c['error']}")
        else:
            bench.log(
                f"   start-up {c['startup_s']:.2f} s, warm after {c['warm_after_s']} s "
                f"(req/s), {c['cpu_warm_after_s']} s (CPU µs/req)"
            )

    results = {
        "meta": {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": "python3 " + shlex.join(sys.argv),
            "scenario": args.scenario,
            "seconds": args.seconds,
            "pinned": pin,
            "ferrocorn_git": bench.git_revision(),
            "loadavg": bench._loadavg(),
        },
        "curves": curves,
    }
    out_dir = Path(args.output_dir) if args.output_dir else bench.WORK / "warmup"
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"warmup-{args.scenario}.json"
    md_path = out_dir / f"WARMUP-{args.scenario}.md"
    bench.write_json(results, json_path)
    md_path.write_text(render(results))
    bench.log(f"== wrote {bench.rel(md_path)}, {bench.rel(json_path)}")


if __name__ == "__main__":
    main()
