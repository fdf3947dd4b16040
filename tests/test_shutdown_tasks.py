"""Graceful shutdown waits for the app's work, not only for the responses: a BackgroundTask that
runs after its response, a WebSocket handler that works on after the disconnect. Lifespan
shutdown runs after them; past ``--timeout-graceful-shutdown`` they are cancelled.

The app (tests/apps/shutdown_tasks.py) appends ``<event> <pid>`` lines to a marker file, so
each test reads what ran, where, and in which order.
"""

import re
import signal
import subprocess

import httpx
import pytest

from tests.support.helpers import (
    SERVER_PYTHON,
    ServerProcess,
    server_env,
    start_server,
    wait_until,
    ws_sync_connect,
)

websockets = pytest.importorskip("websockets")

from websockets.exceptions import ConnectionClosed  # noqa: E402

APP = "tests.apps.shutdown_tasks:app"
WS_APP = "tests.apps.shutdown_tasks:ws_app"
STARTED_RE = re.compile(r"Started worker \[(\d+)\]")
WAITING_RE = r"Waiting for (\d+) background task\(s\) to complete"


def events(marker):
    """The marker file's lines as (event, pid) pairs, in the order they were written."""
    try:
        with open(marker) as f:
            return [(e, int(pid)) for e, pid in (line.split() for line in f)]
    except FileNotFoundError:
        return []


def names(marker):
    return [event for event, _ in events(marker)]


def pid_of(marker, event):
    """The pid that wrote ``event`` first (waiting for it a while), or None."""
    found = wait_until(lambda: [p for e, p in events(marker) if e == event], timeout=20)
    return found[0] if found else None


def of_pid(marker, pid):
    return [event for event, p in events(marker) if p == pid]


def start(tmp_path, *flags, app=APP):
    marker = str(tmp_path / "events")
    server = start_server(app, "--lifespan", "on", *flags, env={"TEST_TASKS_MARKER": marker})
    return server, marker


def get(server, target):
    resp = httpx.get(server.url + target, timeout=10)
    assert resp.status_code == 200, (resp, server.output())
    return resp.text


def stopped(server, sig=signal.SIGTERM, timeout=40):
    """Stop ``server`` with ``sig``; its exit code, or fail if it had to be killed."""
    rc = server.stop(sig, timeout=timeout)
    assert rc is not None, "the server did not exit:\n" + server.output()
    return rc


def waiting_or(server, failed):
    """The server logged that it waits for tasks, or ``failed()`` says it will not."""
    return re.search(WAITING_RE, server.output()) or failed() is not None


def test_background_task_finishes_before_lifespan_shutdown(tmp_path):
    server, marker = start(tmp_path)
    try:
        assert get(server, "/bg?sleep=1") == "accepted"
        rc = stopped(server)
    finally:
        server.close()
    assert rc == 0, server.output()
    assert names(marker) == ["task-started", "task-done", "lifespan-shutdown"], server.output()


def test_waiting_line_names_the_tasks_once(tmp_path):
    server, marker = start(tmp_path)
    gate = tmp_path / "gate"
    try:
        for _ in range(2):
            assert get(server, "/bg?gate=%s" % gate) == "accepted"
        assert wait_until(lambda: names(marker).count("task-started") == 2, timeout=20)
        server.proc.send_signal(signal.SIGTERM)
        waiting = server.wait_for_output(WAITING_RE, timeout=20)
        assert waiting, server.output()
        assert waiting.group(1) == "2", server.output()
        assert server.proc.poll() is None, "exited before the tasks ended:\n" + server.output()
        assert "lifespan-shutdown" not in names(marker)
        gate.touch()
        rc = stopped(server)
    finally:
        gate.touch()
        server.close()
    assert rc == 0, server.output()
    assert names(marker) == ["task-started"] * 2 + ["task-done"] * 2 + ["lifespan-shutdown"]
    assert len(re.findall(WAITING_RE, server.output())) == 1, server.output()


