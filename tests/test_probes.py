"""--health-port: /livez and /readyz answered by the Rust core, off the Python loop, through
lifespan startup, serving, a blocked loop, the graceful drain, and with a supervisor."""

import re
import signal
import socket
import threading

import httpx
import pytest
from ferrocorn.config import Config, ConfigError

from tests.support.helpers import run_ferrocorn, start_server, wait_until

APP = "tests.apps.probes_app:app"
PROBES_RE = r"Probes on http://127\.0\.0\.1:(\d+)/livez and /readyz"


def probe_port(server):
    m = server.wait_for_output(PROBES_RE, timeout=20)
    assert m, server.output()
    return int(m.group(1))


def probe(port, path, method="GET", raw=None):
    """(status, headers text, body) of one probe exchange on a fresh connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw or f"{method} {path} HTTP/1.1\r\nHost: probe\r\n\r\n".encode())
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, head.decode("latin-1"), body


def status(port, path):
    return probe(port, path)[0]


def start(*flags, env=None, ready=True):
    return start_server(APP, "--health-port", "0", *flags, env=env, ready=ready)


def in_thread(fn):
    result = {}

    def run():
        try:
            result["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_livez_and_readyz_while_serving():
    with start() as server:
        port = probe_port(server)
        code, head, body = probe(port, "/livez")
        assert (code, body) == (200, b"ok\n")
        assert "connection: close" in head.lower()
        assert "cache-control: no-store" in head.lower()
        code, _, body = probe(port, "/readyz")
        assert (code, body) == (200, b"ready\n")
        assert status(port, "/readyz?full=1") == 200
        # HEAD: the same status and length, no body.
        code, head, body = probe(port, "/livez", method="HEAD")
        assert code == 200 and body == b"" and "content-length: 3" in head.lower()
        # The app's port is unaffected.
        assert httpx.get(server.url + "/", timeout=10).text == "0"


def test_other_paths_methods_and_bad_requests():
    with start() as server:
        port = probe_port(server)
        assert status(port, "/") == 404
        assert status(port, "/metrics") == 404
        assert status(port, "/livez/extra") == 404
        code, head, _ = probe(port, "/livez", method="POST")
        assert code == 405 and "allow: get, head" in head.lower()
        assert probe(port, None, raw=b"garbage\r\n\r\n")[0] == 400
        assert probe(port, None, raw=b"GET /livez HTTP/1.1\r\nX: " + b"a" * 9000)[0] == 431
        # Still answering after all that.
        assert status(port, "/livez") == 200


def test_probes_answer_while_the_app_blocks_the_loop():
    with start() as server:
        port = probe_port(server)
        thread, result = in_thread(lambda: httpx.get(server.url + "/block?s=4", timeout=30))
        assert server.wait_for_output("block started", timeout=10)
        # The loop is in time.sleep: only the core can answer these.
        assert status(port, "/livez") == 200
        assert status(port, "/readyz") == 200
        # A shutdown that begins while the loop is blocked fails readiness at once.
        server.proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: status(port, "/readyz") == 503, timeout=3)
        assert "Shutting down" not in server.output()  # the loop is still blocked
        assert status(port, "/livez") == 200
        thread.join(30)
        assert result["value"].text == "blocked"
        assert server.wait(20) == 0


def test_readyz_is_503_until_lifespan_startup_completed(tmp_path):
    gate = str(tmp_path / "gate")
    # Another process took "first": this server's startup waits for the gate file.
    open(gate + ".first", "w").close()
    with start(env={"PROBES_GATE": gate}, ready=False) as server:
        port = probe_port(server)
        assert status(port, "/readyz") == 503
        assert status(port, "/livez") == 200
        assert "Ferrocorn running on" not in server.output()
        assert status(port, "/readyz") == 503
        open(gate, "w").close()
        server.wait_ready(20)
        assert wait_until(lambda: status(port, "/readyz") == 200, timeout=10)


def test_readyz_is_503_during_the_drain():
    with start("--timeout-graceful-shutdown", "20") as server:
        port = probe_port(server)
        assert status(port, "/readyz") == 200
        thread, result = in_thread(lambda: httpx.get(server.url + "/slow?s=3", timeout=30))
        assert server.wait_for_output("slow started", timeout=10)
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait_for_output("Waiting for connections to close", timeout=10)
        # Draining: still alive, no longer ready.
        assert server.proc.poll() is None
        assert status(port, "/readyz") == 503
        assert status(port, "/livez") == 200
        thread.join(30)
        assert result["value"].text == "slow"
        assert server.wait(20) == 0


def test_the_probe_port_closes_with_the_server():
    server = start()
    port = probe_port(server)
    assert status(port, "/livez") == 200
    assert server.stop() == 0
    server.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_connections_beyond_the_limit_are_closed_and_silent_ones_time_out():
    with start() as server:
        port = probe_port(server)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(64)]
        try:
            # The 65th is closed unanswered (EOF, or a reset).
            extra = socket.create_connection(("127.0.0.1", port), timeout=10)
            try:
                extra.sendall(b"GET /livez HTTP/1.1\r\n\r\n")
                assert extra.recv(100) == b""
            except ConnectionResetError:
                pass
            finally:
                extra.close()
            # Silent connections are closed by the server (5 s for the whole exchange).
            idle[0].settimeout(15)
            assert idle[0].recv(100) == b""
        finally:
            for sock in idle:
                sock.close()
        assert wait_until(lambda: status(port, "/livez") == 200, timeout=10)


def test_probes_next_to_metrics():
    flags = ("--metrics", "--metrics-port", "0")
    with start(*flags) as server:
        port = probe_port(server)
        m = server.wait_for_output(r"Metrics on http://127\.0\.0\.1:(\d+)/metrics", timeout=10)
        metrics_port = int(m.group(1))
        assert port != metrics_port
        assert status(port, "/readyz") == 200
        assert status(port, "/metrics") == 404
        resp = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
        assert resp.status_code == 200 and "ferrocorn_requests_total" in resp.text
        thread, result = in_thread(lambda: httpx.get(server.url + "/block?s=3", timeout=30))
        assert server.wait_for_output("block started", timeout=10)
        assert status(port, "/livez") == 200
        thread.join(30)
        assert result["value"].text == "blocked"


def test_without_the_option_no_probe_port():
    with start_server(APP) as server:
        assert httpx.get(server.url + "/", timeout=10).status_code == 200
        assert "Probes on" not in server.output()


def test_workers_ready_while_one_worker_is(tmp_path):
    gate = str(tmp_path / "gate")
    with start("--workers", "2", env={"PROBES_GATE": gate}) as server:
        port = probe_port(server)
        # The first worker starts at once, the second waits for the gate.
        assert wait_until(lambda: "Started worker" in server.output(), timeout=20)
        assert wait_until(lambda: status(port, "/readyz") == 200, timeout=10)
        assert len(re.findall(r"Started worker", server.output())) == 1
        assert status(port, "/livez") == 200
        open(gate, "w").close()
        assert wait_until(lambda: len(re.findall("Started worker", server.output())) == 2, 20)
        assert status(port, "/readyz") == 200
        # SIGTERM: not ready while the workers drain a slow request.
        thread, result = in_thread(lambda: httpx.get(server.url + "/slow?s=3", timeout=30))
        assert server.wait_for_output("slow started", timeout=10)
        server.proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: status(port, "/readyz") == 503, timeout=5)
        assert server.proc.poll() is None
        assert status(port, "/livez") == 200
        thread.join(30)
        assert result["value"].text == "slow"
        assert server.wait(30) == 0


def test_workers_not_ready_before_any_worker_is(tmp_path):
    gate = str(tmp_path / "gate")
    open(gate + ".first", "w").close()  # no worker starts before the gate opens
    with start("--workers", "2", env={"PROBES_GATE": gate}, ready=False) as server:
        port = probe_port(server)
        assert wait_until(lambda: server.output().count("Started server process") >= 2, 20)
        assert status(port, "/readyz") == 503
        assert status(port, "/livez") == 200
        open(gate, "w").close()
        assert wait_until(lambda: status(port, "/readyz") == 200, timeout=20)


def test_bad_health_port_is_a_one_line_error():
    proc = run_ferrocorn(APP, "--port", "0", "--health-port", "70000")
    assert proc.returncode == 1
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "health_port" in lines[0], lines
    with pytest.raises(ConfigError, match="health_port"):
        Config(APP, health_port=-1)


def test_probe_port_in_use_fails_at_start():
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    try:
        busy = str(blocker.getsockname()[1])
        proc = run_ferrocorn(APP, "--port", "0", "--health-port", busy)
        out = proc.stderr.decode()
        assert proc.returncode == 1, out
        assert "Could not bind the health probes" in out and "Traceback" not in out, out
    finally:
        blocker.close()


def test_environment_variable():
    with start_server(APP, env={"FERROCORN_HEALTH_PORT": "0"}) as server:
        assert status(probe_port(server), "/livez") == 200


METRICS_RE = r"Metrics on http://127\.0\.0\.1:(\d+)/metrics"


def metrics_port_of(server):
    m = server.wait_for_output(METRICS_RE, timeout=20)
    assert m, server.output()
    return int(m.group(1))


def test_metrics_port_answers_the_probes_through_startup_and_drain():
    """/livez and /readyz on the metrics port too (served by the Python loop there, so only
    --health-port answers while the app blocks the loop): ready while serving, 503 from the
    moment the graceful shutdown begins."""
    flags = ("--metrics", "--metrics-port", "0", "--timeout-graceful-shutdown", "20")
    with start_server(APP, *flags) as server:
        port = metrics_port_of(server)
        assert status(port, "/livez") == 200
        assert status(port, "/readyz") == 200
        assert probe(port, "/readyz", method="HEAD")[2] == b""
        assert status(port, "/nope") == 404
        thread, result = in_thread(lambda: httpx.get(server.url + "/slow?s=3", timeout=30))
        assert server.wait_for_output("slow started", timeout=10)
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait_for_output("Waiting for connections to close", timeout=10)
        assert status(port, "/readyz") == 503
        assert status(port, "/livez") == 200
        thread.join(30)
        assert result["value"].text == "slow"
        assert server.wait(20) == 0


def test_supervisor_metrics_port_answers_the_probes(tmp_path):
    gate = str(tmp_path / "gate")
    open(gate + ".first", "w").close()  # no worker starts before the gate opens
    flags = ("--workers", "2", "--metrics", "--metrics-port", "0")
    with start_server(APP, *flags, env={"PROBES_GATE": gate}, ready=False) as server:
        port = metrics_port_of(server)
        assert wait_until(lambda: server.output().count("Started server process") >= 2, 20)
        assert status(port, "/readyz") == 503
        assert status(port, "/livez") == 200
        open(gate, "w").close()
        server.wait_ready(20)
        assert wait_until(lambda: status(port, "/readyz") == 200, timeout=20)
        thread, result = in_thread(lambda: httpx.get(server.url + "/slow?s=3", timeout=30))
        assert server.wait_for_output("slow started", timeout=10)
        server.proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: status(port, "/readyz") == 503, timeout=5)
        thread.join(30)
        assert result["value"].text == "slow"
        assert server.wait(30) == 0
