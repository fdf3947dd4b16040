#!/usr/bin/env python3
"""ferrocorn benchmark suite: ferrocorn vs granian, uvicorn and h2corn on shared ASGI apps.

    python benchmarks/run.py                 # full CPython suite (peers, -defaults, hyper floor)
    python benchmarks/run.py --quick         # smoke run: short durations, one round
    python benchmarks/run.py --pypy          # PyPy suite: ferrocorn + PyPy peers, CPython ref
    python benchmarks/run.py --python /path/to/python3.13   # the CPython suite on another Python
    python benchmarks/run.py --servers granian,uvicorn --scenarios plaintext,json

The script runs in two stages. Stage 1 (any python3, stdlib only) makes sure wrk/h2load are
installed, creates the pinned virtualenvs (benchmarks/.venv, or benchmarks/.venv-cpXY with
--python; benchmarks/.venv-pypy when a PyPy server is selected), builds ferrocorn from this
checkout with maturin in release mode, and the hyper floor server (benchmarks/floor) with cargo
when `floor` is selected. It then re-executes itself with the venv's interpreter for stage 2,
which runs the servers and wrk (and benchmarks/python_floor.py for the floor), and writes
RESULTS.md, results.json and results.png. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import hashlib
import json
import os
import platform
import resource
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV = HERE / ".venv"  # the CPython venv under test; .venv-cpXY with --python (set_venv)
VENV_PYPY = HERE / ".venv-pypy"
WORK = HERE / ".work"
LOGS = WORK / "logs"
APP_TARGET = "benchmarks.app:app"
FILE_APP = "benchmarks.file_app:app"
BENCH_FILES = WORK / "files"  # what file_app.py and the static route serve
# name -> size; 1g.bin is sparse (file_rss.py's download).
BENCH_FILE_SIZES = {"50k.bin": 50_000, "5m.bin": 5_000_000, "1g.bin": 1 << 30}
FLOOR_DIR = HERE / "floor"  # the hyper floor server: its own cargo project
FLOOR_TARGET = WORK / "target-floor"
FLOOR_BIN = FLOOR_TARGET / "release" / "floor"
PYTHON_FLOOR = HERE / "python_floor.py"

STAGE_ENV = "FERROCORN_BENCH_STAGE2"
STATE_ENV = "FERROCORN_BENCH_STATE"

SERVER_CPU = "0"  # the server under test is pinned here
CLIENT_CPU = "1"  # wrk and this script are pinned here
NOFILE = 65536  # RLIMIT_NOFILE for this script and for every server
IDLE_CAPACITY = 32768  # connection cap given to servers that have one, for idle10k

# "-defaults": the server with its out-of-the-box logging (access log on; granian's is off by
# default, so it gets --access-log), as a new user first measures it. They run only in the
# --defaults-scenarios (DEFAULTS_SCENARIOS unless given).
# "floor": plain hyper with the same settings and responses, no Python (benchmarks/floor).
ALL_SERVERS = [
    "ferrocorn",
    "granian",
    "uvicorn",
    "h2corn",
    "floor",
    "ferrocorn-pypy",
    "socketify-pypy",
    "granian-pypy",
    "uvicorn-pypy",
    "ferrocorn-defaults",
    "granian-defaults",
    "uvicorn-defaults",
    "h2corn-defaults",
]
DEFAULT_SERVERS = [
    "ferrocorn",
    "granian",
    "uvicorn",
    "h2corn",
    "floor",
    "ferrocorn-defaults",
    "granian-defaults",
    "uvicorn-defaults",
    "h2corn-defaults",
]
DEFAULTS_SCENARIOS = ["pipelined", "plaintext", "json", "fastapi-json", "starlette-plaintext"]
# Issue 32's peers on the same PyPy, and ferrocorn on CPython too, so the PyPy/CPython ratio
# comes from the same run.
PYPY_SERVERS = ["ferrocorn-pypy", "socketify-pypy", "granian-pypy", "uvicorn-pypy", "ferrocorn"]
# The scenarios --pypy runs unless --scenarios is given: issue 32's targets and the stream
# scenarios it must not lose. The framework and file scenarios need packages the PyPy venv does
# not have; idle10k and sleep are not what the PyPy work changes.
PYPY_SCENARIOS = ["pipelined", "plaintext", "json", "10k", "echo", "stream-1m", "stream-64m"]
# What a run's ratios are taken against: granian (CPython) when it ran, else socketify on
# PyPy, the yardstick of issue 32 (the --pypy suite has no CPython granian).
REFERENCES = ("granian", "socketify-pypy")

# The ratios the summary table shows (first / second), where a run has both servers.
SUMMARY_PAIRS = (
    ("ferrocorn", "granian"),
    ("ferrocorn", "uvicorn"),
    ("ferrocorn", "h2corn"),
    ("ferrocorn-pypy", "socketify-pypy"),
    ("ferrocorn-pypy", "ferrocorn"),
    ("ferrocorn-pypy", "granian-pypy"),
    ("ferrocorn-pypy", "uvicorn-pypy"),
    ("ferrocorn-defaults", "ferrocorn"),
    ("ferrocorn-defaults", "granian-defaults"),
    ("ferrocorn-defaults", "uvicorn-defaults"),
    ("ferrocorn-defaults", "h2corn-defaults"),
)
FLOOR = "floor"

# granian's fastest configuration for a single worker pinned to one core, chosen by measuring
# the alternatives on the 2-core bench box (see README.md, "granian configuration"):
#   --runtime-mode st         single-threaded runtime: one core is available, mt only adds hand-offs
#   --runtime-threads 1       one runtime thread
#   --http 1                  HTTP/1 only: no protocol sniffing (every scenario is HTTP/1.1)
#   --http1-pipeline-flush    aggregate flushes of pipelined responses (experimental in granian;
#                             +30-50% on `pipelined`, no loss elsewhere)
# Kept at the default: --task-impl asyncio (`rust` lost ~2x on echo). Access log off explicitly
# (also granian's default). Override or extend with --extra-args 'granian=--runtime-mode mt'.
GRANIAN_TUNING = [
    "--runtime-mode",
    "st",
    "--runtime-threads",
    "1",
    "--http",
    "1",
    "--http1-pipeline-flush",
]

# h2corn's fastest configuration for a single worker pinned to one core, chosen by measuring
# on the 2-core bench box (see README.md, "h2corn configuration"): --workers 1 (its default),
# --runtime-threads 2 (its default: 1 thread was no faster on plaintext, ~15% slower on
# pipelined, ~5% cheaper on echo), --loop uvloop (set in Server.argv, as for the others). It
# has no HTTP/1-only switch (only --no-http1): it serves HTTP/1.1 and h2c on one listener.
# Access log off for the main rows (h2corn logs every request by default), on for
# h2corn-defaults. Its Server header is off by default and stays so. Override with
# --extra-args 'h2corn=--runtime-threads 1' (the last flag wins).
H2CORN_TUNING = ["--workers", "1", "--runtime-threads", "2"]

# socketify (PyPy only here) through its ASGI interface, one worker, no WebSockets (as granian's
# --no-ws: app.py has no WebSocket route), lifespan on as for uvicorn, its CLI's default task
# factory size. Started by benchmarks/socketify_serve.py, not its CLI: the CLI's --host trips a
# bug in socketify 0.0.31 that fails about half the starts (see that file). It logs no requests.
SOCKETIFY_SERVE = HERE / "socketify_serve.py"

# Scenarios a server cannot run faithfully: server -> {scenario: why}. It is left out of those
# (the report's server notes say why) rather than measured doing something else.
SCENARIO_LIMITS: dict[str, dict[str, str]] = {
    "socketify-pypy": {
        n: "socketify 0.0.31 passes the query string with its leading `?` (b'?size=N'), so "
        "app.py's /stream ignores `size` and sends 1 MiB; and it drops the app's content-length "
        "and sends streamed bodies chunked, which the stream client does not frame"
        for n in ("stream-1m", "stream-64m")
    },
}

TE_ACCEPT_PLAIN = (
    "text/plain,text/html;q=0.9,application/xhtml+xml;q=0.9,application/xml;q=0.8,*/*;q=0.7"
)
TE_ACCEPT_JSON = (
    "application/json,text/html;q=0.9,application/xhtml+xml;q=0.9,application/xml;q=0.8,*/*;q=0.7"
)

MiB = 1024 * 1024

# --------------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------------

SCENARIOS: dict[str, dict] = {
    "pipelined": dict(
        title="TechEmpower plaintext, 16-deep HTTP/1.1 pipelining",
        kind="wrk",
        path="/plaintext",
        connections=256,
        pipeline=16,
        accept=TE_ACCEPT_PLAIN,
        desc="GET /plaintext, 256 connections, 16 requests pipelined per write (TechEmpower "
        "plaintext test). Measures raw request parsing/dispatch/response overhead.",
    ),
    "plaintext": dict(
        title="Plaintext, no pipelining",
        kind="wrk",
        path="/plaintext",
        connections=128,
        accept=TE_ACCEPT_PLAIN,
        desc="GET /plaintext (13-byte body), 128 keep-alive connections, "
        "one request in flight each.",
    ),
    "json": dict(
        title="JSON",
        kind="wrk",
        path="/json",
        connections=128,
        accept=TE_ACCEPT_JSON,
        desc="GET /json (json.dumps in the app), 128 keep-alive connections.",
    ),
    "10k": dict(
        title="10 KiB response",
        kind="wrk",
        path="/10k",
        connections=128,
        accept=TE_ACCEPT_PLAIN,
        desc="GET /10k: a 10 KiB body per response, 128 connections.",
    ),
    "echo": dict(
        title="10 KiB POST echoed as a streamed response",
        kind="wrk",
        path="/echo",
        connections=128,
        accept=TE_ACCEPT_PLAIN,
        post_bytes=10240,
        desc="POST /echo with a 10 KiB body; the app reads it and streams it back (chunked), "
        "one body message per received chunk. Exercises request-body receive and response "
        "streaming.",
    ),
    "stream-1m": dict(
        title="Streamed 1 MiB download",
        kind="wrk",
        path=f"/stream?size={1 * MiB}",
        connections=16,
        accept=TE_ACCEPT_PLAIN,
        throughput=True,
        timeout=30,
        desc="GET /stream?size=1MiB: 16 body messages of 64 KiB each, 16 connections. "
        "Reported in MiB/s (bytes received per second, headers included).",
    ),
    "stream-64m": dict(
        title="Streamed 64 MiB download",
        kind="wrk",
        path=f"/stream?size={64 * MiB}",
        connections=4,
        accept=TE_ACCEPT_PLAIN,
        throughput=True,
        timeout=60,
        desc="GET /stream?size=64MiB: 1024 body messages of 64 KiB each, 4 connections. "
        "Reported in MiB/s (bytes received per second, headers included).",
    ),
    "sleep": dict(
        title="Async sleep (10 ms) at 512 connections",
        kind="wrk",
        path="/sleep",
        connections=512,
        accept=TE_ACCEPT_PLAIN,
        desc="GET /sleep: the app awaits asyncio.sleep(0.01), 512 connections. The ideal is "
        "512/0.010 = 51,200 req/s; measures timer/scheduling overhead with many waiting tasks.",
    ),
    # Framework scenarios: what users run, a framework between the server and their code.
    # `app` overrides APP_TARGET for every server; `floor_app` tells the hyper floor server
    # which app's responses to send; `probe` is the readiness-probe path.
    "fastapi-json": dict(
        title="FastAPI: JSON from a pydantic model, with a path parameter",
        kind="wrk",
        group="frameworks",
        app="benchmarks.fw_app:fastapi_app",
        floor_app="fastapi",
        path="/items/42",
        probe="/items/42",
        connections=128,
        accept=TE_ACCEPT_JSON,
        desc="GET /items/42 on a FastAPI app (`benchmarks/fw_app.py`): the path parameter is "
        "validated as an int, the endpoint returns a pydantic model (`response_model=Item`) "
        "that FastAPI validates and serializes to JSON. 128 keep-alive connections.",
    ),
    "starlette-plaintext": dict(
        title="Starlette: plaintext route",
        kind="wrk",
        group="frameworks",
        app="benchmarks.fw_app:starlette_app",
        floor_app="starlette",
        path="/plaintext",
        connections=128,
        accept=TE_ACCEPT_PLAIN,
        desc="GET /plaintext on a Starlette app (`benchmarks/fw_app.py`): one Route returning "
        "PlainTextResponse('Hello, World!'). 128 keep-alive connections.",
    ),
    # File scenarios (benchmarks/file_app.py, files made by ensure_bench_files): Starlette's
    # FileResponse (pathsend where the server has it), and the server's own static route
    # (`static`: ferrocorn's and granian's --static-path-*; `bases`: the servers that have one).
    # The floor serves the FileResponse ones (`--app files --files BENCH_FILES`: the same
    # headers, the bodies from memory); its Python floor runs under an event loop.
    "file-50k": dict(
        title="Starlette FileResponse, 50 KB file",
        kind="wrk",
        group="files",
        app=FILE_APP,
        floor_app="files",
        path="/files/50k.bin",
        connections=64,
        accept=TE_ACCEPT_PLAIN,
        bases=("ferrocorn", "granian", "uvicorn", "h2corn", "floor"),
        desc="GET /files/50k.bin through Starlette's FileResponse (`benchmarks/file_app.py`): "
        "the server sends the file itself when it offers http.response.pathsend (ferrocorn, "
        "granian), else Starlette reads and sends it in chunks. 64 keep-alive connections.",
    ),
    "file-5m": dict(
        title="Starlette FileResponse, 5 MB file",
        kind="wrk",
        group="files",
        app=FILE_APP,
        floor_app="files",
        path="/files/5m.bin",
        connections=16,
        accept=TE_ACCEPT_PLAIN,
        throughput=True,
        timeout=30,
        bases=("ferrocorn", "granian", "uvicorn", "h2corn", "floor"),
        desc="GET /files/5m.bin through Starlette's FileResponse, 16 connections. Reported in "
        "MiB/s (bytes received per second, headers included).",
    ),
    "static-50k": dict(
        title="The server's static route, 50 KB file",
        kind="wrk",
        group="files",
        app=FILE_APP,
        static=True,
        path="/static/50k.bin",
        connections=64,
        accept=TE_ACCEPT_PLAIN,
        bases=("ferrocorn", "granian"),
        desc="GET /static/50k.bin from the server's own static route (`--static-path-route "
        "/static --static-path-mount benchmarks/.work/files`; ferrocorn and granian, the "
        "servers that have one): the app is never called. 64 keep-alive connections.",
    ),
    "static-5m": dict(
        title="The server's static route, 5 MB file",
        kind="wrk",
        group="files",
        app=FILE_APP,
        static=True,
        path="/static/5m.bin",
        connections=16,
        accept=TE_ACCEPT_PLAIN,
        throughput=True,
        timeout=30,
        client="wrk",  # granian sends its static files chunked
        bases=("ferrocorn", "granian"),
        desc="GET /static/5m.bin from the server's static route, 16 connections, measured with "
        "wrk (granian sends static files chunked, which the Python client does not frame). "
        "Reported in MiB/s (bytes received per second, headers included).",
    ),
    "idle10k": dict(
        title="Memory with 10,000 idle keep-alive connections",
        kind="idle",
        desc="Opens N (default 10,000) keep-alive connections, sends one GET /plaintext on each, "
        "leaves them idle and reads the server's VmRSS. Lower is better.",
    ),
}

# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def log(msg: str = "") -> None:
    print(msg, flush=True)


def warn(msg: str) -> None:
    print(f"WARNING: {msg}", file=sys.stderr, flush=True)


def rel(p: Path) -> str:
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def run_checked(cmd: list, **kw) -> subprocess.CompletedProcess:
    log("+ " + shlex.join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def capture(cmd: list, timeout: float = 60) -> str:
    try:
        out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
        return (out.stdout + out.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"<{exc}>"


def raise_nofile(wanted: int = NOFILE) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        nr_open = int(Path("/proc/sys/fs/nr_open").read_text())
    except OSError:
        nr_open = wanted
    target = min(wanted, nr_open)
    for lim in ((target, max(hard, target)), (min(target, hard), hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, lim)
            return lim[0]
        except (ValueError, OSError):
            continue
    return soft


# --------------------------------------------------------------------------------------------
# Stage 1: machine setup, virtualenvs, ferrocorn build (stdlib only)
# --------------------------------------------------------------------------------------------

_apt_updated = False


def apt_install(packages: list[str]) -> None:
    global _apt_updated
    prefix: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            raise SystemExit(f"need root (or sudo) to apt-get install {' '.join(packages)}")
        prefix = ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not _apt_updated:
        run_checked(prefix + ["apt-get", "update"], env=env)
        _apt_updated = True
    run_checked(
        prefix + ["apt-get", "install", "-y", "--no-install-recommends", *packages], env=env
    )


def ensure_tools(need_pypy: bool, need_debs: list[str]) -> None:
    """wrk and friends, pypy3 when a PyPy server runs, and the Debian packages need_debs
    (headers and libraries some PyPy servers need: see pypy_debs)."""
    wanted = {
        "wrk": "wrk",
        "h2load": "nghttp2-client",
        "taskset": "util-linux",
        "prlimit": "util-linux",
    }
    missing = sorted({pkg for binary, pkg in wanted.items() if not shutil.which(binary)})
    if not shutil.which("cc"):
        missing.append("build-essential")  # maturin links with cc; httptools compiles on PyPy
    if need_pypy:
        if not shutil.which("pypy3"):
            missing.append("pypy3")
        for pkg in need_debs:
            if (
                shutil.which("dpkg")
                and subprocess.run(["dpkg", "-s", pkg], capture_output=True).returncode
            ):
                missing.append(pkg)
    if missing:
        log(f"== installing missing system packages: {' '.join(missing)}")
        apt_install(missing)


def pypy_debs(servers: list[str]) -> list[str]:
    """Debian packages the selected PyPy servers need beyond pypy3."""
    debs = []
    if any(s.endswith("-pypy") for s in servers):
        debs.append("pypy3-dev")  # headers to build httptools for PyPy (the venv installs it)
    if "socketify-pypy" in servers:
        debs.append("libuv1")  # socketify's prebuilt libsocketify links libuv.so.1
    return debs


def _req_stamp(reqfile: Path) -> str:
    return hashlib.sha256(reqfile.read_bytes()).hexdigest()


def ensure_venv(venv: Path, create_cmd: list[str], reqfile: Path) -> None:
    py = venv_python(venv)
    if not py.exists():
        log(f"== creating {rel(venv)}")
        if venv.exists():
            shutil.rmtree(venv)
        try:
            run_checked(create_cmd + [str(venv)])
        except subprocess.CalledProcessError:
            # Debian splits ensurepip out of CPython's venv module.
            if "pypy" not in create_cmd[0]:
                apt_install(["python3-venv"])
                run_checked(create_cmd + [str(venv)])
            else:
                raise
    stamp = venv / ".bench-requirements.sha256"
    want = _req_stamp(reqfile)
    if stamp.exists() and stamp.read_text().strip() == want:
        return
    log(f"== installing pinned packages from {rel(reqfile)} into {rel(venv)}")
    run_checked([py, "-m", "pip", "install", "--disable-pip-version-check", "-r", reqfile])
    stamp.write_text(want + "\n")


def build_ferrocorn(target_venv: Path, label: str, profile: str) -> tuple[bool, str]:
    """Build a ferrocorn wheel for target_venv's interpreter with maturin and install it there."""
    maturin = VENV / "bin" / "maturin"
    out = WORK / "wheels" / label
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    logfile = LOGS / f"build-{label}.log"
    cmd = [str(maturin), "build", "--out", str(out), "-i", str(venv_python(target_venv))]
    cmd += ["--release"] if profile == "release" else ["--profile", profile]
    # A target dir of our own: incremental across runs, never contends with the lead's
    # `cargo build` lock in /target, and one per interpreter so PyO3 is not rebuilt each switch.
    env = dict(os.environ, CARGO_TARGET_DIR=str(WORK / f"target-{label}"))
    log(f"== building ferrocorn for {label} ({profile} profile): {shlex.join(cmd)}")
    log(f"   (output: {rel(logfile)})")
    t0 = time.monotonic()
    with open(logfile, "w") as fh:
        rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-15:])
        return False, f"maturin build failed (exit {rc}); see {rel(logfile)}\n{tail}"
    wheels = sorted(out.glob("*.whl"))
    if not wheels:
        return False, f"maturin produced no wheel; see {rel(logfile)}"
    py = venv_python(target_venv)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    try:
        subprocess.run(pip + ["--force-reinstall", "--no-deps", str(wheels[0])], check=True)
        subprocess.run(pip + [str(wheels[0])], check=True)  # runtime deps (click), no-op if present
    except subprocess.CalledProcessError as exc:
        return False, f"pip install of {wheels[0].name} failed: {exc}"
    return True, f"built {wheels[0].name} from {git_revision()} in {time.monotonic() - t0:.0f}s"