def test_websocket_work_after_client_close_finishes(tmp_path):
    server, marker = start(tmp_path, app=WS_APP)
    try:
        with ws_sync_connect("ws://127.0.0.1:%d/ws?sleep=1" % server.port, open_timeout=10) as ws:
            assert pid_of(marker, "ws-open"), server.output()
            ws.close()
        assert pid_of(marker, "ws-disconnected"), server.output()
        rc = stopped(server)
    finally:
        server.close()
    assert rc == 0, server.output()
    expected = ["ws-open", "ws-disconnected", "ws-done", "lifespan-shutdown"]
    assert names(marker) == expected, server.output()


def test_websocket_closed_by_shutdown_finishes_its_work(tmp_path):
    server, marker = start(tmp_path, app=WS_APP)
    try:
        with ws_sync_connect("ws://127.0.0.1:%d/ws?sleep=1" % server.port, open_timeout=10) as ws:
            assert pid_of(marker, "ws-open"), server.output()
            server.proc.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=20)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012, closed.value
        rc = server.wait(timeout=40)
    finally:
        server.close()
    assert rc == 0, server.output()
    expected = ["ws-open", "ws-disconnected", "ws-done", "lifespan-shutdown"]
    assert names(marker) == expected, server.output()


def test_graceful_timeout_cancels_the_tasks(tmp_path):
    server, marker = start(tmp_path, "--timeout-graceful-shutdown", "1")
    try:
        assert get(server, "/bg?sleep=30") == "accepted"
        assert pid_of(marker, "task-started"), server.output()
        rc = stopped(server)  # a liveness bound, well under the task's 30 s
    finally:
        server.close()
    assert rc == 0, server.output()
    assert names(marker) == ["task-started", "task-cancelled", "lifespan-shutdown"]
    cancelled = re.findall(r"Cancelled (\d+) task\(s\)", server.output())
    assert cancelled == ["1"], server.output()


def test_second_sigint_cancels_the_tasks_at_once(tmp_path):
    server, marker = start(tmp_path, "--timeout-graceful-shutdown", "none")
    gate = tmp_path / "gate"
    try:
        assert get(server, "/bg?gate=%s" % gate) == "accepted"
        assert pid_of(marker, "task-started"), server.output()
        server.proc.send_signal(signal.SIGINT)
        assert server.wait_for_output(WAITING_RE, timeout=20), server.output()
        rc = stopped(server, signal.SIGINT)
    finally:
        gate.touch()
        server.close()
    assert rc == 0, server.output()
    assert names(marker) == ["task-started", "task-cancelled", "lifespan-shutdown"]


def test_tasks_that_are_not_app_calls_are_not_waited_for(tmp_path):
    server, marker = start(tmp_path, "--timeout-graceful-shutdown", "none")
    try:
        assert get(server, "/detach") == "detached"
        rc = stopped(server)  # the detached task sleeps a minute
    finally:
        server.close()
    assert rc == 0, server.output()
    assert not re.search(WAITING_RE, server.output()), server.output()
    assert names(marker) == ["lifespan-shutdown"]


def test_request_limit_exit_waits_for_the_task(tmp_path):
    server, marker = start(tmp_path, "--limit-max-requests", "1")
    gate = tmp_path / "gate"
    try:
        assert get(server, "/bg?gate=%s" % gate) == "accepted"
        assert server.wait_for_output(r"Maximum request limit", timeout=20), server.output()
        # Released once the server waits for it, or once it has exited (the failure).
        assert wait_until(lambda: waiting_or(server, server.proc.poll), timeout=20)
        gate.touch()
        rc = server.wait(timeout=40)
    finally:
        gate.touch()
        server.close()
    assert rc == 0, server.output()
    assert names(marker) == ["task-started", "task-done", "lifespan-shutdown"], server.output()


