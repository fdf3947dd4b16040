"""A short soak run (benchmarks/soak.py for ~45 s): no request errors, RSS within 10% after
the warm-up (a memory bound, not a timing threshold), fds and asyncio tasks back to their
pre-load values, and the server alive throughout."""

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
def test_soak_short(request):
    pytest.importorskip("websockets.sync.client")
    if server_is_pypy():
        # Under PyPy the server's heap keeps growing for about two minutes (JIT warm-up and GC
        # nursery growth: 135 MB at 5 s, a plateau near 170 MB from ~110 s in a 200 s run), so
        # a 45 s run can exceed the 5% bound without a leak; the long run is the PyPy check.
        request.applymarker(
            pytest.mark.xfail(reason="PyPy heap still warming up within 45 s", strict=False)
        )
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO_ROOT, "benchmarks", "soak.py"),
            "--duration",
            "45",
            "--interval",
            "1.5",
            "--workers",
            "4",
            # The server's RSS swings by ~10% peak to peak under this load with no trend (600 s:
            # 38.3-42.2 MB, growth +0.13%), so two 45 s medians differ by up to ~6.5%: a 5% bound
            # failed 2 of 7 runs (+6.4%, +6.2%). 10% (~4 MB) still fails a leak of ~40 bytes per
            # request (100k+ requests in 45 s); the 600 s run in benchmarks/ holds the 5% bound.
            "--max-rss-growth",
            "10",
        ],
        cwd=REPO_ROOT,
        env=server_env(),
        capture_output=True,
        timeout=170,
    )
    out = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
    print(out)
    assert proc.returncode == 0, out[-4000:]
