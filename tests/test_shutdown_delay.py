"""--shutdown-delay: on SIGTERM /readyz answers 503 at once while the server goes on serving
normally (new connections included) for the delay, then the graceful shutdown starts. Single
process and supervised; a second signal ends the lame duck at once."""

import signal

import httpx
import pytest

from tests.support.helpers import wait_until
from tests.test_probes import probe_port, start, status

# Long enough that the checks below run inside it whatever the machine's load: each test
# ends the period early with a second signal, so none waits it out (but the last one).
DELAY = "60"


def _serves_new_connections(server, n=5):
    for i in range(n):
        # A fresh connection each time: the listener still accepts.
        with httpx.Client(base_url=server.url, timeout=10) as client:
            resp = client.post("/count", content=b"x" * i)
            assert resp.status_code == 200 and resp.text == str(i), resp
    return True


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["single", "supervised"])
def test_lame_duck_then_drain(workers):
    with start("--shutdown-delay", DELAY, *workers) as server:
        port = probe_port(server)
        assert wait_until(lambda: status(port, "/readyz") == 200, timeout=20)
        server.proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: status(port, "/readyz") == 503, timeout=10)
        assert server.wait_for_output("serving on for 60.0s", timeout=10), server.output()
        # Unready, and serving as before.
        assert _serves_new_connections(server)
        assert status(port, "/livez") == 200
        assert "Shutting down" not in server.output()
        assert server.proc.poll() is None
        # A second signal: the drain starts now.
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.output()
        out = server.output()
        assert out.index("serving on for") < out.index("Shutting down"), out


def test_lame_duck_ends_by_itself():
    with start("--shutdown-delay", "1") as server:
        port = probe_port(server)
        assert wait_until(lambda: status(port, "/readyz") == 200, timeout=20)
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.output()
        out = server.output()
        assert out.index("serving on for 1.0s") < out.index("Shutting down"), out


def test_no_delay_by_default():
    with start() as server:
        probe_port(server)
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        assert "serving on for" not in server.output()


def test_negative_delay_is_refused():
    from ferrocorn.config import Config, ConfigError

    with pytest.raises(ConfigError, match="shutdown_delay"):
        Config("tests.apps.probes_app:app", shutdown_delay=-1)