def floor_versions() -> dict:
    """hyper's and tokio's versions in the floor server's Cargo.lock."""
    out: dict = {}
    try:
        text = (FLOOR_DIR / "Cargo.lock").read_text()
    except OSError:
        return out
    for block in text.split("[[package]]"):
        fields = dict(
            (k.strip(), v.strip().strip('"'))
            for k, _, v in (line.partition("=") for line in block.splitlines())
            if v
        )
        if fields.get("name") in ("hyper", "tokio"):
            out[fields["name"]] = fields.get("version", "?")
    return out


def build_floor() -> tuple[bool, str]:
    """cargo build --release of benchmarks/floor (its own project and Cargo.lock)."""
    cargo = shutil.which("cargo")
    if not cargo:
        return False, "cargo not found: the hyper floor server cannot be built"
    LOGS.mkdir(parents=True, exist_ok=True)
    logfile = LOGS / "build-floor.log"
    cmd = [cargo, "build", "--release", "--manifest-path", str(FLOOR_DIR / "Cargo.toml")]
    env = dict(os.environ, CARGO_TARGET_DIR=str(FLOOR_TARGET))
    log(f"== building the hyper floor server: {shlex.join(cmd)}")
    log(f"   (output: {rel(logfile)})")
    t0 = time.monotonic()
    with open(logfile, "w") as fh:
        rc = subprocess.run(cmd, cwd=FLOOR_DIR, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if rc.returncode != 0 or not FLOOR_BIN.exists():
        tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-15:])
        return False, f"cargo build failed (exit {rc.returncode}); see {rel(logfile)}\n{tail}"
    v = floor_versions()
    return True, (
        f"built {rel(FLOOR_BIN)} (hyper {v.get('hyper', '?')}, tokio {v.get('tokio', '?')}) "
        f"from {git_revision()} in {time.monotonic() - t0:.0f}s"
    )