def test_a_server_sharing_its_loop_waits_only_for_its_own_tasks(tmp_path):
    marker = str(tmp_path / "events")
    gate = tmp_path / "gate"
    proc = ServerProcess(
        [SERVER_PYTHON, "-m", "tests.apps.two_servers"], env={"TEST_TASKS_MARKER": marker}
    )

    def command(line, answer):
        proc.proc.stdin.write(line.encode() + b"\n")
        proc.proc.stdin.flush()
        assert proc.wait_for_output(answer, timeout=20), proc.output()

    try:
        bound = proc.wait_for_output(r"BOUND B (\d+)", timeout=20)
        assert bound, proc.output()
        resp = httpx.get("http://127.0.0.1:%s/bg?gate=%s" % (bound.group(1), gate), timeout=10)
        assert resp.text == "accepted"
        assert pid_of(marker, "task-started"), proc.output()
        command("stop A", r"RETURNED A")
        assert not re.search(WAITING_RE, proc.output()), proc.output()
        assert names(marker) == ["task-started", "lifespan-shutdown"], proc.output()
        gate.touch()
        assert wait_until(lambda: "task-done" in names(marker), timeout=20), proc.output()
        command("stop B", r"RETURNED B")
        rc = proc.wait(timeout=20)
    finally:
        gate.touch()
        proc.kill()
        proc.close()
    assert rc == 0, proc.output()
    assert names(marker) == ["task-started", "lifespan-shutdown", "task-done", "lifespan-shutdown"]


# ---------------------------------------------------------------- with a supervisor


def wait_workers(server, count):
    assert wait_until(lambda: len(STARTED_RE.findall(server.output())) >= count, timeout=40), (
        server.output()
    )
    return [int(pid) for pid in STARTED_RE.findall(server.output())]


def test_workers_sigterm_to_supervisor_waits_for_the_task(tmp_path):
    server, marker = start(tmp_path, "--workers", "2")
    try:
        wait_workers(server, 2)
        assert get(server, "/bg?sleep=1") == "accepted"
        rc = stopped(server)
    finally:
        server.close()
    assert rc == 0, server.output()
    pid = pid_of(marker, "task-started")
    assert of_pid(marker, pid) == ["task-started", "task-done", "lifespan-shutdown"], (
        server.output()
    )


def test_sighup_roll_lets_the_old_worker_finish_its_task(tmp_path):
    server, marker = start(tmp_path, "--workers", "2")
    gate = tmp_path / "gate"
    try:
        wait_workers(server, 2)
        assert get(server, "/bg?gate=%s" % gate) == "accepted"
        pid = pid_of(marker, "task-started")
        assert pid, server.output()
        server.proc.send_signal(signal.SIGHUP)
        assert server.wait_for_output(r"stopping worker \[%d\]" % pid, timeout=60), server.output()
        # Released once the old worker waits for it, or once it has stopped (the failure).
        stopped_line = r"Worker \[%d\] stopped" % pid

        def gone():
            return re.search(stopped_line, server.output())

        assert wait_until(lambda: waiting_or(server, gone), timeout=20), server.output()
        gate.touch()
        assert server.wait_for_output(stopped_line, timeout=40), server.output()
        assert server.wait_for_output(r"All workers replaced", timeout=60), server.output()
        assert stopped(server) == 0, server.output()
    finally:
        gate.touch()
        server.close()
    assert of_pid(marker, pid) == ["task-started", "task-done", "lifespan-shutdown"], (
        server.output()
    )


def _server_has_watchfiles():
    probe = subprocess.run(
        [SERVER_PYTHON, "-c", "import watchfiles"], env=server_env(), capture_output=True
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _server_has_watchfiles(), reason="watchfiles is not installed")
def test_reload_lets_the_old_worker_finish_its_task(tmp_path):
    watched = tmp_path / "watched"
    watched.mkdir()
    server, marker = start(
        tmp_path, "--reload", "--reload-dir", str(watched), "--reload-delay", "0.1"
    )
    gate = tmp_path / "gate"
    try:
        pid = wait_workers(server, 1)[0]
        assert get(server, "/bg?gate=%s" % gate) == "accepted"
        assert pid_of(marker, "task-started") == pid, server.output()
        (watched / "edited.py").write_text("x = 1\n")
        stopped_line = r"Worker \[%d\] stopped" % pid

        def gone():
            return re.search(stopped_line, server.output())

        assert wait_until(lambda: waiting_or(server, gone), timeout=30), server.output()
        gate.touch()
        assert server.wait_for_output(stopped_line, timeout=40), server.output()
        assert wait_workers(server, 2), server.output()
        assert stopped(server) == 0, server.output()
    finally:
        gate.touch()
        server.close()
    assert of_pid(marker, pid) == ["task-started", "task-done", "lifespan-shutdown"], (
        server.output()
    )
