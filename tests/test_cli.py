"""Command line: flags, environment variables, errors and exit codes, listeners."""

import os
import re
import socket
import subprocess
import tempfile

import httpx
import pytest

from tests.support.helpers import (
    REPO_ROOT,
    SERVER_PYTHON,
    RawConnection,
    find_console_script,
    request_bytes,
    run_ferrocorn,
)


def all_flags():
    """Every flag of the command, from the option table it is made from."""
    from ferrocorn.options import OPTIONS

    flags = ["--version", "--help"]
    for option in OPTIONS:
        flags += option.long_flags
        if option.negative_flag:
            flags.append(option.negative_flag)
    return flags


def text(proc):
    return proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")


def test_version():
    proc = run_ferrocorn("--version")
    out = text(proc)
    assert proc.returncode == 0, out
    assert "ferrocorn" in out.lower()
    assert re.search(r"\d+\.\d+", out), out


def test_version_is_cargo_tomls_everywhere():
    """The version lives in Cargo.toml only: `--version`, ``ferrocorn.__version__`` and the
    installed distribution's metadata all say it."""
    with open(os.path.join(REPO_ROOT, "Cargo.toml")) as f:
        cargo = re.search(r'^version = "([^"]+)"', f.read(), re.MULTILINE)
    assert cargo, "no version in Cargo.toml"
    expected = cargo.group(1)
    proc = run_ferrocorn("--version")
    assert proc.returncode == 0, text(proc)
    assert text(proc).startswith("ferrocorn %s " % expected), text(proc)
    probe = subprocess.run(
        [
            SERVER_PYTHON,
            "-c",
            "import ferrocorn; from importlib import metadata\n"
            "try: wheel = metadata.version('ferrocorn')\n"
            "except metadata.PackageNotFoundError: wheel = 'none'\n"
            "print(ferrocorn.__version__, wheel)",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=30,
    )
    assert probe.returncode == 0, probe.stderr.decode("utf-8", "replace")
    version, wheel = probe.stdout.decode().split()
    assert version == expected
    if wheel == "none":
        pytest.skip("a source tree on PYTHONPATH, no installed distribution to compare")
    assert wheel == expected


def test_help_lists_all_flags():
    proc = run_ferrocorn("--help")
    out = text(proc)
    assert proc.returncode == 0, out
    missing = [flag for flag in all_flags() if not re.search(re.escape(flag) + r"(?![\w-])", out)]
    assert not missing, "flags missing from --help: %r" % missing


def test_help_says_what_the_signals_do():
    proc = run_ferrocorn("--help")
    out = text(proc)
    assert proc.returncode == 0, out
    signals = out[out.index("Signals:") :]
    for line_start in ("SIGTERM, SIGINT", "SIGHUP", "SIGTTIN/SIGTTOU"):
        assert "\n    " + line_start in signals, signals


def assert_one_line_error(proc, *needles):
    out = text(proc)
    assert proc.returncode == 1, out
    assert "Traceback" not in out, out
    err_lines = [
        line for line in proc.stderr.decode("utf-8", "replace").splitlines() if line.strip()
    ]
    matching = [line for line in err_lines if all(n in line for n in needles)]
    assert matching, "no stderr line naming %r:\n%s" % (needles, out)
    assert len(err_lines) <= 3, "expected a short error, got:\n" + out


def test_bad_import_module():
    proc = run_ferrocorn("nope_no_such_module:app", "--port", "0")
    assert_one_line_error(proc, "nope_no_such_module")


def test_missing_attribute():
    proc = run_ferrocorn("tests.apps.basic:missing", "--port", "0")
    assert_one_line_error(proc, "missing")


def test_import_string_without_colon():
    proc = run_ferrocorn("tests.apps.basic", "--port", "0")
    assert_one_line_error(proc, "tests.apps.basic")


def test_address_in_use():
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        proc = run_ferrocorn("tests.apps.basic:app", "--host", "127.0.0.1", "--port", str(port))
        out = text(proc)
        assert proc.returncode == 1, out
        assert "Traceback" not in out, out
        assert str(port) in out, out
        assert re.search(r"in use|EADDRINUSE|errno 98", out, re.I), out
    finally:
        blocker.close()


def test_factory(server_factory):
    server = server_factory("tests.apps.basic:create_app", "--factory")
    resp = httpx.get(server.url + "/", timeout=10)
    assert resp.status_code == 200
    assert resp.text == "from factory"


def test_app_dir(server_factory):
    server = server_factory("appdir_only_app:app", "--app-dir", "tests/apps/appdir")
    resp = httpx.get(server.url + "/", timeout=10)
    assert resp.text == "from app-dir"


def test_app_dir_required():
    # Without --app-dir the module is not importable: proves the flag is what made it work.
    proc = run_ferrocorn("appdir_only_app:app", "--port", "0")
    assert proc.returncode == 1, text(proc)


def test_console_script(server_factory):
    script = find_console_script()
    assert script, "no `ferrocorn` console script next to %s or on PATH" % SERVER_PYTHON
    server = server_factory(
        None,
        argv=[script, "tests.apps.basic:app", "--host", "127.0.0.1", "--port", "0"],
    )
    assert httpx.get(server.url + "/hello", timeout=10).text == "hello world"


def test_env_root_path(server_factory):
    server = server_factory("tests.apps.basic:app", env={"FERROCORN_ROOT_PATH": "/x"})
    scope = httpx.get(server.url + "/scope", timeout=10).json()
    assert scope["root_path"] == "/x"
    assert scope["path"] == "/x/scope"


def test_env_lifespan_off(server_factory, tmp_path):
    marker = str(tmp_path / "lifespan")
    server = server_factory(
        "tests.apps.basic:app",
        env={"FERROCORN_LIFESPAN": "off", "TEST_APP_LIFESPAN_MARKER": marker},
    )
    assert httpx.get(server.url + "/hello", timeout=10).status_code == 200
    assert server.stop() == 0
    assert not os.path.exists(marker)


def test_misc_flags_accepted(server_factory):
    server = server_factory(
        "tests.apps.basic:app",
        "--backlog",
        "16",
        "--loop",
        "asyncio",
        "--log-level",
        "info",
        "--timeout-graceful-shutdown",
        "5",
        "--lifespan",
        "auto",
    )
    assert httpx.get(server.url + "/hello", timeout=10).text == "hello world"
    assert server.stop() == 0


def test_uds(server_factory):
    path = os.path.join(tempfile.mkdtemp(prefix="fc-"), "s.sock")
    server = server_factory("tests.apps.basic:app", "--uds", path, host_port=False)
    assert os.path.exists(path)
    transport = httpx.HTTPTransport(uds=path)
    with httpx.Client(transport=transport, base_url="http://localhost", timeout=10) as c:
        resp = c.get("/scope")
    assert resp.status_code == 200
    scope = resp.json()
    assert scope["path"] == "/scope"
    # A Unix socket has a path and no port, and the peer no address (as in uvicorn).
    assert scope["server"] == [path, None]
    assert scope["client"] is None
    # raw request too
    with RawConnection(uds=path) as conn:
        conn.send(request_bytes("GET", "/index?i=uds"))
        assert conn.read_response().body == b"uds"
    assert server.stop() == 0


def test_fd(server_factory):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        fd = sock.fileno()
        server = server_factory(
            "tests.apps.basic:app", "--fd", str(fd), host_port=False, pass_fds=[fd]
        )
    finally:
        sock.close()  # the server holds its own copy
    resp = httpx.get("http://127.0.0.1:%d/index?i=fd" % port, timeout=10)
    assert resp.status_code == 200
    assert resp.text == "fd"
    assert server.stop() == 0


def test_python_dash_m_and_server_exits_zero_on_sigterm(server_factory):
    server = server_factory("tests.apps.basic:app")
    assert server.argv[1:3] == ["-m", "ferrocorn"]
    assert httpx.get(server.url + "/hello", timeout=10).status_code == 200
    assert server.stop() == 0


@pytest.mark.parametrize("flag", ["--loop", "--lifespan"])
def test_invalid_choice_rejected(flag):
    proc = run_ferrocorn("tests.apps.basic:app", flag, "bogus-choice", "--port", "0")
    assert proc.returncode != 0
    assert "bogus-choice" in text(proc)


def test_logs_started_server_process_and_the_loop_at_debug(server_factory):
    """uvicorn's first line, with this process's id; which event loop runs, at debug level."""
    server = server_factory("tests.apps.basic:app", "--log-level", "debug")
    started = re.escape("INFO:     Started server process [%d]" % server.pid)
    assert server.wait_for_output(started, timeout=5), server.output()
    assert server.wait_for_output(r"DEBUG: +Event loop: \w", timeout=5), server.output()