def python_tag(python: str) -> str:
    """`cp313` for a CPython 3.13 interpreter; raises SystemExit for anything else."""
    code = (
        "import platform, sys; print(platform.python_implementation(), "
        "'%d%d' % sys.version_info[:2])"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise SystemExit(f"--python {python}: cannot run it: {exc}") from None
    impl, _, ver = out.stdout.strip().partition(" ")
    if out.returncode != 0 or impl != "CPython" or not ver.isdigit():
        raise SystemExit(
            f"--python {python}: not a CPython interpreter ({(out.stdout + out.stderr).strip()})"
        )
    return f"cp{ver}"


def set_venv(path: Path) -> None:
    """Make `path` the CPython venv under test (the default is benchmarks/.venv)."""
    global VENV
    VENV = path


def git_revision() -> str:
    rev = capture(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    if not rev or "fatal" in rev or rev.startswith("<"):
        rev = "no commit"
    dirty = capture(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"])
    return rev + (" (dirty)" if dirty and not dirty.startswith("<") else "")


def stage1(args: argparse.Namespace, argv: list[str]) -> None:
    if args.report_from:  # only the venv (matplotlib) is needed
        ensure_venv(VENV, [sys.executable, "-m", "venv"], HERE / "requirements.txt")
        py = str(venv_python(VENV))
        os.execve(
            py, [py, str(Path(__file__).resolve()), *argv[1:]], dict(os.environ, **{STAGE_ENV: "1"})
        )
    servers = selected_servers(args)
    need_pypy = any(s.endswith("-pypy") for s in servers)
    ensure_tools(need_pypy, pypy_debs(servers))
    if args.python:
        # Another CPython: a venv of its own per version, ferrocorn built for it, and the same
        # pinned peers installed into it.
        cpython = args.python
        py_label = python_tag(cpython)
        set_venv(HERE / f".venv-{py_label}")
    else:
        cpython = (
            sys.executable
            if platform.python_implementation() == "CPython"
            else (shutil.which("python3") or "python3")
        )
        py_label = "cpython"
    ensure_venv(VENV, [cpython, "-m", "venv"], HERE / "requirements.txt")
    if need_pypy:
        ensure_venv(
            VENV_PYPY,
            [shutil.which("pypy3") or "pypy3", "-m", "venv"],
            HERE / "requirements-pypy.txt",
        )

    build: dict[str, str] = {}
    unavailable: dict[str, str] = {}
    targets = []
    if "ferrocorn" in servers or "ferrocorn-defaults" in servers:
        targets.append(("ferrocorn", VENV, py_label))
    if "ferrocorn-pypy" in servers:
        targets.append(("ferrocorn-pypy", VENV_PYPY, "pypy"))
    for name, venv, label in targets:
        if args.skip_build:
            build[name] = "--skip-build: reusing the ferrocorn already installed in " + rel(venv)
            continue
        ok, msg = build_ferrocorn(venv, label, args.cargo_profile)
        build[name] = msg
        if ok:
            log(f"   {msg}")
        else:
            unavailable[name] = msg.splitlines()[0]
            warn(f"{name}: {msg}\n{name} will be skipped in this run.")
    if FLOOR in servers:
        if args.skip_build and FLOOR_BIN.exists():
            build[FLOOR] = "--skip-build: reusing " + rel(FLOOR_BIN)
        else:
            ok, msg = build_floor()
            build[FLOOR] = msg
            if ok:
                log(f"   {msg}")
            else:
                unavailable[FLOOR] = msg.splitlines()[0]
                warn(f"{FLOOR}: {msg}\n{FLOOR} will be skipped in this run.")

    state = {
        "build": build,
        "unavailable": unavailable,
        "cmdline": "python " + shlex.join(argv),
        "venv": str(VENV),
        "python_label": py_label if args.python else None,
    }
    env = dict(os.environ, **{STAGE_ENV: "1", STATE_ENV: json.dumps(state)})
    py = str(venv_python(VENV))
    log(f"== stage 2 with {rel(Path(py))}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(py, [py, str(Path(__file__).resolve()), *argv[1:]], env)


# --------------------------------------------------------------------------------------------
# /proc helpers
# --------------------------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return data[data.rindex(")") + 2 :].split()


def process_tree(root: int) -> list[int]:
    """root and all its descendants (granian, for one, serves from a child worker process)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_seconds(pids: list[int]) -> float:
    """utime+stime of each process (all of its threads), summed."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields:
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def core_busy_seconds(cpu: int) -> float:
    """Non-idle time of one CPU from /proc/stat (user, nice, system, irq, softirq, steal)."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:]]
                return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / CLK_TCK
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


# --------------------------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------------------------


def selected_servers(args: argparse.Namespace) -> list[str]:
    if args.servers:
        names = [s.strip() for s in args.servers.split(",") if s.strip()]
    else:
        names = PYPY_SERVERS if args.pypy else DEFAULT_SERVERS
    bad = [n for n in names if n not in ALL_SERVERS]
    if bad:
        raise SystemExit(f"unknown server(s) {bad}; choose from {', '.join(ALL_SERVERS)}")
    return names


def _py_has(py: Path, module: str) -> bool:
    return (
        subprocess.run(
            [str(py), "-c", f"import {module}"], capture_output=True, cwd=REPO
        ).returncode
        == 0
    )


class Server:
    def __init__(self, name: str, extra: list[str]):
        self.name = name
        self.extra = extra
        self.pypy = name.endswith("-pypy")
        self.defaults = name.endswith("-defaults")
        self.venv = VENV_PYPY if self.pypy else VENV
        self.py = venv_python(self.venv)
        self.base = name.split("-")[0]
        self.loop = "asyncio"
        self.http = None
        self.notes: list[str] = []

    def check(self) -> str | None:
        """None if runnable, else the reason it is not."""
        if self.base == FLOOR:
            if not FLOOR_BIN.exists():
                return f"{rel(FLOOR_BIN)} not built (cargo build failed or was skipped)"
            return None
        if not self.py.exists():
            return f"{rel(self.venv)} does not exist"
        module = self.base
        if not _py_has(self.py, module):
            hint = {
                "ferrocorn": " (build failed or --skip-build without a previous build)",
                "h2corn": " (not installed: h2corn is pinned in requirements.txt; see the "
                "pip output of the venv setup)",
                "socketify": " (its native library links libuv.so.1: apt-get install libuv1)",
            }.get(self.base, "")
            return f"`import {module}` fails in {rel(self.venv)}{hint}"
        has_uvloop = not self.pypy and _py_has(self.py, "uvloop")
        if self.base == "ferrocorn":
            self.loop = "uvloop" if has_uvloop else "auto"
            if not has_uvloop:
                self.notes.append("uvloop not importable: --loop auto")
        elif self.base in ("granian", "h2corn"):
            # On PyPy granian's `auto` would also end on asyncio (no uvloop there): said outright.
            self.loop = "uvloop" if has_uvloop else ("asyncio" if self.pypy else "auto")
        elif self.base == "uvicorn":
            self.loop = "uvloop" if has_uvloop else "asyncio"
            self.http = "httptools" if _py_has(self.py, "httptools") else "h11"
        by_reason: dict[str, list[str]] = {}
        for scen, why in SCENARIO_LIMITS.get(self.name, {}).items():
            by_reason.setdefault(why, []).append(scen)
        for why, scens in by_reason.items():
            self.notes.append(f"not run in {', '.join(scens)}: {why}")
        return None

    def runs(self, scenario: str) -> bool:
        """Whether this server takes part in `scenario` (SCENARIO_LIMITS, a scenario's bases)."""
        if scenario in SCENARIO_LIMITS.get(self.name, {}):
            return False
        return self.base in SCENARIOS[scenario].get("bases", (self.base,))

    def argv(self, port: int, scenario: str) -> list[str]:
        py = str(self.py)
        spec = SCENARIOS.get(scenario, {})
        if self.base == FLOOR:
            # The last element stands where the others have the app target (see idle_extra).
            cmd = [str(FLOOR_BIN), "--host", "127.0.0.1", "--port", str(port)]
            files = floor_files_args(spec)
            return cmd + files + self.extra + ["--app", spec.get("floor_app", "app")]
        if self.base == "socketify":
            # The app target first, as socketify's CLI has it. The same argv in idle10k: socketify
            # has no keep-alive or header timeout to raise.
            app = spec.get("app", APP_TARGET)
            return [py, str(SOCKETIFY_SERVE), app, "--port", str(port), *self.extra]
        if self.base == "ferrocorn":
            cmd = [
                py,
                "-m",
                "ferrocorn",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *([] if self.defaults else ["--no-access-log"]),
                "--loop",
                self.loop,
            ]
            if scenario == "idle10k":
                # closes idle keep-alive connections after 5 s by default (like uvicorn)
                cmd += ["--timeout-keep-alive", "300"]
        elif self.base == "granian":
            cmd = [
                py,
                "-m",
                "granian",
                "--interface",
                "asgi",
                "--workers",
                "1",
                "--loop",
                self.loop,
                "--no-ws",
                *(
                    ["--access-log"]
                    if self.defaults
                    else ["--log-level", "warning", "--no-access-log"]
                ),
                *GRANIAN_TUNING,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ]
            if scenario == "idle10k":
                # granian serves at most --backpressure connections at once (default backlog/workers
                # = 1024) and leaves the rest in the listen queue, so raise it to hold every idle
                # connection. hyper's header-read timer also runs on idle keep-alive connections:
                # use the largest value granian accepts so they stay open while measured.
                cmd += [
                    "--backpressure",
                    str(IDLE_CAPACITY),
                    "--http1-header-read-timeout",
                    "60000",
                ]
        elif self.base == "h2corn":
            cmd = [
                py,
                "-m",
                "h2corn",
                *H2CORN_TUNING,
                "--loop",
                self.loop,
                *([] if self.defaults else ["--no-access-log"]),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ]
            if scenario == "idle10k":
                # Its request-head timer (10 s by default) also runs on idle keep-alive
                # connections: with 200 idle connections all were closed 12 s after their
                # response. Keep-alive itself ends after 120 s by default; both go to 300 s.
                cmd += ["--timeout-keep-alive", "300", "--timeout-request-header", "300"]
        else:
            cmd = [
                py,
                "-m",
                "uvicorn",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--loop",
                self.loop,
                "--http",
                self.http or "h11",
                *([] if self.defaults else ["--no-access-log", "--log-level", "warning"]),
                "--lifespan",
                "on",
            ]
            if scenario == "idle10k":
                # uvicorn closes idle keep-alive connections after 5 s by default.
                cmd += ["--timeout-keep-alive", "300"]
        if spec.get("static") and self.base in ("ferrocorn", "granian"):
            # The same flags for both: ferrocorn took granian's names.
            cmd += ["--static-path-route", "/static", "--static-path-mount", str(BENCH_FILES)]
        return cmd + self.extra + [spec.get("app", APP_TARGET)]

    def versions(self) -> dict:
        if self.base == FLOOR:
            v = floor_versions()
            return {
                "python": "–",
                FLOOR: f"hyper {v.get('hyper', '?')}, tokio {v.get('tokio', '?')}",
            }
        code = (
            "import json, platform, importlib.metadata as m\n"
            "out = {'python': platform.python_implementation() + ' ' + platform.python_version()}\n"
            "for d in ('ferrocorn', 'granian', 'uvicorn', 'h2corn', 'socketify', 'uvloop',\n"
            "          'httptools', 'h11',\n"
            "          'fastapi', 'starlette', 'pydantic'):\n"
            "    try: out[d] = m.version(d)\n"
            "    except Exception: pass\n"
            "print(json.dumps(out))\n"
        )
        try:
            return json.loads(capture([self.py, "-c", code]))
        except ValueError:
            return {}


def floor_files_args(spec: dict) -> list[str]:
    """`--files DIR` for the floor server in a scenario it serves files in (`floor_app`
    "files": file_app.py's FileResponse, the files ensure_bench_files makes)."""
    return ["--files", str(BENCH_FILES)] if spec.get("floor_app") == "files" else []


def floor_args_display(spec: dict) -> str:
    """The floor server's arguments for a scenario as the report shows them (`--app ...`,
    paths from the repository root)."""
    args = ["--app", spec.get("floor_app", "app"), *floor_files_args(spec)]
    prefix = str(REPO) + "/"
    return shlex.join(a[len(prefix) :] if a.startswith(prefix) else a for a in args)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(port: int, timeout: float = 1.0, path: str = "/plaintext") -> bool:
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(request)
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data.startswith(b"HTTP/1.1 200") or data.startswith(b"HTTP/1.0 200")
    except OSError:
        return False


class Running:
    def __init__(self, server: Server, scenario: str, round_no: int, pin: bool, nofile: int):
        self.server = server
        self.port = free_port()
        LOGS.mkdir(parents=True, exist_ok=True)
        self.logfile = LOGS / f"{server.name}-{scenario}-r{round_no + 1}.log"
        self.probe_path = SCENARIOS.get(scenario, {}).get("probe", "/plaintext")
        self.cmd = server.argv(self.port, scenario)
        wrapped = ["prlimit", f"--nofile={nofile}:{nofile}", *self.cmd]
        if pin:
            wrapped = ["taskset", "-c", SERVER_CPU, *wrapped]
        self.wrapped = wrapped
        self._fh = open(self.logfile, "wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop(STAGE_ENV, None)
        env.pop(STATE_ENV, None)
        self.proc = subprocess.Popen(
            wrapped,
            cwd=REPO,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with code {self.proc.returncode} before answering"
            if probe(self.port, path=self.probe_path):
                return None
            time.sleep(0.1)
        return f"did not answer GET {self.probe_path} on port {self.port} within {timeout:.0f}s"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        return process_tree(self.proc.pid)

    def log_tail(self, n: int = 12) -> str:
        try:
            lines = self.logfile.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("    | " + line for line in lines[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        # Anything left in the server's own process group (e.g. a worker) gets SIGKILL.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            warn(f"{self.server.name} (pid {self.proc.pid}) did not exit")
        self._fh.close()


# --------------------------------------------------------------------------------------------
# wrk
# --------------------------------------------------------------------------------------------

LUA_REPORT = r"""
-- Percentiles are computed here from the raw latency histogram: wrk's own
-- latency:percentile() returns 0 when pipelining is used.
local function percentiles(lat, ps)
  local n, vals, cnts, total = #lat, {}, {}, 0
  for i = 1, n do
    local v, c = lat(i)
    vals[i], cnts[i], total = v, c, total + c
  end
  local out = {}
  for k, p in ipairs(ps) do
    local rank, acc = math.max(1, math.ceil(p / 100 * total)), 0
    out[k] = 0
    for i = 1, n do
      acc = acc + cnts[i]
      if acc >= rank then out[k] = vals[i]; break end
    end
  end
  return out, total
end

function done(summary, latency, requests)
  local e = summary.errors
  local p, samples = percentiles(latency, {50, 90, 99, 99.9})
  io.write(string.format(
    'BENCH_JSON {"duration_us":%d,"requests":%d,"bytes":%d,"connect":%d,"read":%d,' ..
    '"write":%d,"status":%d,"timeout":%d,"lat_mean_us":%.1f,"lat_max_us":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"latency_samples":%d}\n',
    summary.duration, summary.requests, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency.mean, latency.max, p[1], p[2], p[3], p[4], samples))
end
"""

LUA_PIPELINE = r"""
-- HTTP/1.1 pipelining: every write carries `depth` copies of the request.
local depth = 16
local batch = nil
init = function(args)
  depth = tonumber(args[1]) or depth
  local r = {}
  for i = 1, depth do r[i] = wrk.format() end
  batch = table.concat(r)
end
request = function() return batch end
"""


def lua_script(name: str, spec: dict) -> Path:
    parts = [
        f"-- generated by benchmarks/run.py for scenario {name!r}",
        f'wrk.headers["Accept"] = "{spec["accept"]}"',
        'wrk.headers["Connection"] = "keep-alive"',
    ]
    if spec.get("post_bytes"):
        parts += [
            'wrk.method = "POST"',
            f'wrk.body = string.rep("e", {spec["post_bytes"]})',
            'wrk.headers["Content-Type"] = "application/octet-stream"',
        ]
    if spec.get("pipeline"):
        parts.append(LUA_PIPELINE)
    parts.append(LUA_REPORT)
    path = WORK / "lua" / f"{name}.lua"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts))
    return path


def run_wrk(port: int, name: str, spec: dict, duration: float, threads: int, pin: bool) -> dict:
    script = lua_script(name, spec)
    conns = spec["connections"]
    cmd = [
        "wrk",
        "-t",
        str(min(threads, conns)),
        "-c",
        str(conns),
        "-d",
        f"{max(1, round(duration))}s",
        "--timeout",
        f"{spec.get('timeout', 8)}s",
        "--latency",
        "-s",
        str(script),
        f"http://127.0.0.1:{port}{spec['path']}",
    ]
    if spec.get("pipeline"):
        cmd += ["--", str(spec["pipeline"])]
    if pin:
        cmd = ["taskset", "-c", CLIENT_CPU, *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
    except subprocess.TimeoutExpired:
        return {"error": "wrk hung (killed after timeout)"}
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH_JSON "):
            result = json.loads(line[len("BENCH_JSON ") :])
    if proc.returncode != 0 or result is None:
        return {
            "error": f"wrk failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()[-300:]}"
        }
    result["client_cpu_pct"] = 100.0 * client_cpu / wall if wall > 0 else 0.0
    result["wrk_stdout"] = proc.stdout
    return result


# --------------------------------------------------------------------------------------------
# Download client for the stream scenarios
# --------------------------------------------------------------------------------------------
# wrk reads 8 KiB at a time and parses every byte, so on large bodies it saturates its core
# before a fast server does (it hit >90% CPU at ~3 GiB/s here). This client reads with
# recv_into() into a 1 MiB buffer and only parses headers: far cheaper per byte. It keeps
# `connections` keep-alive connections, each with one request in flight, for `duration` s.


class _Conn:
    __slots__ = ("sock", "head", "remaining", "start", "last")

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.head = b""
        self.remaining = -1  # -1: reading the header block
        self.start = 0.0
        self.last = 0.0


def run_stream_client(port: int, spec: dict, duration: float, timeout: float | None = None) -> dict:
    import selectors

    timeout = timeout or spec.get("timeout", 30)
    request = (
        f"GET {spec['path']} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Accept: {spec['accept']}\r\nConnection: keep-alive\r\n\r\n"
    ).encode()
    sel = selectors.DefaultSelector()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    latencies: list[float] = []
    total_bytes = 0
    conns: list[_Conn] = []

    def open_conn() -> _Conn | None:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.setblocking(False)
        except OSError:
            errors["connect"] += 1
            return None
        c = _Conn(sock)
        sel.register(sock, selectors.EVENT_READ, c)
        conns.append(c)
        return c

    def send(c: _Conn) -> bool:
        try:
            c.sock.sendall(request)  # small request: fits the empty socket buffer
        except OSError:
            errors["write"] += 1
            drop(c)
            return False
        c.start = c.last = time.monotonic()
        c.head, c.remaining = b"", -1
        return True

    def drop(c: _Conn) -> None:
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
        if c in conns:
            conns.remove(c)

    cpu0 = time.process_time()
    t0 = time.monotonic()
    deadline = t0 + duration
    for _ in range(spec["connections"]):
        c = open_conn()
        if c:
            send(c)
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        while len(conns) < spec["connections"]:  # replace dropped connections
            c = open_conn()
            if not c or not send(c):
                break
        for key, _ in sel.select(timeout=min(0.5, deadline - now)):
            c = key.data
            try:
                n = c.sock.recv_into(view)
            except BlockingIOError:
                continue
            except OSError:
                n = 0
            if n == 0:
                errors["read"] += 1
                drop(c)
                continue
            total_bytes += n
            c.last = time.monotonic()
            if c.remaining < 0:
                c.head += bytes(view[:n])
                end = c.head.find(b"\r\n\r\n")
                if end < 0:
                    continue
                head, body_len = c.head[:end], len(c.head) - end - 4
                c.head = b""
                length = None
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if not head.startswith(b"HTTP/1.1 2") or length is None:
                    errors["status" if length is not None else "read"] += 1
                    drop(c)
                    continue
                c.remaining = length - body_len
            else:
                c.remaining -= n
            if c.remaining == 0:
                done_at = time.monotonic()
                if done_at <= deadline:
                    latencies.append(done_at - c.start)
                    send(c)
            elif c.remaining < 0:
                errors["read"] += 1  # more bytes than announced
                drop(c)
        now = time.monotonic()
        for c in list(conns):
            if now - c.last > timeout:
                errors["timeout"] += 1
                drop(c)
    elapsed = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    for c in list(conns):
        drop(c)
    sel.close()
    latencies.sort()

    def pct(p: float) -> int:
        if not latencies:
            return 0
        return int(
            latencies[min(len(latencies) - 1, max(0, int(p / 100 * len(latencies) + 0.5) - 1))]
            * 1e6
        )

    return {
        "duration_us": int(elapsed * 1e6),
        "requests": len(latencies),
        "bytes": total_bytes,
        **errors,
        "lat_mean_us": (sum(latencies) / len(latencies) * 1e6) if latencies else 0.0,
        "lat_max_us": int(latencies[-1] * 1e6) if latencies else 0,
        "p50_us": pct(50),
        "p90_us": pct(90),
        "p99_us": pct(99),
        "p999_us": pct(99.9),
        "latency_samples": len(latencies),
        "client_cpu_pct": 100.0 * cpu / elapsed if elapsed else 0.0,
        "client": "python",
        "wrk_stdout": f"python stream client: {len(latencies)} responses, {total_bytes} bytes "
        f"in {elapsed:.2f}s, errors {errors}\n",
    }


# --------------------------------------------------------------------------------------------
# Idle connections client
# --------------------------------------------------------------------------------------------


async def _open_idle(
    port: int, count: int, concurrency: int = 256, timeout: float = 5.0, budget: float = 90.0
):
    loop = asyncio.get_running_loop()
    request = (
        f"GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n\r\n"
    ).encode()
    sem = asyncio.Semaphore(concurrency)
    socks: list[socket.socket] = []
    failures: dict[str, int] = {}

    async def read_response(s: socket.socket) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = await loop.sock_recv(s, 4096)
            if not chunk:
                raise ConnectionError("closed before response")
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise ConnectionError("non-200 response")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = await loop.sock_recv(s, 4096)
            if not chunk:
                raise ConnectionError("closed mid-body")
            body += chunk

    async def one() -> None:
        async with sem:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(s, ("127.0.0.1", port)), timeout)
                await loop.sock_sendall(s, request)
                await asyncio.wait_for(read_response(s), timeout)
                socks.append(s)
            except asyncio.CancelledError:
                s.close()
                raise
            except Exception as exc:  # noqa: BLE001 -- every failure is counted, not raised
                key = type(exc).__name__
                failures[key] = failures.get(key, 0) + 1
                s.close()

    tasks = [asyncio.ensure_future(one()) for _ in range(count)]
    _done, pending = await asyncio.wait(tasks, timeout=budget)
    if pending:  # server stopped accepting/answering: give up on the rest, count them
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        failures["over-budget"] = failures.get("over-budget", 0) + len(pending)
    return socks, failures


def _still_open(s: socket.socket) -> bool:
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def _close_all(socks: list[socket.socket]) -> None:
    linger = struct.pack("ii", 1, 0)  # RST on close: no TIME_WAIT pile-up across rounds
    for s in socks:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        except OSError:
            pass
        s.close()


def ensure_bench_files() -> None:
    """The files of the file scenarios (random bytes; 1g.bin sparse), made once."""
    BENCH_FILES.mkdir(parents=True, exist_ok=True)
    for name, size in BENCH_FILE_SIZES.items():
        path = BENCH_FILES / name
        if path.exists() and path.stat().st_size == size:
            continue
        with open(path, "wb") as f:
            if size > 64 * MiB:
                f.truncate(size)
            else:
                f.write(os.urandom(size))


def serving_pid(pids: list[int]) -> int:
    """The process holding the most file descriptors: the one serving the connections."""
    return max(pids, key=fd_count)


def measure_idle(run: Running, count: int, settle: float) -> dict:
    time.sleep(0.5)
    pids = run.pids()
    before = {p: rss_kib(p) for p in pids}
    cpu0 = cpu_seconds(pids)
    t0 = time.monotonic()
    socks, failures = asyncio.run(_open_idle(run.port, count))
    open_s = time.monotonic() - t0
    try:
        time.sleep(settle)
        pids = run.pids()
        sp = serving_pid(pids)
        after_main = rss_kib(sp)
        after_tree = sum(rss_kib(p) for p in pids)
        before_main = before.get(sp, 0)
        before_tree = sum(before.values())
        cpu1 = cpu_seconds(pids)
        alive = sum(1 for s in socks if _still_open(s))
    finally:
        _close_all(socks)
    ok = len(socks)
    return {
        "connections": count,
        "responded": ok,
        "alive": alive,
        "failures": failures,
        "errors": (count - ok) + (ok - alive),
        "rss_before_kib": before_main,
        "rss_kib": after_main,
        "rss_tree_before_kib": before_tree,
        "rss_tree_kib": after_tree,
        "kib_per_conn": (after_main - before_main) / alive if alive else None,
        "open_seconds": open_s,
        "server_cpu_s": cpu1 - cpu0,
        "cpu_us_per_req": (cpu1 - cpu0) * 1e6 / ok if ok else None,
        "serving_pid_is_root": sp == run.proc.pid,
        "processes": len(pids),
    }


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------


class StartFailure(Exception):
    pass


def measure(server: Server, name: str, spec: dict, round_no: int, opts) -> dict:
    run = Running(server, name, round_no, opts.pin, opts.nofile)
    try:
        problem = run.wait_ready(opts.ready_timeout * (3 if server.pypy else 1))
        if problem:
            raise StartFailure(
                f"{problem}\n    command: {shlex.join(run.wrapped)}\n{run.log_tail()}"
            )
        if spec["kind"] == "idle":
            res = measure_idle(run, opts.idle_conns, opts.idle_settle)
        else:
            # `client="wrk"`: a scenario whose responses the Python client cannot frame.
            python_client = opts.stream_client == "python" and spec.get("client") != "wrk"
            if spec.get("throughput") and python_client:

                def load(seconds: float) -> dict:
                    return run_stream_client(run.port, spec, seconds)
            else:

                def load(seconds: float) -> dict:
                    return run_wrk(run.port, name, spec, seconds, opts.wrk_threads, opts.pin)

            warmup = max(opts.warmup, opts.pypy_warmup) if server.pypy else opts.warmup
            if warmup > 0:
                warm = load(warmup)
                if "error" in warm:
                    return {"error": "warm-up: " + warm["error"]}
            pids = run.pids()
            cpu0 = cpu_seconds(pids)
            core0 = core_busy_seconds(int(SERVER_CPU))
            t0 = time.monotonic()
            res = load(opts.duration)
            wall = time.monotonic() - t0
            cpu1 = cpu_seconds(run.pids())
            core1 = core_busy_seconds(int(SERVER_CPU))
            if "error" in res:
                if not run.alive():
                    res["error"] += (
                        f" -- server died (exit {run.proc.returncode})\n{run.log_tail()}"
                    )
                return res
            secs = res["duration_us"] / 1e6
            res["rps"] = res["requests"] / secs if secs else 0.0
            res["mib_s"] = res["bytes"] / secs / MiB if secs else 0.0
            res["server_cpu_s"] = cpu1 - cpu0
            res["server_cpu_pct"] = 100.0 * (cpu1 - cpu0) / wall if wall else 0.0
            if opts.pin and wall:
                # Time the server's core spent on anything but the server: other processes
                # (a build, tests...) and interrupts. High values mean a noisy measurement.
                res["core_other_pct"] = max(0.0, 100.0 * ((core1 - core0) - (cpu1 - cpu0)) / wall)
            res["cpu_us_per_req"] = (
                (cpu1 - cpu0) * 1e6 / res["requests"] if res["requests"] else None
            )
            res["errors"] = sum(res[k] for k in ("connect", "read", "write", "timeout", "status"))
            res["processes"] = len(pids)
            res.setdefault("client", "wrk")
            (LOGS / f"{server.name}-{name}-r{round_no + 1}.client.txt").write_text(
                res.pop("wrk_stdout")
            )
        if not run.alive() and "error" not in res:
            return {
                "error": f"server exited during the measurement (code {run.proc.returncode})\n"
                f"{run.log_tail()}",
                "partial": res,
            }
        return res
    finally:
        run.stop()


def primary(name: str, res: dict) -> float | None:
    kind = SCENARIOS[name]
    if "error" in res:
        return None
    if kind["kind"] == "idle":
        return float(res["rss_kib"])
    if kind.get("throughput"):
        return res["mib_s"]
    return res["rps"]


def summarize(name: str, rounds: list[dict]) -> dict:
    good = [r for r in rounds if primary(name, r) is not None]
    out: dict = {"rounds": rounds}
    if not good:
        out["status"] = "failed"
        out["reason"] = next(
            (r.get("error") for r in rounds if "error" in r), "no successful round"
        )
        return out
    ordered = sorted(good, key=lambda r: primary(name, r))
    med = ordered[(len(ordered) - 1) // 2]  # lower median: a real round, not an average
    out["status"] = "ok"
    out["median"] = med
    out["value"] = primary(name, med)
    out["errors_all_rounds"] = sum(r.get("errors", 0) for r in good)
    out["failed_rounds"] = len(rounds) - len(good)
    out["spread_pct"] = (
        (100.0 * (primary(name, ordered[-1]) - primary(name, ordered[0])) / primary(name, med))
        if len(good) > 1 and primary(name, med)
        else 0.0
    )
    return out


def report_only(args: argparse.Namespace) -> None:
    src = Path(args.report_from)
    results = json.loads(src.read_text())
    out_dir = Path(args.output_dir) if args.output_dir else src.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = src.stem[len("results") :] if src.stem.startswith("results") else ""
    png_path = out_dir / f"results{suffix}.png"
    chart_ok = write_chart(results, png_path)
    md_path = out_dir / f"RESULTS{suffix}.md"
    md_path.write_text(
        render_markdown(results, png_path.name if chart_ok else None) + other_suites(md_path)
    )
    log(f"== wrote {rel(md_path)}" + (f" and {rel(png_path)}" if chart_ok else ""))


def stage2(args: argparse.Namespace) -> None:
    if args.report_from:
        report_only(args)
        return
    state = json.loads(os.environ.get(STATE_ENV, "{}"))
    if state.get("venv"):
        set_venv(Path(state["venv"]))
    names = selected_servers(args)
    if args.scenarios:
        scen_names = [s.strip() for s in args.scenarios.split(",")]
    else:
        scen_names = PYPY_SCENARIOS if args.pypy else list(SCENARIOS)
    bad = [s for s in scen_names if s not in SCENARIOS]
    if bad:
        raise SystemExit(f"unknown scenario(s) {bad}; choose from {', '.join(SCENARIOS)}")

    extra: dict[str, list[str]] = {}
    for item in args.extra_args:
        key, _, value = item.partition("=")
        extra.setdefault(key, []).extend(shlex.split(value))

    pin = (os.cpu_count() or 1) >= 2 and not args.no_pin
    if not pin and not args.no_pin:
        warn("fewer than 2 CPUs: servers and wrk are not pinned")
    if pin:
        try:
            os.sched_setaffinity(
                0, {int(CLIENT_CPU)}
            )  # this script's own client work stays off CPU 0
        except OSError:
            pass
    nofile = raise_nofile(NOFILE)
    need = args.idle_conns + 1024
    if "idle10k" in scen_names and nofile < need:
        warn(f"RLIMIT_NOFILE is only {nofile}; idle10k needs ~{need}: reducing connections")
        args.idle_conns = max(100, nofile - 1024)

    opts = argparse.Namespace(
        pin=pin,
        nofile=nofile,
        duration=args.duration,
        warmup=args.warmup,
        stream_client=args.stream_client,
        pypy_warmup=args.pypy_warmup,
        wrk_threads=args.wrk_threads,
        idle_conns=args.idle_conns,
        idle_settle=args.idle_settle,
        ready_timeout=args.ready_timeout,
    )

    skipped: dict[str, str] = dict(state.get("unavailable", {}))
    servers: list[Server] = []
    for n in names:
        srv = Server(n, extra.get(n, []))
        if n in skipped:
            log(f"SKIP {n}: {skipped[n]}")
            continue
        reason = srv.check()
        if reason:
            skipped[n] = reason
            log(f"SKIP {n}: {reason}")
            continue
        servers.append(srv)

    out_dir = Path(args.output_dir) if args.output_dir else (WORK / "quick" if args.quick else HERE)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = ("-pypy" if args.pypy else "") + (
        f"-{state['python_label']}" if state.get("python_label") else ""
    )

    defaults_scen = defaults_scenarios(args)
    plan = {
        n: [s for s in servers if (not s.defaults or n in defaults_scen) and s.runs(n)]
        for n in scen_names
    }
    if any(SCENARIOS[n].get("group") == "files" for n in scen_names):
        ensure_bench_files()
    meta = collect_meta(args, state, servers, names, opts, scen_names)
    meta["settings"]["defaults_scenarios"] = sorted(defaults_scen)
    results: dict = {"meta": meta, "scenarios": {}, "skipped": skipped}

    per_run = {
        n: (opts.warmup + opts.duration + 2.5)
        if SCENARIOS[n]["kind"] == "wrk"
        else 8 + opts.idle_settle
        for n in scen_names
    }
    eta = sum(per_run[n] * len(plan[n]) for n in scen_names) * args.rounds
    n_pypy_wrk = sum(
        1 for n in scen_names if SCENARIOS[n]["kind"] == "wrk" for s in plan[n] if s.pypy
    )
    eta += n_pypy_wrk * args.rounds * max(0.0, opts.pypy_warmup - opts.warmup)
    total = sum(len(plan[n]) for n in scen_names) * args.rounds
    log(
        f"== {len(servers)} server(s), {len(scen_names)} scenario(s), {args.rounds} round(s): "
        f"{total} measurements; estimated {eta / 60:.1f} min"
    )
    if not servers:
        warn("no runnable server: nothing to measure")

    if any(s.base == FLOOR for s in servers):
        results["python_floor"] = measure_python_floor(scen_names, args, pin)

    step = 0
    started = time.monotonic()
    try:
        for name in scen_names:
            spec = SCENARIOS[name]
            per_server: dict[str, list[dict]] = {s.name: [] for s in plan[name]}
            for r in range(args.rounds):
                for srv in plan[name]:
                    if srv.name in skipped:
                        continue
                    step += 1
                    label = f"[{step}/{total}] {name} round {r + 1}/{args.rounds} {srv.name}"
                    res = None
                    for attempt in range(2):
                        try:
                            res = measure(srv, name, spec, r, opts)
                            break
                        except StartFailure as exc:
                            if attempt == 0:
                                warn(f"{label}: failed to start, retrying once:\n    {exc}")
                                continue
                            skipped[srv.name] = "failed to start: " + str(exc).splitlines()[0]
                            log(
                                f"SKIP {srv.name} for the rest of the run: "
                                f"failed to start twice\n    {exc}"
                            )
                    if res is None:
                        continue
                    per_server[srv.name].append(res)
                    log(f"{label}: {describe(name, res)}")
            results["scenarios"][name] = {
                "title": spec["title"],
                "description": spec["desc"],
                "servers": {n: summarize(name, rs) for n, rs in per_server.items() if rs},
            }
            add_ratios(name, results["scenarios"][name], reference_of(s.name for s in servers))
            floor = floor_entry(results, name)
            if floor:
                results["scenarios"][name]["floor"] = floor
            write_json(results, WORK / "partial-results.json")
    except KeyboardInterrupt:
        warn("interrupted: writing partial results")
        results["meta"]["interrupted"] = True
    results["meta"]["elapsed_seconds"] = round(time.monotonic() - started, 1)
    results["meta"]["loadavg_end"] = _loadavg()
    results["skipped"] = skipped

    json_path = out_dir / f"results{suffix}.json"
    md_path = out_dir / f"RESULTS{suffix}.md"
    png_path = out_dir / f"results{suffix}.png"
    write_json(results, json_path)
    chart_ok = write_chart(results, png_path)
    md_path.write_text(
        render_markdown(results, png_path.name if chart_ok else None) + other_suites(md_path)
    )
    log(
        f"== done in {results['meta']['elapsed_seconds'] / 60:.1f} min: "
        f"{rel(md_path)}, {rel(json_path)}" + (f", {rel(png_path)}" if chart_ok else "")
    )


def defaults_scenarios(args: argparse.Namespace) -> set[str]:
    """The scenarios the -defaults servers run in."""
    if not args.defaults_scenarios:
        return set(DEFAULTS_SCENARIOS)
    if args.defaults_scenarios.strip() == "all":
        return set(SCENARIOS)
    names = {s.strip() for s in args.defaults_scenarios.split(",") if s.strip()}
    bad = sorted(names - set(SCENARIOS))
    if bad:
        raise SystemExit(f"unknown --defaults-scenarios {bad}; choose from {', '.join(SCENARIOS)}")
    return names


def measure_python_floor(scen_names: list[str], args: argparse.Namespace, pin: bool) -> dict:
    """benchmarks/python_floor.py with the venv's interpreter (the one ferrocorn runs on),
    pinned to the servers' CPU: the bare Python CPU µs of each scenario's request."""
    wanted = [n for n in scen_names if SCENARIOS[n]["kind"] == "wrk"]
    if not wanted:
        return {}
    cmd = [
        str(venv_python(VENV)),
        str(PYTHON_FLOOR),
        "--json",
        "--scenarios",
        ",".join(wanted),
        "--seconds",
        str(args.python_floor_seconds),
    ]
    if pin:
        cmd = ["taskset", "-c", SERVER_CPU, *cmd]
    log(f"== Python floor: {shlex.join(cmd)}")
    env = dict(os.environ)
    env.pop(STAGE_ENV, None)
    env.pop(STATE_ENV, None)
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=60 + 30 * len(wanted)
        )
        out = json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        warn(f"python_floor.py failed: {exc}")
        return {"error": str(exc)}
    out["command"] = shlex.join(
        a[len(str(REPO)) + 1 :] if a.startswith(str(REPO) + "/") else a for a in cmd
    )
    for name, r in out.get("scenarios", {}).items():
        if r.get("status") == "ok":
            log(
                f"   {name}: {r['cpu_us_per_req']:.2f} CPU µs/req "
                f"(scope {r['scope_us_per_req']:.2f} + app {r['app_us_per_req']:.2f})"
                + (f", under {r['driver']}" if r.get("driver") else "")
            )
        else:
            log(f"   {name}: n/a ({r.get('reason')})")
    return out


def floor_entry(results: dict, name: str) -> dict | None:
    """The floor of one scenario: the hyper floor server's CPU µs/req from this run plus the
    Python floor's; ferrocorn's CPU µs/req and its ratio to it. None without both parts, or
    when the floor server's measured round had error statuses (it did not send the
    scenario's response). `python_driver`: how the Python floor ran the app when it needed
    a running event loop (None: no loop)."""
    scen = results["scenarios"].get(name, {})
    hyper = scen.get("servers", {}).get(FLOOR)
    py = results.get("python_floor", {}).get("scenarios", {}).get(name)
    if not hyper or hyper.get("status") != "ok" or not py or py.get("status") != "ok":
        return None
    hyper_us = hyper["median"].get("cpu_us_per_req")
    if hyper_us is None or hyper["median"].get("status"):
        return None
    entry = {
        "hyper_cpu_us_per_req": hyper_us,
        "python_cpu_us_per_req": py["cpu_us_per_req"],
        "python_scope_us_per_req": py["scope_us_per_req"],
        "python_app_us_per_req": py["app_us_per_req"],
        "python_driver": py.get("driver"),
        "floor_cpu_us_per_req": hyper_us + py["cpu_us_per_req"],
        "ratios": {},
    }
    for sname, e in scen["servers"].items():
        if sname == FLOOR or e.get("status") != "ok":
            continue
        cpu = e["median"].get("cpu_us_per_req")
        if cpu is not None:
            entry["ratios"][sname] = cpu / entry["floor_cpu_us_per_req"]
    return entry


def describe(name: str, res: dict) -> str:
    if "error" in res:
        return "ERROR " + res["error"]
    if SCENARIOS[name]["kind"] == "idle":
        return (
            f"RSS {res['rss_kib'] / 1024:.1f} MiB (before {res['rss_before_kib'] / 1024:.1f}), "
            f"{res['alive']}/{res['connections']} alive, opened in {res['open_seconds']:.1f}s"
        )
    s = (
        f"{res['rps']:,.0f} req/s, p50 {res['p50_us'] / 1000:.2f} ms, "
        f"p99 {res['p99_us'] / 1000:.2f} ms, "
        f"errors {res['errors']}, cpu {fmt_num(res['cpu_us_per_req'], 1)} us/req "
        f"(server {res['server_cpu_pct']:.0f}%, client {res['client_cpu_pct']:.0f}%)"
    )
    if SCENARIOS[name].get("throughput"):
        s = f"{res['mib_s']:,.0f} MiB/s, " + s
    return s


def reference_of(names) -> str:
    """The server a run's ratios are taken against: the first of REFERENCES that ran."""
    present = set(names)
    return next((r for r in REFERENCES if r in present), REFERENCES[0])


def results_reference(results: dict) -> str:
    return reference_of(n for scen in results["scenarios"].values() for n in scen["servers"])


def add_ratios(name: str, scen: dict, ref: str) -> None:
    for server, entry in scen["servers"].items():
        ratio = pair_ratio(scen, server, ref)
        if ratio is not None:
            entry[f"ratio_vs_{ref}"] = ratio


def write_json(obj: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def display_cmd(server: Server) -> str:
    """The server's command line as run from the repo root, with PORT for the port."""
    out = []
    for a in server.argv(0, ""):
        if a.startswith(str(REPO) + "/"):
            a = a[len(str(REPO)) + 1 :]
        out.append(a)
    return shlex.join(out).replace("--port 0", "--port PORT")


def idle_extra(server: Server) -> str:
    """The arguments a server gets only in idle10k (so it keeps 10k idle connections open)."""
    base, idle = server.argv(0, ""), server.argv(0, "idle10k")
    return shlex.join(idle[len(base) - 1 - len(server.extra) : len(idle) - 1 - len(server.extra)])


def collect_meta(args, state, servers: list[Server], names, opts, scen_names) -> dict:
    cpu_model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kib / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    versions = {s.name: s.versions() for s in servers}
    py_info = capture(
        [
            venv_python(VENV),
            "-c",
            "import platform, sys; print(platform.python_implementation(), "
            "platform.python_version(), sys.base_prefix)",
        ]
    ).split(" ", 2)
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": state.get("cmdline", "python " + shlex.join(sys.argv)),
        "quick": args.quick,
        "machine": {
            "nproc": str(os.cpu_count()),  # not `nproc`: this process is pinned to one CPU
            "cpu_model": cpu_model,
            "kernel": platform.release(),
            "memory": mem,
            "loadavg_start": _loadavg(),
        },
        "wrk": capture(["wrk", "-v"]).splitlines()[0].split(" [")[0]
        if shutil.which("wrk")
        else "?",
        "ferrocorn_git": git_revision(),
        # The CPython the suite ran on (servers, apps and the Python floor alike).
        "python": {
            "version": " ".join(py_info[:2]),
            "home": py_info[2] if len(py_info) > 2 else "?",
            "venv": rel(VENV),
            "label": state.get("python_label") or "default",
        },
        "build": state.get("build", {}),
        "versions": versions,
        "server_notes": {s.name: s.notes for s in servers if s.notes},
        "commands": {s.name: display_cmd(s) for s in servers},
        "idle10k_extra_args": {s.name: idle_extra(s) for s in servers},
        "settings": {
            "servers": names,
            "scenarios": scen_names,
            "rounds": args.rounds,
            "duration_s": opts.duration,
            "warmup_s": opts.warmup,
            "wrk_threads": opts.wrk_threads,
            "stream_client": opts.stream_client,
            "pypy_warmup_s": opts.pypy_warmup,
            "idle_connections": opts.idle_conns,
            "idle_settle_s": opts.idle_settle,
            "pinned": opts.pin,
            "server_cpu": SERVER_CPU if opts.pin else None,
            "client_cpu": CLIENT_CPU if opts.pin else None,
            "nofile": opts.nofile,
            "granian_tuning": GRANIAN_TUNING,
            "h2corn_tuning": H2CORN_TUNING,
        },
    }


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def fmt_num(v, digits: int = 0) -> str:
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def fmt_pct(v) -> str:
    return "–" if v is None else f"{v:.0f}%"


def fmt_ms(us) -> str:
    return "–" if us is None else f"{us / 1000:.2f} ms"


def fmt_ratio(v) -> str:
    if v is None:
        return "n/a"
    return f"{v:.2f}×"


def _errors_cell(entry: dict) -> str:
    med = entry["median"]
    total = entry.get("errors_all_rounds", 0)
    kinds = [
        f"{k} {med[k]}" for k in ("connect", "read", "write", "timeout", "status") if med.get(k)
    ]
    cell = str(total)
    if kinds:
        cell += " (" + ", ".join(kinds) + ")"
    if entry.get("failed_rounds"):
        cell += f"; {entry['failed_rounds']} round(s) failed"
    return cell


# The other suites' reports (their own runs, their own tools), embedded in RESULTS.md so one
# page holds every ratio; each keeps its own command, date and versions.
OTHER_SUITES = (
    ("WS_RESULTS.md", "WebSocket echo (`benchmarks/ws_bench.py`)"),
    ("H2_TLS_RESULTS.md", "HTTP/2 and TLS (`benchmarks/h2_tls.py`)"),
)


def other_suites(md_path: Path) -> str:
    """The reports of the other benchmark scripts found next to ``md_path``, as sections."""
    parts = []
    for name, title in OTHER_SUITES:
        path = md_path.parent / name
        if not path.exists() or md_path.name != "RESULTS.md":
            continue
        body = path.read_text().strip().splitlines()
        if body and body[0].startswith("# "):
            body = body[1:]  # its own title gives way to ours
        parts.append(f"\n## {title} — from {name}, a separate run\n")
        # Its sections become subsections of ours.
        parts.append("\n".join("#" + ln if ln.startswith("## ") else ln for ln in body).strip())
        parts.append("")
    return "\n".join(parts) + ("\n" if parts else "")


def pair_ratio(scen: dict, a: str, b: str) -> float | None:
    """a's result over b's in one scenario (throughput, or RSS for idle), None if either
    failed or is missing."""
    ea, eb = scen["servers"].get(a), scen["servers"].get(b)
    if not ea or not eb or ea.get("status") != "ok" or eb.get("status") != "ok":
        return None
    return ea["value"] / eb["value"] if eb["value"] else None


def cpu_ratio(scen: dict, a: str, b: str) -> float | None:
    """a's server CPU µs per request over b's in one scenario (lower is better for a)."""
    ea, eb = scen["servers"].get(a), scen["servers"].get(b)
    if not ea or not eb or ea.get("status") != "ok" or eb.get("status") != "ok":
        return None
    ca, cb = ea["median"].get("cpu_us_per_req"), eb["median"].get("cpu_us_per_req")
    return ca / cb if ca is not None and cb else None


def _is_idle(name: str) -> bool:
    return SCENARIOS.get(name, {}).get("kind") == "idle"


def summary_table(results: dict) -> list[str]:
    """One row per scenario, one column per server pair of SUMMARY_PAIRS present in the run."""
    present = {n for scen in results["scenarios"].values() for n in scen["servers"]}
    pairs = [(a, b) for a, b in SUMMARY_PAIRS if a in present and b in present]
    if not pairs:
        return []
    out = [
        "## Summary: ratios between servers",
        "",
        "Medians from this run. Each cell: the throughput ratio (req/s, or MiB/s for stream-*; "
        "higher is better), then the server CPU µs/request ratio (`cpu`, lower is better). For "
        "idle10k: the RSS ratio (lower is better).",
        "",
        "| scenario | " + " | ".join(f"{a} / {b}" for a, b in pairs) + " |",
        "|---|" + "---:|" * len(pairs),
    ]
    for name, scen in results["scenarios"].items():
        cells = []
        for a, b in pairs:
            t = pair_ratio(scen, a, b)
            if _is_idle(name) or t is None:
                cells.append(fmt_ratio(t) if t is not None else "–")
            else:
                cells.append(f"{fmt_ratio(t)} · cpu {fmt_ratio(cpu_ratio(scen, a, b))}")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def _tuned_of(name: str) -> str:
    """ferrocorn-defaults -> ferrocorn: the same server with the suite's tuned flags."""
    return name[: -len("-defaults")] if name.endswith("-defaults") else name


def scenario_table(name: str, scen: dict, rows: list[str], ref) -> list[str]:
    """The table of one scenario for the servers `rows`; `ref(server)` names the server each
    row is compared with (None: no comparison), `ref.label` heads that column."""
    spec = SCENARIOS[name]
    servers = scen["servers"]
    out: list[str] = []
    add = out.append
    label = ref.label
    if spec["kind"] == "idle":
        add(
            "| server | RSS with idle conns | RSS before | KiB / conn | alive | errors | "
            f"RSS whole process tree | RSS vs {label} |"
        )
        add("|---|---:|---:|---:|---:|---:|---:|---:|")
        for sname in rows:
            e = servers[sname]
            if e["status"] != "ok":
                add(f"| {sname} | failed: {_oneline(e.get('reason'))} |" + "|" * 6)
                continue
            r = e["median"]
            other = ref(sname)
            add(
                f"| {sname} | {r['rss_kib'] / 1024:.1f} MiB | "
                f"{r['rss_before_kib'] / 1024:.1f} MiB | "
                f"{fmt_num(r['kib_per_conn'], 1)} | {r['alive']:,}/{r['connections']:,} | "
                f"{e['errors_all_rounds']} | "
                f"{r['rss_tree_kib'] / 1024:.1f} MiB ({r['processes']} proc) | "
                f"{fmt_ratio(pair_ratio(scen, sname, other) if other else None)} |"
            )
        return out
    tp = spec.get("throughput")
    add(
        "| server | "
        + ("MiB/s | " if tp else "")
        + "req/s | CPU µs/req | p50 | p99 | errors | server CPU | client CPU | other load | "
        f"vs {label} | CPU vs {label} |"
    )
    add("|---|" + ("---:|" if tp else "") + "---:|" * 10)
    for sname in rows:
        e = servers[sname]
        if e["status"] != "ok":
            add(f"| {sname} | failed: {_oneline(e.get('reason'))} |" + ("|" * (10 if tp else 9)))
            continue
        r = e["median"]
        flag = " ⚠" if r.get("client_cpu_pct", 0) >= 90 else ""
        other = ref(sname)
        add(
            f"| {sname} | "
            + (f"{r['mib_s']:,.0f} | " if tp else "")
            + f"{r['rps']:,.0f} | {fmt_num(r['cpu_us_per_req'], 1)} | "
            f"{fmt_ms(r['p50_us'])} | {fmt_ms(r['p99_us'])} | "
            f"{_errors_cell(e)} | {r['server_cpu_pct']:.0f}% | "
            f"{r['client_cpu_pct']:.0f}%{flag} | {fmt_pct(r.get('core_other_pct'))} | "
            f"{fmt_ratio(pair_ratio(scen, sname, other) if other else None)} | "
            f"{fmt_ratio(cpu_ratio(scen, sname, other) if other else None)} |"
        )
    spreads = [
        f"{n} {servers[n]['spread_pct']:.0f}%"
        for n in rows
        if servers[n].get("status") == "ok" and len(servers[n]["rounds"]) > 1
    ]
    if spreads:
        add("")
        add("Spread between rounds (max-min)/median: " + ", ".join(spreads) + ".")
    return out


def _ref(fn, label: str):
    fn.label = label
    return fn


def floor_section(results: dict) -> list[str]:
    pf = results.get("python_floor")
    if not pf or not any(FLOOR in scen["servers"] for scen in results["scenarios"].values()):
        return []
    out = [
        "## Floor: what a request costs with hyper and bare Python only",
        "",
        "**floor CPU µs/request** = the CPU µs/request of the `floor` server (plain hyper with "
        "ferrocorn's settings and the same responses, no Python: `benchmarks/floor`), measured "
        "in this run like every server, **plus** the Python floor: the CPU µs of building the "
        "request's ASGI scope as ferrocorn does and running the app's coroutine to the end with "
        "pre-completed `receive`/`send` awaitables, without an event loop (rows marked *with a "
        "loop*: under one, see below the table) "
        "(`benchmarks/python_floor.py`, on "
        f"{pf.get('python', '?')}, pinned to the servers' CPU, median of "
        "repetitions). A server's ratio to the floor is what its bridge between hyper and "
        "Python (and, for the others, their own HTTP stack) costs on top: 1.00× would be no "
        "overhead at all. Measured figures only; `n/a` where a part is missing.",
        "",
    ]
    if pf.get("error"):
        out += [f"_python_floor.py failed: {_oneline(pf['error'])}_", ""]
    if pf.get("command"):
        out += [f"Python floor command: `{pf['command']}`", ""]
    out += [
        "| scenario | hyper floor CPU µs/req | Python floor µs/req (scope + app) | "
        "floor CPU µs/req | ferrocorn CPU µs/req | ferrocorn / floor | others / floor |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    drivers: dict[str, str] = {}
    for name, scen in results["scenarios"].items():
        if _is_idle(name):
            continue
        hyper = scen["servers"].get(FLOOR)
        py = pf.get("scenarios", {}).get(name)
        entry = floor_entry(results, name)
        hyper_ok = hyper and hyper.get("status") == "ok"
        hyper_cell = fmt_num(hyper["median"].get("cpu_us_per_req"), 1) if hyper_ok else "n/a"
        if hyper_ok and hyper["median"].get("status"):
            hyper_cell += f" ({hyper['median']['status']} error statuses: not used)"
        if py and py.get("status") == "ok":
            py_cell = (
                f"{py['cpu_us_per_req']:.2f} ({py['scope_us_per_req']:.2f} + "
                f"{py['app_us_per_req']:.2f})"
            )
            if py.get("driver"):
                py_cell += " *with a loop*"
                drivers[name] = py["driver"]
        else:
            py_cell = "n/a" + (f": {_oneline(py.get('reason'))}" if py else "")
        if not entry:
            out.append(f"| {name} | {hyper_cell} | {py_cell} | n/a | | | |")
            continue
        fc = scen["servers"].get("ferrocorn")
        fc_cpu = fc["median"].get("cpu_us_per_req") if fc and fc.get("status") == "ok" else None
        others = ", ".join(
            f"{n} {fmt_ratio(v)}" for n, v in entry["ratios"].items() if n != "ferrocorn"
        )
        out.append(
            f"| {name} | {hyper_cell} | {py_cell} | {entry['floor_cpu_us_per_req']:.1f} | "
            f"{fmt_num(fc_cpu, 1)} | {fmt_ratio(entry['ratios'].get('ferrocorn'))} | "
            f"{others or '–'} |"
        )
    out.append("")
    if drivers:
        out += [
            "*with a loop*: the app cannot finish without a running event loop (a timer, or "
            "Starlette's FileResponse, which stats the file in an anyio worker thread), so its "
            "Python floor was measured under one, each app call a task of its own, as many in "
            "flight as the scenario has connections ("
            + "; ".join(f"{n}: {d}" for n, d in drivers.items())
            + "), CPU time of the whole process (the worker threads too). That figure includes "
            "the event loop's own cost per request (creating and running the task, the wake-ups "
            "of the timer or the worker thread), which the loopless rows leave out.",
            "",
        ]
    return out


def render_markdown(results: dict, png_name: str | None) -> str:
    meta = results["meta"]
    st = meta["settings"]
    lines: list[str] = []
    add = lines.append
    py = meta.get("python")
    add("# ferrocorn benchmark results" + (f" — {py['version']}" if py else ""))
    add("")
    if meta.get("quick"):
        add("> **Quick smoke run** (`--quick`): short durations and one round. Not representative.")
        add("")
    if meta.get("interrupted"):
        add("> **Interrupted run**: some scenarios are missing.")
        add("")
    others = [
        r["median"].get("core_other_pct")
        for sc in results["scenarios"].values()
        for r in sc["servers"].values()
        if r.get("status") == "ok"
    ]
    others = [o for o in others if o is not None]
    try:
        load1 = float(meta["machine"]["loadavg_start"].split()[0])
    except (KeyError, ValueError, IndexError):
        load1 = 0.0
    if others and max(others) >= 15:
        add(
            f"> **Noisy run**: other processes used up to {max(others):.0f}% of the server's core "
            f"(median {sorted(others)[len(others) // 2]:.0f}%) during the measurements shown. "
            "Throughput "
            "and latency are unreliable; CPU µs/req holds up better. See the `other load` column."
        )
        add("")
    elif load1 >= 1.0:
        add(
            f"> **Busy machine**: the load average was {load1:.2f} when the run started (on "
            f"{meta['machine']['nproc']} CPUs), so other processes competed with the measurements. "
            "Throughput and latency are unreliable; CPU µs/req holds up better."
        )
        add("")
    add(f"- Date: {meta['date']}")
    add(f"- Command: `{meta['command']}`")
    if py:
        add(
            f"- Python: **{py['version']}** ({py['home']}), venv `{py['venv']}`: the servers "
            "on CPython, the apps and the Python floor all ran on it"
        )
    m = meta["machine"]
    add(
        f"- Machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['memory']} RAM, Linux {m['kernel']}; "
        f"load average at start {m['loadavg_start']}, at end {meta.get('loadavg_end', '?')}"
    )
    add(
        f"- Load generator: {meta['wrk']} with {st['wrk_threads']} thread(s)"
        + (
            f", pinned to CPU {st['client_cpu']}; each server pinned to CPU {st['server_cpu']}"
            if st["pinned"]
            else ", no CPU pinning"
        )
    )
    pypy_note = (
        f" ({st['pypy_warmup_s']:g} s for PyPy servers)"
        if any(n.endswith("-pypy") for n in meta["versions"])
        else ""
    )
    add(
        f"- Each measurement: fresh server process, {st['warmup_s']:g} s warm-up{pypy_note}, "
        f"{st['duration_s']:g} s "
        f"measured, {st['rounds']} round(s); the round with the median result is shown "
        f"(errors column: all rounds). Total time {meta.get('elapsed_seconds', 0) / 60:.1f} min."
    )
    if any(n.endswith("-defaults") for n in meta["versions"]) and st.get("defaults_scenarios"):
        add(
            "- The -defaults servers ran in: "
            + ", ".join(f"`{n}`" for n in st["defaults_scenarios"])
        )
    add(
        f"- Repository checkout at run time: {meta['ferrocorn_git']} "
        "(the build column below says what ferrocorn was built from)"
    )
    add("")
    add("## Versions")
    add("")
    add("| server | Python | server version | uvloop | httptools | build |")
    add("|---|---|---|---|---|---|")
    for name, v in meta["versions"].items():
        base = name.split("-")[0]
        build = meta["build"].get(name) or meta["build"].get(base, "")
        add(
            f"| {name} | {v.get('python', '?')} | {v.get(base, '?')} | {v.get('uvloop', '–')} | "
            f"{v.get('httptools', '–')} | {build.splitlines()[0] if build else '–'} |"
        )
    fw = next(
        (v for v in meta["versions"].values() if v.get("fastapi") or v.get("starlette")), None
    )
    if fw:
        add("")
        add(
            "Frameworks (the framework scenarios): "
            + ", ".join(f"{d} {fw[d]}" for d in ("fastapi", "starlette", "pydantic") if d in fw)
        )
    add("")
    add(
        "Server command lines (`PORT` varies; launched as `taskset -c 0 prlimit --nofile=N:N ...`):"
    )
    add("")
    for name, cmd in meta["commands"].items():
        add(f"- {name}: `{cmd}`")
    extras = {n: a for n, a in meta.get("idle10k_extra_args", {}).items() if a}
    if extras:
        add(
            "- idle10k only, to keep 10k idle connections open: "
            + "; ".join(f"{n} `{a}`" for n, a in extras.items())
        )
    fw_scen = [n for n in results["scenarios"] if SCENARIOS.get(n, {}).get("app")]
    if fw_scen:
        with_floor = FLOOR in meta["commands"]
        add(
            "- framework scenarios: the app target is the scenario's instead ("
            + "; ".join(
                f"{n}: `{SCENARIOS[n]['app']}`"
                + (
                    f", floor `{floor_args_display(SCENARIOS[n])}`"
                    if with_floor and "floor_app" in SCENARIOS[n]
                    else ""
                )
                for n in fw_scen
            )
            + ")"
        )
    for name, notes in meta.get("server_notes", {}).items():
        add(f"- {name}: " + "; ".join(notes))
    add("")
    if results.get("skipped"):
        add("## Skipped servers")
        add("")
        for name, why in results["skipped"].items():
            add(f"- **{name}**: {why}")
        add("")
    ref = results_reference(results)
    if png_name:
        add(f"![throughput and CPU per request relative to {ref}]({png_name})")
        add("")
    add(
        f"Ratios compare each server with {ref} from the same run: throughput / {ref}'s "
        f"throughput (higher is better), CPU µs/req / {ref}'s (lower is better), and for "
        f"idle10k RSS / {ref}'s RSS (lower is better). The -defaults rows are compared with "
        "the same server's tuned row."
    )
    add("")
    lines.extend(summary_table(results))
    lines.extend(floor_section(results))

    vs_ref = _ref(lambda s: ref if s != ref else None, ref)
    vs_tuned = _ref(_tuned_of, "tuned")
    groups = (
        ("Scenarios", lambda n: SCENARIOS.get(n, {}).get("group") not in ("frameworks", "files")),
        (
            "Frameworks",
            lambda n: SCENARIOS.get(n, {}).get("group") == "frameworks",
        ),
        ("Files", lambda n: SCENARIOS.get(n, {}).get("group") == "files"),
    )
    for title, member in groups:
        names = [n for n in results["scenarios"] if member(n)]
        if not names:
            continue
        add(f"## {title}")
        add("")
        if title == "Frameworks":
            add(
                "The same servers and settings, serving a framework app "
                "(`benchmarks/fw_app.py`) instead of the bare ASGI app."
            )
            add("")
        if title == "Files":
            add(
                "Files from `benchmarks/.work/files/`: through Starlette's FileResponse "
                "(`benchmarks/file_app.py`), and from the server's own static route where it "
                "has one (ferrocorn, granian)."
            )
            add("")
        for name in names:
            scen = results["scenarios"][name]
            add(f"### {name}: {scen['title']}")
            add("")
            add(scen["description"])
            add("")
            rows = [n for n in scen["servers"] if not n.endswith("-defaults")]
            if not rows:
                add("_No server produced a result._")
                add("")
                continue
            lines.extend(scenario_table(name, scen, rows, vs_ref))
            add("")
    with_defaults = [
        n
        for n, scen in results["scenarios"].items()
        if any(s.endswith("-defaults") for s in scen["servers"])
    ]
    if with_defaults:
        add("## Defaults: each server with its out-of-the-box logging")
        add("")
        add(
            "The -defaults servers run with their default access logging, one worker: ferrocorn, "
            "uvicorn and h2corn with the access log they write by default (uvicorn also at its "
            "default log level), granian with `--access-log` (it logs no requests by default). "
            "Everything else is as in the rows above. The log goes to a file "
            "(`benchmarks/.work/logs/`). `vs tuned` compares each with the same server's row "
            "above."
        )
        add("")
        for name in with_defaults:
            scen = results["scenarios"][name]
            add(f"### {name} (defaults)")
            add("")
            rows = [n for n in scen["servers"] if n.endswith("-defaults")]
            lines.extend(scenario_table(name, scen, rows, vs_tuned))
            add("")
    add(
        "Columns: CPU µs/req = server CPU time (user+system, all threads and processes) / "
        "requests; p50/p99 = latency percentiles (for `pipelined`, of a whole 16-request "
        "batch); server CPU = that CPU time / wall time (100% = one full core); client CPU = "
        "the same for the load generator (wrk, or the Python download client for stream-*); "
        "other load = share of the server's core used by anything else (other processes, "
        "interrupts) during the run. ⚠ = client CPU ≥ 90%: the client may be the bottleneck "
        "for that row. `floor` is plain hyper with no Python (see the Floor section)."
    )
    add("")
    return "\n".join(lines)


def _oneline(s) -> str:
    return (str(s or "").splitlines() or [""])[0].replace("|", "/")[:160]


def write_chart(results: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warn("matplotlib not available: no chart")
        return False
    ref = results_reference(results)
    scen_names = [
        n
        for n, s in results["scenarios"].items()
        if s["servers"].get(ref, {}).get("status") == "ok"
    ]
    if not scen_names:
        warn(f"no scenario has a {ref} result: no ratio chart")
        return False
    servers: list[str] = []
    for n in scen_names:
        for sname in results["scenarios"][n]["servers"]:
            if sname not in servers and sname != FLOOR:  # the floor is a reference, not a peer
                servers.append(sname)
    servers.sort(key=lambda s: (s != "ferrocorn", s != ref, s))
    fig, (ax, ax_cpu) = plt.subplots(2, 1, figsize=(max(9, 1.4 * len(scen_names) + 3), 9))
    width = 0.8 / max(1, len(servers))
    colors = {
        "ferrocorn": "#d9480f",
        "granian": "#1c7ed6",
        "uvicorn": "#2f9e44",
        "h2corn": "#7048e8",
        "ferrocorn-pypy": "#f08c00",
        "socketify-pypy": "#e64980",
        "granian-pypy": "#4dabf7",
        "uvicorn-pypy": "#74b816",
        "ferrocorn-defaults": "#ff8787",
        "granian-defaults": "#74c0fc",
        "uvicorn-defaults": "#8ce99a",
        "h2corn-defaults": "#b197fc",
    }
    tops = {"tp": 1.0, "cpu": 1.0}
    for i, sname in enumerate(servers):
        xs, ys, cxs, cys = [], [], [], []
        for j, n in enumerate(scen_names):
            scen = results["scenarios"][n]
            e = scen["servers"].get(sname)
            x = j + (i - (len(servers) - 1) / 2) * width
            ratio = pair_ratio(scen, sname, ref) if e else None
            if ratio:
                if _is_idle(n):
                    ratio = 1.0 / ratio  # memory: plot ref/server so higher is better too
                xs.append(x)
                ys.append(ratio)
            c = cpu_ratio(scen, sname, ref) if e and not _is_idle(n) else None
            if c:
                cxs.append(x)
                cys.append(c)
        for axis, key, px, py_ in ((ax, "tp", xs, ys), (ax_cpu, "cpu", cxs, cys)):
            if not px:
                continue
            tops[key] = max(tops[key], max(py_))
            bars = axis.bar(px, py_, width, label=sname, color=colors.get(sname))
            for b, y in zip(bars, py_):
                axis.text(
                    b.get_x() + b.get_width() / 2,
                    y,
                    f"{y:.2f}",
                    ha="center",
                    va="bottom",
                    fontsize=6,
                )
    labels = [n + (f"\n(memory,\n{ref}/x)" if _is_idle(n) else "") for n in scen_names]
    for axis, key in ((ax, "tp"), (ax_cpu, "cpu")):
        axis.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        axis.set_xticks(range(len(scen_names)))
        axis.set_xticklabels(labels, fontsize=7)
        axis.set_ylim(0, tops[key] * 1.15)
    ax.set_ylabel(f"throughput relative to {ref}\n(higher is better)")
    ax_cpu.set_ylabel(f"CPU µs/request relative to {ref}\n(lower is better)")
    py = results["meta"].get("python", {}).get("version")
    title = f"ferrocorn benchmarks vs {ref} — {results['meta']['date'][:10]}"
    if py:
        title += f", {py}"
    if results["meta"].get("quick"):
        title += " (quick smoke run)"
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark ferrocorn against granian, uvicorn and h2corn "
        "(see benchmarks/README.md)."
    )
    p.add_argument(
        "--servers",
        help=f"comma-separated, from: {', '.join(ALL_SERVERS)} "
        f"(default {','.join(DEFAULT_SERVERS)}; with --pypy {','.join(PYPY_SERVERS)})",
    )
    p.add_argument(
        "--scenarios",
        help=f"comma-separated, from: {', '.join(SCENARIOS)} (default: all; with --pypy "
        f"{','.join(PYPY_SCENARIOS)})",
    )
    p.add_argument(
        "--pypy",
        action="store_true",
        help="PyPy suite: ferrocorn, socketify, granian and uvicorn under pypy3 (ferrocorn on "
        f"CPython as the reference), scenarios {','.join(PYPY_SCENARIOS)} unless --scenarios; "
        "writes RESULTS-pypy.md / results-pypy.{json,png}",
    )
    p.add_argument(
        "--python",
        metavar="PATH",
        help="run the CPython suite on this interpreter (e.g. a python3.13): its own venv "
        "benchmarks/.venv-cpXY with the same pins, ferrocorn built for it; results get a "
        "-cpXY suffix (RESULTS-cp313.md ...). Default: the interpreter running this script",
    )
    p.add_argument(
        "--defaults-scenarios",
        metavar="LIST",
        help="scenarios the -defaults servers run in, comma-separated, or 'all' "
        f"(default {','.join(DEFAULTS_SCENARIOS)})",
    )
    p.add_argument(
        "--python-floor-seconds",
        type=float,
        help="CPU seconds per repetition of python_floor.py (default 0.5; 0.2 with --quick)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1 s warm-up, 3 s measurement, 1 round; results go to "
        "benchmarks/.work/quick/ unless --output-dir is given",
    )
    p.add_argument("--duration", type=float, help="measured seconds per run (default 10)")
    p.add_argument("--warmup", type=float, help="warm-up seconds per run (default 3)")
    p.add_argument(
        "--pypy-warmup",
        type=float,
        help="warm-up seconds for PyPy servers, so the JIT has compiled the hot paths "
        "(default 10; 3 with --quick)",
    )
    p.add_argument(
        "--rounds", type=int, help="fresh-server rounds per measurement, median kept (default 3)"
    )
    p.add_argument(
        "--skip-build", action="store_true", help="reuse the installed ferrocorn, no maturin build"
    )
    p.add_argument(
        "--cargo-profile",
        default="release",
        help="cargo profile for the maturin build (default release)",
    )
    p.add_argument(
        "--idle-conns", type=int, default=10000, help="connections for idle10k (default 10000)"
    )
    p.add_argument(
        "--idle-settle",
        type=float,
        default=2.0,
        help="seconds to wait after opening the idle connections before reading RSS",
    )
    p.add_argument(
        "--stream-client",
        choices=["python", "wrk"],
        default="python",
        help="load generator for the stream scenarios (default python: see README)",
    )
    p.add_argument(
        "--wrk-threads", type=int, default=1, help="wrk threads (default 1: wrk has one core)"
    )
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=30.0,
        help="seconds to wait for a server to answer (x3 for PyPy)",
    )
    p.add_argument(
        "--extra-args",
        action="append",
        default=[],
        metavar="SERVER=ARGS",
        help="extra CLI arguments for one server, e.g. 'ferrocorn=--timeout-keep-alive 300' "
        "(repeatable; appended after the defaults, before the app target)",
    )
    p.add_argument(
        "--output-dir",
        help="where RESULTS.md, results.json and results.png go "
        "(default benchmarks/, or benchmarks/.work/quick with --quick)",
    )
    p.add_argument("--no-pin", action="store_true", help="do not pin servers/wrk to CPUs")
    p.add_argument(
        "--report-from",
        metavar="JSON",
        help="only re-render RESULTS.md and the chart from an existing results JSON "
        "(into the directory of --output-dir, default the JSON's directory)",
    )
    p.add_argument("--list", action="store_true", help="list scenarios and servers, then exit")
    args = p.parse_args(argv)
    if args.quick:
        args.duration = 3.0 if args.duration is None else args.duration
        args.warmup = 1.0 if args.warmup is None else args.warmup
        args.rounds = 1 if args.rounds is None else args.rounds
        args.pypy_warmup = 3.0 if args.pypy_warmup is None else args.pypy_warmup
        if args.python_floor_seconds is None:
            args.python_floor_seconds = 0.2
    args.pypy_warmup = 10.0 if args.pypy_warmup is None else args.pypy_warmup
    if args.python_floor_seconds is None:
        args.python_floor_seconds = 0.5
    args.duration = 10.0 if args.duration is None else args.duration
    args.warmup = 3.0 if args.warmup is None else args.warmup
    args.rounds = 3 if args.rounds is None else args.rounds
    if args.rounds < 1 or args.duration < 1:
        p.error("--rounds and --duration must be >= 1")
    return args


def main() -> None:
    args = parse_args(sys.argv[1:])
    if args.list:
        for name, spec in SCENARIOS.items():
            print(f"{name:20} {spec['title']}")
        print("servers:", ", ".join(ALL_SERVERS))
        return
    if os.environ.get(STAGE_ENV) == "1":
        stage2(args)
    else:
        try:
            stage1(args, sys.argv)
        except subprocess.CalledProcessError as exc:
            cmd = shlex.join(str(c) for c in exc.cmd)
            raise SystemExit(f"setup failed: `{cmd}` exited with {exc.returncode}") from None


if __name__ == "__main__":
    main()
