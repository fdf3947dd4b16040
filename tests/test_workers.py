"""Worker processes: the supervisor (``--workers N``), replacing dead workers, SIGHUP, SIGTTIN and
SIGTTOU, ``--limit-max-requests``, crash loops at start-up, shutdown, systemd socket activation.

The app (tests/apps/workers.py) answers ``GET /pid`` with the pid of the worker that served it;
workers log ``Started worker [pid]`` once they serve.
"""

import os
import re
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.helpers import (
    SERVER_PYTHON,
    RawConnection,
    request_bytes,
    run_ferrocorn,
    wait_until,
)

APP = "tests.apps.workers:app"
STARTED_RE = re.compile(r"Started worker \[(\d+)\]")


def started_pids(server):
    """Pids of every worker that logged ``Started worker [pid]`` so far, in order."""
    return [int(pid) for pid in STARTED_RE.findall(server.output())]


def wait_started(server, count, timeout=30):
    assert wait_until(lambda: len(started_pids(server)) >= count, timeout=timeout), (
        f"expected {count} 'Started worker' lines:\n{server.output()}"
    )
    return started_pids(server)


def child_pids(ppid):
    """Live (not zombie) child processes of ``ppid``, from /proc."""
    children = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
        if fields[0] != "Z" and int(fields[1]) == ppid:
            children.add(int(entry))
    return children


def get(port=None, target="/pid", uds=None):
    """One request on a new connection; the response body as text."""
    with RawConnection(port, uds=uds, timeout=20) as conn:
        conn.send(request_bytes("GET", target, [("Connection", "close")]))
        resp = conn.read_response()
    assert resp is not None and resp.status == 200, resp
    return resp.body.decode()


def serving_pids(port, want, uds=None, timeout=20):
    """Distinct worker pids answering ``/pid`` (overlapping requests, in parallel batches),
    collected until ``want`` of them were seen or ``timeout`` passed."""
    seen = set()
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(8) as pool:
        while len(seen) < want and time.monotonic() < deadline:
            batch = pool.map(lambda _: get(port, "/pid?sleep=0.02", uds=uds), range(16))
            seen.update(int(pid) for pid in batch)
    return seen


