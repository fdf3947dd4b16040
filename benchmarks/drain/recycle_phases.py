"""Where a recycled worker's CPU goes, step by step, from a server log written with
``recycle_trace.patch`` applied (see README.md, "Recycling: a worker's life, step by step").

usage: python recycle_phases.py SERVER_LOG

Each ``FCTRACE tag pid cpu_ms wall_ms minflt requests`` line marks one step of one forked
worker (cpu: the process's CPU time, all threads; minflt: its minor page faults); the
template's ``reaped`` line carries the worker's whole CPU time and faults from wait4(). For
each pair of consecutive steps the medians over the workers that went through all of them.
"""

from __future__ import annotations

import collections
import statistics
import sys

START = ["forked", "serve", "config", "loop", "loaded", "lifespan", "core", "started"]
LIFE = ["started", "limit", "signal", "shutdown", "drained", "served", "closed", "shut", "exit"]


def read(path: str) -> dict[int, dict[str, list[float]]]:
    steps: dict[int, dict[str, list[float]]] = collections.defaultdict(dict)
    with open(path) as log:
        for line in log:
            if line.startswith("FCTRACE "):
                _, tag, pid, *values = line.split()
                steps[int(pid)][tag] = [float(v) for v in values]
    return steps


def table(steps: dict[int, dict[str, list[float]]], order: list[str], title: str) -> None:
    rows = [s for s in steps.values() if all(tag in s for tag in order) and "reaped" in s]
    print(f"\n{title}: {len(rows)} workers (medians)")
    print(f"{'step':28s} {'CPU ms':>7s} {'wall ms':>8s} {'faults':>7s} {'requests':>9s}")
    if order[0] == "forked":  # the child's own CPU and faults at its first step
        cpu = statistics.median(r["forked"][0] for r in rows)
        faults = statistics.median(r["forked"][2] for r in rows)
        print(f"{'fork() -> forked':28s} {cpu:7.2f} {'':8s} {faults:7.0f}")
    for before, after in zip(order, order[1:]):

        def median(i: int, rows=rows, before=before, after=after) -> float:
            return statistics.median(r[after][i] - r[before][i] for r in rows)

        served = ""
        if all(r[before][3] >= 0 and r[after][3] >= 0 for r in rows):
            served = f"{median(3):9.0f}"
        step = f"{before} -> {after}"
        print(f"{step:28s} {median(0):7.2f} {median(1):8.2f} {median(2):7.0f} {served}")


def main() -> None:
    steps = read(sys.argv[1])
    table(steps, START, "Start-up (fork to serving)")
    table(steps, LIFE, "Life (serving to exit)")
    whole = [s for s in steps.values() if "reaped" in s and "forked" in s and "served" in s]
    if whole:
        cpu = statistics.median(s["reaped"][0] for s in whole)
        faults = statistics.median(s["reaped"][2] for s in whole)
        served = statistics.median(s["served"][3] for s in whole)
        print(f"\nwhole life (wait4): CPU {cpu:.1f} ms, {faults:.0f} faults, {served:.0f} requests")
        teardown = statistics.median(s["reaped"][0] - s["exit"][0] for s in whole if "exit" in s)
        print(f"exit -> reaped (the kernel's teardown): CPU {teardown:.2f} ms")


if __name__ == "__main__":
    main()
