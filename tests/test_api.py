"""Python API: ferrocorn.Config / ferrocorn.Server / ferrocorn.run, embedded in a process."""

import re
import signal
import subprocess

import httpx

from tests.support.helpers import REPO_ROOT, SERVER_PYTHON, ServerProcess, server_env, start_server


def test_server_serve_in_asyncio_run():
    proc = ServerProcess([SERVER_PYTHON, "-m", "tests.apps.api_embed", "loop"])
    try:
        m = proc.wait_for_output(
            r"(BOUND \S+ (\d+)|NO-BOUND-ADDRESSES.*|NOT-STARTED|"
            r"SERVE-ENDED-EARLY.*)",
            timeout=20,
        )
        assert m, "embedded server did not start:\n" + proc.output()
        assert "NO-BOUND-ADDRESSES" not in m.group(0), (
            "Server has no usable `bound_addresses` attribute:\n" + proc.output()
        )
        assert m.group(0).startswith("BOUND"), proc.output()
        port = int(m.group(2))
        resp = httpx.get("http://127.0.0.1:%d/scope" % port, timeout=10)
        assert resp.status_code == 200
        assert resp.json()["state"]["startup_value"] == "set-at-startup"
        proc.proc.stdin.write(b"stop\n")
        proc.proc.stdin.flush()
        rc = proc.wait(timeout=20)
    finally:
        proc.close()
    assert "SERVE-RETURNED" in proc.output(), proc.output()
    assert rc == 0, proc.output()


def test_server_serve_in_a_thread():
    proc = subprocess.run(
        [SERVER_PYTHON, "-m", "tests.apps.api_embed", "thread"],
        cwd=REPO_ROOT,
        env=server_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=45,
    )
    out = proc.stdout.decode("utf-8", "replace")
    assert "RESPONSE 200 thread-ok" in out, out
    assert "SERVE-RETURNED errors=[]" in out, out
    assert proc.returncode == 0, out


def test_ferrocorn_run_blocking():
    code = (
        "import ferrocorn\n"
        "from tests.apps.basic import app\n"
        "ferrocorn.run(app, host='127.0.0.1', port=0, lifespan='on')\n"
        "print('RUN-RETURNED', flush=True)\n"
    )
    server = start_server(None, argv=[SERVER_PYTHON, "-c", code])
    try:
        assert httpx.get(server.url + "/hello", timeout=10).text == "hello world"
        rc = server.stop(signal.SIGTERM)
    finally:
        server.close()
    assert rc == 0, server.output()
    assert "RUN-RETURNED" in server.output()


def test_ferrocorn_run_import_string():
    code = (
        "import ferrocorn\n"
        "ferrocorn.run('tests.apps.basic:app', host='127.0.0.1', port=0, root_path='/r')\n"
    )
    server = start_server(None, argv=[SERVER_PYTHON, "-c", code])
    try:
        scope = httpx.get(server.url + "/scope", timeout=10).json()
        assert scope["root_path"] == "/r"
        rc = server.stop(signal.SIGINT)
    finally:
        server.close()
    assert rc == 0, server.output()


def test_public_names():
    code = (
        "import ferrocorn\n"
        "assert issubclass(ferrocorn.ClientDisconnected, OSError)\n"
        "assert callable(ferrocorn.run)\n"
        "c = ferrocorn.Config('tests.apps.basic:app', host='127.0.0.1', port=0)\n"
        "s = ferrocorn.Server(c)\n"
        "assert s.should_exit is False\n"
        "assert s.started is False\n"
        "print('VERSION', ferrocorn.__version__)\n"
    )
    proc = subprocess.run(
        [SERVER_PYTHON, "-c", code],
        cwd=REPO_ROOT,
        env=server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=30,
    )
    out = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode == 0, out
    assert re.search(r"VERSION \d+\.\d+", out), out
