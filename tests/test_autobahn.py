"""Autobahn TestSuite cases (via ``kosoku`` in fuzzingclient mode) against an echo app.

kosoku is found through ``$FERROCORN_KOSOKU``, ``PATH`` or next to ``sys.executable``. It only
installs on CPython >= 3.10: when it is missing the tests are skipped under PyPy (and CPython
< 3.10) and FAIL under CPython >= 3.10 (where tests/requirements.txt installs it).

Sections 1-7 and 10 (the core protocol) and 12 and 13 (permessage-deflate: 216 cases of 1000
compressed messages each, every data set and window/context-takeover combination) must have
no case other than OK, NON-STRICT or INFORMATIONAL (behavior and behaviorClose): no FAILED, and
for compression no UNIMPLEMENTED either, i.e. the extension must be negotiated. Sections 12
and 13 take about 3 and 1 minutes on a release build under CPython, more than 5 each under PyPy.
The codec is Rust and the echo app the same everywhere, so tests/run_all.sh runs them under its
first interpreter only (``FERROCORN_AUTOBAHN_COMPRESSION=0`` for the others); run by hand, they
always run. Section 9 (performance) runs only with ``FERROCORN_SLOW=1``.
"""

import collections
import glob
import json
import os
import platform
import shutil
import subprocess
import sys

import pytest

from tests.support.helpers import start_server

ECHO_APP = "tests.apps.ws_echo:app"
CORE_SECTIONS = ["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "10.*"]
ACCEPTABLE = {"OK", "NON-STRICT", "INFORMATIONAL"}


def find_kosoku():
    candidates = [
        os.environ.get("FERROCORN_KOSOKU"),
        shutil.which("kosoku"),
        os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "kosoku"),
    ]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture(scope="module")
def kosoku():
    path = find_kosoku()
    if path is None:
        if platform.python_implementation() == "PyPy" or sys.version_info < (3, 10):
            pytest.skip("kosoku only installs on CPython >= 3.10")
        pytest.fail(
            "kosoku not found: set FERROCORN_KOSOKU or pip install -r tests/requirements.txt"
        )
    return path


@pytest.fixture(scope="module")
def echo_server():
    with start_server(ECHO_APP, "--no-access-log") as s:
        yield s


def run_cases(kosoku, server, patterns, outdir, timeout):
    argv = [kosoku, "-m", "fuzzingclient", "-p", "1", "-o", str(outdir)]
    for pattern in patterns:
        argv += ["-i", pattern]
    argv.append("127.0.0.1:%d" % server.port)
    # kosoku exits non-zero when any case is not OK (UNIMPLEMENTED counts): judge by the reports.
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    output = proc.stdout.decode("utf-8", "replace")
    results = {}
    for path in glob.glob(os.path.join(str(outdir), "*_case_*.json")):
        with open(path) as f:
            case = json.load(f)
        results[case["id"]] = (case["behavior"], case["behaviorClose"])
    assert results, "kosoku produced no case reports (exit %s):\n%s" % (
        proc.returncode,
        output[-3000:],
    )
    assert server.proc.poll() is None, "the server died:\n" + server.output()[-3000:]
    return results, output


def summarize(results):
    behavior = collections.Counter(b for b, _ in results.values())
    close = collections.Counter(c for _, c in results.values())
    return "%d cases; behavior %s; behaviorClose %s" % (
        len(results),
        dict(sorted(behavior.items())),
        dict(sorted(close.items())),
    )


def bad_cases(results, allowed):
    return sorted(
        (case, b, c) for case, (b, c) in results.items() if b not in allowed or c not in allowed
    )


def report(capsys, title, results):
    with capsys.disabled():
        sys.stdout.write("\n[autobahn] %s: %s\n" % (title, summarize(results)))


def test_autobahn_core_sections(kosoku, echo_server, tmp_path, capsys):
    results, output = run_cases(kosoku, echo_server, CORE_SECTIONS, tmp_path, timeout=600)
    report(capsys, "sections 1-7, 10", results)
    sections = {case.split(".")[0] for case in results}
    assert sections == {"1", "2", "3", "4", "5", "6", "7", "10"}, sorted(sections)
    assert len(results) > 200, summarize(results)
    bad = bad_cases(results, ACCEPTABLE)
    assert not bad, "%d bad cases, e.g. %r\n%s" % (len(bad), bad[:10], output[-3000:])


@pytest.mark.timeout(1200)
@pytest.mark.skipif(
    os.environ.get("FERROCORN_AUTOBAHN_COMPRESSION") == "0",
    reason="sections 12 and 13 run under run_all.sh's first interpreter only",
)
@pytest.mark.parametrize("section", ["12", "13"])
def test_autobahn_compression_sections(kosoku, echo_server, tmp_path, capsys, section):
    results, output = run_cases(kosoku, echo_server, [section + ".*"], tmp_path, timeout=1100)
    report(capsys, "section %s (permessage-deflate)" % section, results)
    assert {case.split(".")[0] for case in results} == {section}
    # 5 data sets (12) or 7 offer/answer combinations (13), 18 message sizes each.
    assert len(results) == (90 if section == "12" else 126), summarize(results)
    bad = bad_cases(results, ACCEPTABLE)
    assert not bad, "%d bad cases, e.g. %r\n%s" % (len(bad), bad[:10], output[-3000:])


@pytest.mark.timeout(900)
@pytest.mark.skipif(
    os.environ.get("FERROCORN_SLOW") != "1",
    reason="section 9 (performance cases) runs with FERROCORN_SLOW=1",
)
def test_autobahn_section_9(kosoku, echo_server, tmp_path, capsys):
    results, output = run_cases(kosoku, echo_server, ["9.*"], tmp_path, timeout=840)
    report(capsys, "section 9", results)
    bad = bad_cases(results, ACCEPTABLE)
    assert not bad, "%d bad cases, e.g. %r\n%s" % (len(bad), bad[:10], output[-3000:])
