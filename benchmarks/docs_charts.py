"""Draw the docs site's performance charts from a benchmark run's JSON.

    python3 benchmarks/docs_charts.py            # write docs/assets/perf-*.svg
    python3 benchmarks/docs_charts.py --check    # exit 1 when they differ from the data

Plain SVG written by hand, so the docs build needs no plotting library and the files diff
cleanly. The input is run.py's ``results.json`` (``--input`` for another run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parent.parent
SERVERS = (
    ("ferrocorn", "#c0392b"),
    ("granian", "#2e86c1"),
    ("h2corn", "#7d3c98"),
    ("uvicorn", "#7f8c8d"),
)
SCENARIOS = (
    ("pipelined", "plaintext, 16-deep pipelining"),
    ("plaintext", "plaintext"),
    ("json", "JSON"),
    ("10k", "10 KiB response"),
    ("echo", "10 KiB POST echoed"),
    ("starlette-plaintext", "Starlette plaintext"),
    ("fastapi-json", "FastAPI JSON"),
)
LABEL_W, BAR_W, BAR_H, GAP = 210, 420, 11, 14
VALUE_W = 70


def _value(run: dict, scenario: str, server: str, key: str) -> float | None:
    result = run["scenarios"].get(scenario, {}).get("servers", {}).get(server)
    if not result or result.get("status") != "ok":
        return None
    value = result["median"].get(key)
    return float(value) if value is not None else None


def chart(run: dict, key: str, title: str, unit: str, fmt: str) -> str:
    """A horizontal grouped bar chart: one group per scenario, one bar per server."""
    group_h = BAR_H * len(SERVERS) + GAP
    legend_h = 26
    height = 40 + legend_h + group_h * len(SCENARIOS) + 24
    width = LABEL_W + BAR_W + VALUE_W + 20
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    x = 10
    for server, colour in SERVERS:
        out.append(f'<rect x="{x}" y="32" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 14}" y="41">{server}</text>')
        x += 14 + 8 * len(server) + 16
    top = 40 + legend_h
    for index, (scenario, label) in enumerate(SCENARIOS):
        values = [_value(run, scenario, server, key) for server, _ in SERVERS]
        scale = max((v for v in values if v is not None), default=0.0)
        y = top + index * group_h
        mid = y + BAR_H * len(SERVERS) / 2 + 4
        out.append(
            f'<text x="{LABEL_W - 8}" y="{mid:.1f}" text-anchor="end">{escape(label)}</text>'
        )
        for row, ((_server, colour), value) in enumerate(zip(SERVERS, values)):
            bar_y = y + row * BAR_H
            if value is None:
                text = "–"
                length = 0.0
            else:
                text = fmt.format(value)
                length = BAR_W * value / scale if scale else 0.0
            out.append(
                f'<rect x="{LABEL_W}" y="{bar_y}" width="{length:.1f}" height="{BAR_H - 2}" '
                f'fill="{colour}"/>'
            )
            out.append(
                f'<text x="{LABEL_W + length + 4:.1f}" y="{bar_y + BAR_H - 3}">{text}</text>'
            )
    meta = run["meta"]
    note = (
        f"{unit}; {meta['python']['version']}, one worker pinned to one core, {meta['date'][:10]}"
    )
    out.append(f'<text x="10" y="{height - 8}" fill="#555">{escape(note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def charts(run: dict) -> dict[str, str]:
    return {
        "perf-throughput.svg": chart(
            run, "rps", "Requests per second (higher is better)", "req/s", "{:,.0f}"
        ),
        "perf-cpu.svg": chart(
            run,
            "cpu_us_per_req",
            "Server CPU per request (lower is better)",
            "CPU µs per request",
            "{:.1f} µs",
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=ROOT / "benchmarks" / "results.json")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "docs" / "assets")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    run = json.loads(args.input.read_text())
    stale = []
    for name, svg in charts(run).items():
        path = args.output_dir / name
        if args.check:
            if not path.exists() or path.read_text() != svg:
                stale.append(str(path))
        else:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(svg)
    if stale:
        print("stale charts (run python3 benchmarks/docs_charts.py):", *stale, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
