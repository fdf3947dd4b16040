"""Lifespan protocol: --lifespan on/auto/off, startup failure exit code, shutdown on SIGTERM."""

import os
import signal

import httpx

from tests.support.helpers import start_server


def read(path):
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


def test_lifespan_on_startup_before_serving_and_shutdown_on_sigterm(tmp_path):
    startup = str(tmp_path / "startup")
    shutdown = str(tmp_path / "shutdown")
    env = {
        "TEST_APP_STARTUP_MARKER": startup,
        "TEST_APP_SHUTDOWN_MARKER": shutdown,
        "TEST_APP_STARTUP_DELAY": "1.0",
    }
    server = start_server("tests.apps.basic:app", "--lifespan", "on", env=env)
    try:
        # The very first request already sees the state set by a slow startup.
        assert read(startup) == "startup-ran\n"
        resp = httpx.get(server.url + "/scope", timeout=10)
        assert resp.json()["state"]["startup_value"] == "set-at-startup"
        assert read(shutdown) == ""
        rc = server.stop(signal.SIGTERM)
    finally:
        server.close()
    assert rc == 0, server.output()
    assert read(shutdown) == "shutdown-ran\n"


def test_lifespan_shutdown_on_sigint(tmp_path):
    shutdown = str(tmp_path / "shutdown")
    server = start_server(
        "tests.apps.basic:app", "--lifespan", "on", env={"TEST_APP_SHUTDOWN_MARKER": shutdown}
    )
    try:
        assert httpx.get(server.url + "/hello", timeout=10).status_code == 200
        rc = server.stop(signal.SIGINT)
    finally:
        server.close()
    assert rc == 0, server.output()
    assert read(shutdown) == "shutdown-ran\n"


def run_until_exit(target, *flags, env=None):
    server = start_server(target, *flags, env=env, ready=False)
    try:
        rc = server.wait(timeout=30)
    finally:
        server.close()
    return rc, server.output()


def test_startup_failed_message_exit_3():
    rc, out = run_until_exit("tests.apps.lifespan_fail:app", "--lifespan", "on")
    assert rc == 3, out
    assert "startup-failed-msg-41b2" in out
    assert "Ferrocorn running on" not in out


def test_startup_raises_exit_3():
    rc, out = run_until_exit("tests.apps.lifespan_raise:app", "--lifespan", "on")
    assert rc == 3, out
    assert "startup-raised-msg-8d0e" in out
    assert "Ferrocorn running on" not in out


def test_startup_failed_auto_also_exit_3():
    # In auto mode an app that *speaks* lifespan and reports failure still stops the server.
    rc, out = run_until_exit("tests.apps.lifespan_fail:app", "--lifespan", "auto")
    assert rc == 3, out
    assert "startup-failed-msg-41b2" in out


def test_lifespan_auto_unsupported_app_still_serves(tmp_path):
    marker = str(tmp_path / "lifespan")
    server = start_server(
        "tests.apps.no_lifespan:app", "--lifespan", "auto", env={"TEST_APP_LIFESPAN_MARKER": marker}
    )
    try:
        resp = httpx.get(server.url + "/", timeout=10)
        assert resp.status_code == 200
        assert resp.text == "no-lifespan-app ok"
        rc = server.stop()
    finally:
        server.close()
    out = server.output()
    assert rc == 0, out
    assert "called with lifespan" in read(marker)  # auto mode did try
    lines = [line for line in out.splitlines() if "lifespan" in line.lower()]
    assert len(lines) == 1, "expected one log line about lifespan, got:\n" + out
    assert "Traceback" not in out, out


def test_lifespan_on_with_unsupported_app_fails():
    rc, out = run_until_exit("tests.apps.no_lifespan:app", "--lifespan", "on")
    assert rc == 3, out
    assert "no-lifespan-app only speaks http" in out


def test_lifespan_off_never_called(tmp_path):
    marker = str(tmp_path / "lifespan")
    server = start_server(
        "tests.apps.basic:app", "--lifespan", "off", env={"TEST_APP_LIFESPAN_MARKER": marker}
    )
    try:
        resp = httpx.get(server.url + "/scope", timeout=10)
        assert resp.status_code == 200
        scope = resp.json()
        assert not scope["state"], scope["state"]  # no startup ran: no startup_value
        rc = server.stop()
    finally:
        server.close()
    assert rc == 0, server.output()
    assert read(marker) == ""


def test_lifespan_off_with_unsupported_app(tmp_path):
    server = start_server("tests.apps.no_lifespan:app", "--lifespan", "off")
    try:
        assert httpx.get(server.url + "/", timeout=10).text == "no-lifespan-app ok"
        rc = server.stop()
    finally:
        server.close()
    out = server.output()
    assert rc == 0, out
    assert "Traceback" not in out, out
    assert "unsupported" not in out.lower(), out
