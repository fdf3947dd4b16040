"""Shared helpers for the black-box tests: a server launcher and a raw-socket HTTP/1.x reader.

The server always runs in a subprocess: ``<python> -m ferrocorn <target> --host 127.0.0.1
--port 0 ...`` with the repository root as cwd.  ``<python>`` is ``$FERROCORN_TEST_PYTHON``
(e.g. ``pypy3``) or the interpreter running pytest.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from tests.support.wire import BufferedSocket

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER_PYTHON = os.environ.get("FERROCORN_TEST_PYTHON") or sys.executable

READY_RE = re.compile(r"Ferrocorn running on (\S+)")
HTTP_READY_RE = re.compile(r"Ferrocorn running on https?://(\[[^\]]+\]|[^\s:/]+):(\d+)")


# The event loop every server of the run uses unless a test names one (FERROCORN_TEST_LOOP:
# asyncio or uvloop; unset: ferrocorn's own choice, uvloop when installed).
TEST_LOOP = os.environ.get("FERROCORN_TEST_LOOP")


def server_env(extra=None):
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # Never let the developer's own FERROCORN_* settings leak into a test.
    for key in list(env):
        if key.startswith("FERROCORN_") and key != "FERROCORN_TEST_PYTHON":
            del env[key]
    if TEST_LOOP:
        env["FERROCORN_LOOP"] = TEST_LOOP  # a --loop flag still wins
    env.pop("WEB_CONCURRENCY", None)  # the default of --workers
    if extra:
        env.update(extra)
    return env


class ServerProcess:
    """A ferrocorn subprocess whose stdout and stderr are collected by background threads."""

    def __init__(self, argv, env=None, pass_fds=(), cwd=REPO_ROOT):
        self.argv = list(argv)
        self.port = None  # type: Optional[int]
        self.host = None  # type: Optional[str]
        self.ready_line = None  # type: Optional[str]
        self._lock = threading.Lock()
        self._chunks = []  # type: List[str]
        self._stderr = []  # type: List[str]
        self._cond = threading.Condition(self._lock)
        self.proc = subprocess.Popen(
            self.argv,
            cwd=cwd,
            env=server_env(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=tuple(pass_fds),
            # Its own process group: kill() then also ends workers that a killed supervisor
            # left behind (they would hold the output pipes open forever).
            start_new_session=True,
        )
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, False), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, True), daemon=True),
        ]
        for t in self._threads:
            t.start()

    # ------------------------------------------------------------ output capture
    def _pump(self, stream, is_stderr):
        for raw in iter(stream.readline, b""):
            text = raw.decode("utf-8", "replace")
            with self._cond:
                self._chunks.append(text)
                if is_stderr:
                    self._stderr.append(text)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def output(self):
        """Everything the server printed so far (stdout and stderr, interleaved by arrival)."""
        with self._lock:
            return "".join(self._chunks)

    def stderr_text(self):
        with self._lock:
            return "".join(self._stderr)

    def wait_for_output(self, pattern, timeout=10.0, start=0):
        """Wait until ``pattern`` (regex) matches the output from offset ``start``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                text = "".join(self._chunks)
                m = regex.search(text, start)
                if m:
                    return m
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(min(remaining, 0.1))

    def wait_ready(self, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.wait_for_output(READY_RE.pattern, timeout=0.1)
            if m:
                self.ready_line = m.group(0)
                hm = HTTP_READY_RE.search(self.output())
                if hm:
                    self.host = hm.group(1).strip("[]")
                    self.port = int(hm.group(2))
                return self
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the pump threads drain
                raise AssertionError(
                    "server exited with code %s before it was ready; argv=%r; output:\n%s"
                    % (self.proc.returncode, self.argv, self.output())
                )
        self.kill()
        raise AssertionError(
            "server not ready within %.0fs; argv=%r; output:\n%s"
            % (timeout, self.argv, self.output())
        )

    # ------------------------------------------------------------ lifecycle
    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def pid(self):
        return self.proc.pid

    def wait(self, timeout=20.0):
        """Wait for exit; returns the exit code (output fully drained)."""
        rc = self.proc.wait(timeout)
        for t in self._threads:
            t.join(5)
        return rc

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Send ``sig`` and wait; returns the exit code, or None if it had to be killed."""
        if self.proc.poll() is not None:
            return self.wait()
        self.proc.send_signal(sig)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.proc.poll() is None:
            self._kill_group()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for t in self._threads:
            t.join(2)

    def _kill_group(self):
        """SIGKILL the server and every process it started (its process group)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass

    def close(self):
        if self.proc.poll() is None:
            self.stop()
        if any(t.is_alive() for t in self._threads):
            # The server exited but something it started still holds its output open.
            self._kill_group()
            for t in self._threads:
                t.join(5)
        if any(t.is_alive() for t in self._threads):
            return  # closing a pipe a thread is reading would block until that read ends
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def rss_kb(self, field="VmRSS"):
        """Resident memory of the server process in KiB (Linux /proc)."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise AssertionError("%s not found for pid %d" % (field, self.proc.pid))


def ferrocorn_argv(target, *flags, host_port=True, python=None):
    argv = [python or SERVER_PYTHON, "-m", "ferrocorn", target]
    if host_port:
        argv += ["--host", "127.0.0.1", "--port", "0"]
    argv += list(flags)
    return argv


def start_server(
    target, *flags, env=None, pass_fds=(), host_port=True, ready=True, timeout=20.0, argv=None
):
    """Start ``python -m ferrocorn target --host 127.0.0.1 --port 0 *flags`` and wait until ready.

    ``argv`` replaces the whole command line (for console-script / Python-API launches).
    """
    if argv is None:
        argv = ferrocorn_argv(target, *flags, host_port=host_port)
    server = ServerProcess(argv, env=env, pass_fds=pass_fds)
    if ready:
        try:
            server.wait_ready(timeout)
        except BaseException:
            server.kill()
            raise
    return server


def run_ferrocorn(*args, env=None, timeout=30.0, python=None):
    """Run ferrocorn to completion (for commands that should exit by themselves)."""
    argv = [python or SERVER_PYTHON, "-m", "ferrocorn"] + list(args)
    return subprocess.run(
        argv,
        cwd=REPO_ROOT,
        env=server_env(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
    )


# ---------------------------------------------------------------- raw HTTP/1.x client


class IncompleteResponse(Exception):
    """The peer closed the connection in the middle of a response."""

    def __init__(self, message, partial):
        Exception.__init__(self, message)
        self.partial = partial


class RawResponse:
    def __init__(
        self,
        version,
        status,
        reason,
        headers,
        body=b"",
        framing="none",
        complete=True,
        raw_head=b"",
    ):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers  # type: List[Tuple[str, str]]
        self.body = body
        self.framing = framing  # "content-length", "chunked", "close", "none"
        self.complete = complete
        self.raw_head = raw_head
        # A chunked body's trailer section, as (name, value) pairs in wire order.
        self.trailers = []  # type: List[Tuple[str, str]]

    def header(self, name, default=None):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    def header_all(self, name):
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    def __repr__(self):
        return "RawResponse(%s %d, headers=%r, framing=%s, body=%r%s)" % (
            self.version,
            self.status,
            self.headers,
            self.framing,
            self.body[:200],
            "" if self.complete else ", INCOMPLETE",
        )


class RawConnection(BufferedSocket):
    """A plain TCP (or Unix) socket with a buffered HTTP/1.x response parser."""

    def __init__(self, port=None, host="127.0.0.1", timeout=10.0, uds=None, sock=None):
        if sock is None:
            if uds is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(uds)
            else:
                sock = socket.create_connection((host, port), timeout=timeout)
        sock.settimeout(timeout)
        BufferedSocket.__init__(self, sock)

    def send(self, data):
        self.sock.sendall(data)

    def read_line(self):
        """One CRLF-terminated line, without the CRLF."""
        idx = self.find(b"\r\n")
        if idx < 0:
            raise IncompleteResponse("EOF while reading a line", bytes(self.buf))
        line = self.take(idx)
        del self.buf[:2]
        return line

    def read_exact(self, n):
        if not self.need(n):
            raise IncompleteResponse(
                "EOF after %d of %d bytes" % (len(self.buf), n), bytes(self.buf)
            )
        return self.take(n)

    def read_head(self):
        """Read a status line + headers. Returns (version, status, reason, headers, raw) or None
        when the connection was closed cleanly before any byte of a response."""
        idx = self.find(b"\r\n\r\n")
        if idx < 0:
            if not self.buf:
                return None
            raise IncompleteResponse("EOF inside a response head", bytes(self.buf))
        raw = self.take(idx + 4)
        lines = raw[:-4].split(b"\r\n")
        parts = lines[0].decode("latin-1").split(" ", 2)
        version, status = parts[0], int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers = []
        for line in lines[1:]:
            name, _, value = line.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        return version, status, reason, headers, raw

    def read_response(self, method="GET", skip_informational=True, informational=None):
        """Read one full response. ``informational`` (a list) collects skipped 1xx responses.

        Returns None when the server closed the connection before sending anything.
        Raises IncompleteResponse (with ``.partial`` a RawResponse) on a truncated body.
        """
        while True:
            head = self.read_head()
            if head is None:
                return None
            version, status, reason, headers, raw = head
            resp = RawResponse(version, status, reason, headers, raw_head=raw)
            if 100 <= status < 200 and status != 101:
                if informational is not None:
                    informational.append(resp)
                if skip_informational:
                    continue
                return resp
            break
        te = (resp.header("transfer-encoding") or "").lower()
        cl = resp.header("content-length")
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            resp.framing = "none"
            return resp
        if "chunked" in te:
            resp.framing = "chunked"
            body = bytearray()
            try:
                while True:
                    line = self.read_line()
                    size = int(line.split(b";")[0].strip(), 16)
                    if size == 0:
                        # trailers until an empty line
                        while line := self.read_line():
                            name, _, value = line.decode("latin-1").partition(":")
                            resp.trailers.append((name.strip(), value.strip()))
                        break
                    body += self.read_exact(size)
                    if self.read_exact(2) != b"\r\n":
                        raise AssertionError("chunk not followed by CRLF")
            except IncompleteResponse:
                resp.body = bytes(body) + bytes(self.buf)
                resp.complete = False
                raise IncompleteResponse("chunked body not terminated", resp) from None
            resp.body = bytes(body)
            return resp
        if cl is not None:
            resp.framing = "content-length"
            try:
                resp.body = self.read_exact(int(cl))
            except IncompleteResponse as exc:
                resp.body = exc.partial
                resp.complete = False
                raise IncompleteResponse("content-length body truncated", resp) from None
            return resp
        resp.framing = "close"
        resp.body = self.read_until_eof()
        return resp

    def is_closed_by_peer(self, timeout=5.0):
        """True if the peer closes (EOF/reset) within ``timeout`` s with no further data.

        Any unexpected data makes it return False (and stays in the buffer)."""
        if self.eof:
            return not self.buf
        if self.buf:
            return False
        old = self.sock.gettimeout()
        try:
            filled = self.fill(deadline=time.monotonic() + timeout)
        finally:
            try:
                self.sock.settimeout(old)
            except OSError:
                pass
        return filled is False

    def read_all_responses(self, method="GET", timeout=5.0):
        """Read responses until EOF or until nothing arrives for ``timeout`` s."""
        self.sock.settimeout(timeout)
        out = []
        while True:
            try:
                resp = self.read_response(method)
            except socket.timeout:
                break
            if resp is None:
                break
            out.append(resp)
        return out


def request_bytes(method, target, headers=None, body=b"", version="HTTP/1.1", host=True):
    lines = ["%s %s %s" % (method, target, version)]
    if host:
        lines.append("Host: test")
    for name, value in headers or []:
        lines.append("%s: %s" % (name, value))
    if body and not any(
        n.lower() in ("content-length", "transfer-encoding") for n, _ in headers or []
    ):
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def raw_request(port, method, target, headers=None, body=b"", version="HTTP/1.1", timeout=10.0):
    """One request on a fresh connection (closed after)."""
    with RawConnection(port, timeout=timeout) as conn:
        conn.send(request_bytes(method, target, headers, body, version))
        return conn.read_response(method)


def assert_healthy(port):
    """A fresh connection gets a normal 200."""
    resp = raw_request(port, "GET", "/hello", [("Connection", "close")])
    assert resp is not None and resp.status == 200 and resp.body == b"hello world", resp


def wait_report(client, rid, predicate=lambda r: r is not None, timeout=15.0):
    """Poll ``GET /report?id=rid`` until ``predicate(report)``; returns the last report."""
    deadline = time.monotonic() + timeout
    report = None
    while time.monotonic() < deadline:
        resp = client.get("/report", params={"id": rid})
        assert resp.status_code == 200, resp.text
        report = resp.json()
        if predicate(report):
            return report
        time.sleep(0.05)
    raise AssertionError("report %r did not become ready; last: %r" % (rid, report))


def connect_refused(port, timeout=1.0):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except ConnectionRefusedError:
        return True
    except OSError:
        return True
    s.close()
    return False


def find_console_script(name="ferrocorn"):
    import shutil

    candidate = os.path.join(os.path.dirname(os.path.abspath(SERVER_PYTHON)), name)
    if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    python_dir = os.path.dirname(shutil.which(SERVER_PYTHON) or SERVER_PYTHON)
    candidate = os.path.join(python_dir, name)
    if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    return shutil.which(name)


def wait_until(predicate, timeout=10.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def ws_sync_connect(uri, **kwargs):
    """``websockets.sync.client.connect`` without the client's keepalive pings.

    The keepalive thread waits by joining the receiving thread, and ``close()`` joins it too;
    PyPy 3.9's ``Thread.join`` is not safe against two joiners at once ("cannot release
    un-acquired lock"), so a test that closes the socket could fail in the test process itself.
    """
    from websockets.sync.client import connect

    kwargs.setdefault("ping_interval", None)
    return connect(uri, **kwargs)
