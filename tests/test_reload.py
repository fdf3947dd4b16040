"""``--reload``: the supervisor restarts the worker when watched files change, survives an app
that fails to import, and honours ``--reload-include``/``--reload-exclude``."""

import signal
import subprocess

import pytest

from tests.support.helpers import (
    SERVER_PYTHON,
    RawConnection,
    request_bytes,
    server_env,
    wait_until,
)


def _server_has_watchfiles():
    probe = subprocess.run(
        [SERVER_PYTHON, "-c", "import watchfiles"], env=server_env(), capture_output=True
    )
    return probe.returncode == 0


needs_watchfiles = pytest.mark.skipif(
    not _server_has_watchfiles(),
    reason="watchfiles is not installed for the server's interpreter (pip install watchfiles)",
)

APP_SOURCE = """\
async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": %r})
"""


def write_app(path, body):
    path.write_text(APP_SOURCE % body)


def get_response(port):
    with RawConnection(port, timeout=20) as conn:
        conn.send(request_bytes("GET", "/", [("Connection", "close")]))
        resp = conn.read_response()
    assert resp is not None, "no response"
    return resp


def get_body(port):
    resp = get_response(port)
    assert resp.status == 200, resp
    return resp.body


def start_reloading(server_factory, tmp_path, *flags, env=None):
    base_env = {"PYTHONDONTWRITEBYTECODE": "1"}  # same-size edits within a second: no stale .pyc
    base_env.update(env or {})
    return server_factory(
        "reload_app:app",
        "--reload",
        "--app-dir",
        str(tmp_path),
        "--lifespan",
        "off",
        "--reload-delay",
        "0.1",
        *flags,
        env=base_env,
    )


@needs_watchfiles
def test_reload_picks_up_edits_and_survives_a_syntax_error(server_factory, tmp_path):
    app_file = tmp_path / "reload_app.py"
    write_app(app_file, b"version-1")
    server = start_reloading(server_factory, tmp_path, "--reload-dir", str(tmp_path))
    assert get_body(server.port) == b"version-1"

    write_app(app_file, b"version-2")
    assert wait_until(lambda: get_body(server.port) == b"version-2", timeout=30), server.output()
    assert "detected changes in 'reload_app.py'" in server.output()

    app_file.write_text("async def app(scope, receive, send)\n    pass\n")  # no colon
    assert server.wait_for_output(r"Answering 503 until the next change", timeout=30), (
        server.output()
    )
    assert "SyntaxError" in server.output()
    assert server.proc.poll() is None  # the supervisor stays
    # Requests meanwhile get a 503 that names the failure, at once (not a hang).
    resp = get_response(server.port)
    assert resp.status == 503 and resp.header("retry-after") == "1"
    assert b"SyntaxError" in resp.body and b"reload_app" in resp.body

    write_app(app_file, b"version-3")
    assert wait_until(lambda: get_response(server.port).body == b"version-3", timeout=30), (
        server.output()
    )
    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()


@needs_watchfiles
@pytest.mark.parametrize(
    "source, named",
    [
        ("import no_such_module_here\n", b"No module named 'no_such_module_here'"),
        ("application = None\n", b'Attribute "app" not found in module "reload_app"'),
        ("raise RuntimeError('config missing')\n", b"RuntimeError: config missing"),
    ],
    ids=["missing-import", "missing-attribute", "raises"],
)
def test_reload_answers_503_while_the_app_fails_to_import(server_factory, tmp_path, source, named):
    """From the first start on: the failure is logged and served as a 503 naming it, and the
    next edit brings the app up."""
    app_file = tmp_path / "reload_app.py"
    app_file.write_text(source)
    server = start_reloading(server_factory, tmp_path, "--reload-dir", str(tmp_path))
    resp = get_response(server.port)
    assert resp.status == 503, resp
    assert named in resp.body, resp.body
    write_app(app_file, b"fixed")
    assert wait_until(lambda: get_response(server.port).status == 200, timeout=30), server.output()
    assert get_body(server.port) == b"fixed"
    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()


STARTUP_FAILS = """\
async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no database"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"up"})
"""


@needs_watchfiles
def test_reload_answers_503_while_startup_fails(server_factory, tmp_path):
    app_file = tmp_path / "reload_app.py"
    app_file.write_text(STARTUP_FAILS)
    server = server_factory(
        "reload_app:app",
        "--reload",
        "--app-dir",
        str(tmp_path),
        "--reload-delay",
        "0.1",
        "--reload-dir",
        str(tmp_path),
        env={"PYTHONDONTWRITEBYTECODE": "1"},
    )
    resp = get_response(server.port)
    assert resp.status == 503 and b"Application startup failed" in resp.body, resp
    assert "no database" in server.output()
    app_file.write_text(
        STARTUP_FAILS.replace("lifespan.startup.failed", "lifespan.startup.complete")
    )
    assert wait_until(lambda: get_response(server.port).status == 200, timeout=30), server.output()
    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()


@needs_watchfiles
def test_reload_include_and_exclude(server_factory, tmp_path):
    write_app(tmp_path / "reload_app.py", b"hello")
    server = start_reloading(
        server_factory,
        tmp_path,
        "--reload-include",
        "*.cfg",
        "--reload-exclude",
        "ignored_*.py",
        env={"FERROCORN_RELOAD_DIR": str(tmp_path)},
    )
    assert get_body(server.port) == b"hello"
    assert server.wait_for_output(r"Started worker \[\d+\]", timeout=20)
    (tmp_path / "notes.txt").write_text("not watched\n")
    (tmp_path / "ignored_module.py").write_text("x = 1\n")
    (tmp_path / "settings.cfg").write_text("[watched]\n")
    match = server.wait_for_output(r"detected changes in (.*)\. Reloading", timeout=30)
    assert match, server.output()
    assert match.group(1) == "'settings.cfg'", server.output()
    assert wait_until(lambda: server.output().count("Started worker") == 2, timeout=30)
    assert get_body(server.port) == b"hello"


def test_reload_needs_watchfiles(monkeypatch):
    from ferrocorn import config as config_module

    monkeypatch.setattr(config_module, "_module_installed", lambda name: False)
    with pytest.raises(config_module.ConfigError, match="pip install watchfiles"):
        config_module.Config("tests.apps.workers:app", reload=True)