def _state(pid):
    """The /proc state letter of ``pid``; None once it is gone (reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


# ---------------------------------------------------------------- serving and shutdown


def test_workers_are_separate_processes_and_each_runs_lifespan(server_factory, tmp_path):
    marker = str(tmp_path / "lifespan")
    server = server_factory(APP, env={"WEB_CONCURRENCY": "2", "TEST_WORKERS_MARKER": marker})
    workers = set(wait_started(server, 2))
    assert len(workers) == 2 and server.pid not in workers
    assert child_pids(server.pid) == workers
    assert serving_pids(server.port, 2) == workers
    assert server.output().count("Ferrocorn running on") == 1, server.output()

    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()
    assert all(_state(pid) is None for pid in workers), "workers outlived the supervisor"
    with open(marker) as f:
        lines = sorted(f.read().split())
    assert lines.count("startup") == 2 and lines.count("shutdown") == 2, lines
    for pid in workers:
        assert lines.count(str(pid)) == 2, (pid, lines)  # one startup + one shutdown each


def test_killed_worker_is_replaced(server_factory):
    server = server_factory(APP, "--workers", "2")
    first = wait_started(server, 2)
    victim = first[0]
    os.kill(victim, signal.SIGKILL)
    assert server.wait_for_output(
        rf"Worker \[{victim}\] was killed by signal SIGKILL", timeout=10
    ), server.output()
    pids = wait_started(server, 3)
    replacements = set(pids) - {victim}
    assert len(replacements) == 2
    assert wait_until(lambda: child_pids(server.pid) == replacements, timeout=10)
    assert serving_pids(server.port, 2) == replacements
    assert server.proc.poll() is None


def test_sighup_replaces_every_worker_without_failed_requests(server_factory):
    server = server_factory(APP, "--workers", "2")
    old = set(wait_started(server, 2))
    counts = {"ok": 0}
    errors = []
    stop = threading.Event()

    def load():
        while not stop.is_set():
            try:
                get(server.port)
                counts["ok"] += 1
            except Exception as exc:  # noqa: BLE001 - every failure is reported
                errors.append(repr(exc))

    threads = [threading.Thread(target=load, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        assert wait_until(lambda: counts["ok"] >= 20, timeout=20)
        server.proc.send_signal(signal.SIGHUP)
        assert server.wait_for_output(r"All workers replaced", timeout=40), server.output()
        for pid in old:
            assert server.wait_for_output(rf"Worker \[{pid}\] stopped", timeout=40)
        after = counts["ok"]
        assert wait_until(lambda: counts["ok"] >= after + 20, timeout=20)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[:5]
    new = set(started_pids(server)) - old
    assert len(new) == 2, server.output()
    assert child_pids(server.pid) == new
    assert serving_pids(server.port, 2) == new


def test_sigttin_and_sigttou_change_the_worker_count(server_factory):
    server = server_factory(APP, env={"FERROCORN_WORKERS": "2"})
    wait_started(server, 2)
    server.proc.send_signal(signal.SIGTTIN)
    pids = wait_started(server, 3)
    assert wait_until(lambda: child_pids(server.pid) == set(pids), timeout=10)
    assert serving_pids(server.port, 3) == set(pids)

    server.proc.send_signal(signal.SIGTTOU)
    assert wait_until(lambda: len(child_pids(server.pid)) == 2, timeout=20), server.output()
    remaining = child_pids(server.pid)
    assert remaining < set(pids)
    assert serving_pids(server.port, 2) == remaining
    assert server.stop(signal.SIGTERM, timeout=30) == 0


def test_limit_max_requests_recycles_workers(server_factory):
    server = server_factory(
        APP, "--workers", "2", "--limit-max-requests", "50", "--limit-max-requests-jitter", "10"
    )
    wait_started(server, 2)
    pids = []
    # Sequential requests on new connections: at least 300, and on until a replacement
    # serves (a worker at its limit serves until then; PyPy starts slowly).
    deadline = time.monotonic() + 30
    while len(pids) < 300 or (len(set(pids)) <= 2 and time.monotonic() < deadline):
        pids.append(int(get(server.port)))
    assert len(set(pids)) > 2, "workers were not recycled"
    assert "Maximum request limit" in server.output()
    assert server.proc.poll() is None


def test_second_sigint_kills_workers(server_factory):
    server = server_factory(APP, "--workers", "2", "--timeout-graceful-shutdown", "none")
    workers = wait_started(server, 2)
    results = []
    thread = threading.Thread(
        target=lambda: results.append(_try(lambda: get(server.port, "/pid?sleep=60"))),
        daemon=True,
    )
    thread.start()
    time.sleep(0.5)  # let the request reach a worker
    server.proc.send_signal(signal.SIGINT)
    assert server.wait_for_output(r"Waiting for connections to close", timeout=10), server.output()
    assert server.proc.poll() is None  # graceful: waits for the sleeping request
    server.proc.send_signal(signal.SIGINT)
    assert server.wait(timeout=20) == 0, server.output()
    assert "Forced quit" in server.output()
    assert all(_state(pid) is None for pid in workers)
    thread.join(20)


def _try(func):
    try:
        return func()
    except Exception as exc:  # noqa: BLE001
        return exc


def test_python_api_run_with_workers_on_unix_socket(server_factory, tmp_path):
    path = str(tmp_path / "ferrocorn.sock")
    code = f"import ferrocorn; ferrocorn.run({APP!r}, uds={path!r}, workers=2)"
    server = server_factory(None, argv=[SERVER_PYTHON, "-c", code])
    workers = set(wait_started(server, 2))
    assert serving_pids(None, 2, uds=path) == workers
    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()
    assert not os.path.exists(path)


# ---------------------------------------------------------------- start-up failures


def test_crash_loop_on_import_error_exits_1():
    proc = run_ferrocorn(
        "tests.apps.no_such_module_4f1:app", "--workers", "2", "--port", "0", timeout=60
    )
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 1, out
    assert "no_such_module_4f1" in out
    assert re.search(r"Workers failed to start \d+ times in a row", out), out
    assert "Traceback" not in out


def test_crash_loop_on_lifespan_failure_exits_3():
    proc = run_ferrocorn(
        APP, "--workers", "2", "--port", "0", env={"TEST_WORKERS_FAIL_STARTUP": "1"}, timeout=60
    )
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 3, out
    assert "startup-refused-7c1" in out
    assert "application startup failed" in out


@pytest.mark.parametrize("option", [{"workers": 2}, {"reload": True}])
def test_app_object_needs_an_import_string(option):
    from ferrocorn import Config
    from ferrocorn.config import ConfigError

    async def app(scope, receive, send):
        pass

    with pytest.raises(ConfigError, match="import string"):
        Config(app, **option)


# ---------------------------------------------------------------- systemd socket activation

# Runs in the child: put the socket on fd 3, name this process in LISTEN_PID, exec the server.
ACTIVATE = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "if fd != 3:\n"
    "    os.dup2(fd, 3)\n"
    "    os.close(fd)\n"
    "os.environ['LISTEN_FDS'] = '1'\n"
    "os.environ['LISTEN_PID'] = str(os.getpid())\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'ferrocorn'] + sys.argv[2:])\n"
)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_systemd_socket_activation(server_factory, workers):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    argv = [SERVER_PYTHON, "-c", ACTIVATE, str(listener.fileno()), APP]
    argv += ["--host", "127.0.0.1", "--port", "0", "--workers", workers]
    try:
        server = server_factory(None, argv=argv, pass_fds=[listener.fileno()])
    finally:
        listener.close()
    assert server.port == port, server.output()
    assert "socket activation" in server.output()
    if workers == "2":
        wait_started(server, 2)
    # The variables were consumed: the app (a worker, or the server itself) does not see them.
    assert get(port, "/env?name=LISTEN_FDS") == "-"
    assert get(port, "/env?name=LISTEN_PID") == "-"
    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()


# ---------------------------------------------------------------- options


def test_cli_options_and_environment_variables(monkeypatch, tmp_path):
    from click.testing import CliRunner
    from ferrocorn import cli, server

    configs = []
    monkeypatch.setattr(server, "run_config", lambda config: configs.append(config) or 0)
    env = {
        "WEB_CONCURRENCY": "3",
        "FERROCORN_LIMIT_MAX_REQUESTS_JITTER": "7",
        "FERROCORN_RELOAD_DIR": f"{tmp_path}{os.pathsep}{tmp_path}",  # like PATH
        "FERROCORN_RELOAD_DELAY": "1.5",
    }
    args = ["m:app", "--reload-include", "*.cfg", "--reload-exclude", "x*", "--reload-exclude", "y"]
    result = CliRunner().invoke(cli.main, args, env=env)
    assert result.exit_code == 0, result.output
    config = configs.pop()
    assert config.workers == 3
    assert config.limit_max_requests_jitter == 7
    assert config.reload is False
    assert config.reload_dirs == [str(tmp_path), str(tmp_path)]
    assert config.reload_delay == 1.5
    assert config.reload_includes == ["*.cfg"]
    assert config.reload_excludes == ["x*", "y"]

    env = {"WEB_CONCURRENCY": "3", "FERROCORN_WORKERS": "4"}
    assert CliRunner().invoke(cli.main, ["m:app"], env=env).exit_code == 0
    assert configs.pop().workers == 4  # FERROCORN_WORKERS wins over WEB_CONCURRENCY
    assert CliRunner().invoke(cli.main, ["m:app", "--workers", "2"], env=env).exit_code == 0
    assert configs.pop().workers == 2  # and the flag over both
    result = CliRunner().invoke(cli.main, ["m:app", "--workers", "0"])
    assert result.exit_code == 1 and "workers" in result.output and not configs


def test_config_validation(tmp_path):
    from ferrocorn import Config
    from ferrocorn.config import ConfigError

    assert Config("m:app").workers == 1
    with pytest.raises(ConfigError, match="workers"):
        Config("m:app", workers=0)
    with pytest.raises(ConfigError, match="not a directory"):
        Config("m:app", reload=True, reload_dirs=[str(tmp_path / "missing")])
    with pytest.raises(ConfigError, match="limit_max_requests_jitter"):
        Config("m:app", limit_max_requests_jitter=-1)
    config = Config("m:app", reload_dirs=str(tmp_path), reload_includes="*.html")
    assert (config.reload_dirs, config.reload_includes) == ([str(tmp_path)], ["*.html"])
