"""A short soak run (benchmarks/soak.py for 45 s; 20 s under PyPy): no request errors, RSS
within 10% after the warm-up (a memory bound, not a timing threshold; CPython only), fds and
asyncio tasks back to their pre-load values, and the server alive throughout."""

import os
import subprocess
import sys

import pytest

from tests.support.helpers import REPO_ROOT, SERVER_PYTHON, server_env


def server_is_pypy():
    out = subprocess.run(
        [SERVER_PYTHON, "-c", "import platform; print(platform.python_implementation())"],
        capture_output=True,
        timeout=60,
    ).stdout
    return out.strip() == b"PyPy"


@pytest.mark.timeout(180)
def test_soak_short():
    pytest.importorskip("websockets.sync.client")
    duration, rss_bound = "45", "10"
    if server_is_pypy():
        # Under PyPy the server's heap keeps growing for about two minutes (JIT warm-up and GC
        # nursery growth: 135 MB at 5 s, a plateau near 170 MB from ~110 s in a 200 s run), so
        # no RSS bound holds within a short run; benchmarks/soak.py's 600 s run is PyPy's
        # memory check. This run still fails on any request error, a server death, or fds
        # and tasks that do not come back to their pre-load counts.
        duration, rss_bound = "20", "inf"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO_ROOT, "benchmarks", "soak.py"),
            "--duration",
            duration,
            "--interval",
            "1.5",
            "--workers",
            "4",
            # The server's RSS swings by ~10% peak to peak under this load with no trend (600 s:
            # 38.3-42.2 MB, growth +0.13%), so two 45 s medians differ by up to ~6.5%: a 5% bound
            # failed 2 of 7 runs (+6.4%, +6.2%). 10% (~4 MB) still fails a leak of ~40 bytes per
            # request (100k+ requests in 45 s); the 600 s run in benchmarks/ holds the 5% bound.
            "--max-rss-growth",
            rss_bound,
        ],
        cwd=REPO_ROOT,
        env=server_env(),
        capture_output=True,
        timeout=170,
    )
    out = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
    print(out)
    assert proc.returncode == 0, out[-4000:]
