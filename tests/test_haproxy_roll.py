"""A rolling deploy behind a real HAProxy (Debian's /usr/sbin/haproxy; skipped without it)
that checks each instance's ``/readyz``: every SIGTERM with ``--shutdown-delay`` loses no
request (issue 34, items 1, 4 and 5; benchmarks/drain/haproxy_roll.py is the longer version).

Instance A is a single process, B a supervisor with 2 workers. Each step: SIGTERM (the lame
duck: ``/readyz`` answers 503, serving goes on), wait until HAProxy reports the instance DOWN
on its stats socket, a second SIGTERM (the drain starts now, as it would once the delay ran
out), wait for the exit, start the instance again, wait until HAProxy reports it UP. Clients
send keep-alive requests through HAProxy all along and check every response. No step waits
for a time: each waits for a state, so a slow machine makes the test slower, not flaky.
HAProxy runs with ``retries 0``: a request it sent to a closed port would come back 503.
"""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from tests.support.helpers import start_server, wait_until

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
APP = "tests.apps.basic:app"
CLIENTS = 4
REQUEST = b"GET / HTTP/1.1\r\nHost: roll\r\n\r\n"
# Long: the test ends each lame duck itself, once HAProxy has seen it (a second SIGTERM).
DELAY = "60"

pytestmark = pytest.mark.skipif(not os.access(HAPROXY, os.X_OK), reason="haproxy not installed")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Instance:
    def __init__(self, name, workers):
        self.name = name
        self.workers = workers
        self.port = free_port()
        self.health = free_port()
        self.server = None

    def start(self):
        flags = ["--host", "127.0.0.1", "--port", str(self.port), "--no-access-log"]
        flags += ["--health-port", str(self.health), "--shutdown-delay", DELAY]
        if self.workers > 1:
            flags += ["--workers", str(self.workers)]
        self.server = start_server(APP, *flags, host_port=False)


def haproxy_config(front, stats, instances):
    servers = "\n".join(
        f"    server {i.name} 127.0.0.1:{i.port} check port {i.health}" for i in instances
    )
    return f"""
global
    maxconn 200
    stats socket {stats} mode 600 level admin
defaults
    mode http
    retries 0
    timeout connect 2s
    timeout client 30s
    timeout server 30s
frontend front
    bind 127.0.0.1:{front}
    default_backend app
backend app
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    timeout check 5s
    default-server inter 300ms fall 2 rise 1
{servers}
"""


def server_state(stats, name):
    """HAProxy's view of server ``name``: "up" once a check passed (HAProxy counts a server as
    up from the start, before any check), "down", or None in between."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(stats)
        sock.sendall(b"show stat\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    lines = data.decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    for line in lines[1:]:
        row = dict(zip(header, line.split(",")))
        if row.get("pxname") == "app" and row.get("svname") == name:
            if row["status"] == "UP" and "L7OK" in row["check_status"]:
                return "up"
            if row["status"] == "DOWN":
                return "down"
    return None


def read_response(sock, buf):
    """(head, body, rest) of the next response on ``sock``; None when the peer closed first."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head, rest[:length], rest[length:]


def client(port, stop, results, lock):
    """Keep-alive requests through HAProxy; every outcome recorded, nothing retried."""
    sock, buf = None, b""
    while not stop.is_set():
        if sock is None:
            sock, buf = socket.create_connection(("127.0.0.1", port), timeout=20), b""
        outcome, head = None, b""
        try:
            sock.sendall(REQUEST)
            got = read_response(sock, buf)
        except OSError as exc:
            got, outcome = None, type(exc).__name__
        if got is None:
            outcome = outcome or "no response"
        else:
            head, _, buf = got
            outcome = head.split(b"\r\n", 1)[0].decode()
        with lock:
            results[outcome] = results.get(outcome, 0) + 1
        if got is None or b"connection: close" in head.lower():
            sock.close()
            sock = None
        time.sleep(0.002)
    if sock is not None:
        sock.close()


def test_rolling_deploy_behind_haproxy_loses_no_request(tmp_path):
    instances = [Instance("a", 1), Instance("b", 2)]
    front, stats = free_port(), str(tmp_path / "haproxy.sock")
    config = tmp_path / "haproxy.cfg"
    config.write_text(haproxy_config(front, stats, instances))
    haproxy = None
    threads = []
    stop = threading.Event()
    results = {}
    lock = threading.Lock()

    def answered():
        with lock:
            return sum(results.values())

    try:
        for instance in instances:
            instance.start()
        haproxy = subprocess.Popen(
            [HAPROXY, "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        for instance in instances:
            assert wait_until(
                lambda i=instance: os.path.exists(stats) and server_state(stats, i.name) == "up",
                timeout=20,
            )
        threads = [
            threading.Thread(target=client, args=(front, stop, results, lock), daemon=True)
            for _ in range(CLIENTS)
        ]
        for t in threads:
            t.start()

        for instance in instances:
            before = answered()
            server = instance.server
            server.proc.send_signal(signal.SIGTERM)
            assert server.wait_for_output("serving on for", timeout=10), server.output()
            assert wait_until(lambda i=instance: server_state(stats, i.name) == "down", timeout=20)
            server.proc.send_signal(signal.SIGTERM)  # the lame duck ends: the drain starts
            assert server.wait(40) == 0, server.output()
            instance.start()
            assert wait_until(lambda i=instance: server_state(stats, i.name) == "up", timeout=20)
            assert wait_until(lambda b=before: answered() > b + 50, timeout=20)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for instance in instances:
            if instance.server is not None:
                instance.server.kill()  # (a SIGTERM would start a 60 s lame duck)
        if haproxy is not None:
            haproxy.terminate()
            haproxy.wait(10)
    assert set(results) == {"HTTP/1.1 200 OK"}, results
    assert results["HTTP/1.1 200 OK"] > 100, results
