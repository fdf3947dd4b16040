"""A small blocking HTTP/2 client on top of the ``h2`` library, for tests that need control
over single streams (resets, interleaving, flow control) that httpx does not give.

Runs under CPython and PyPy 3.9 (``h2`` is pure Python).
"""

import socket
import ssl
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

from tests.support.sockets import SocketOwner


class Stream:
    def __init__(self, stream_id):
        self.id = stream_id
        self.headers = None  # list of (str, str), pseudo-headers included
        self.informational = []  # each 1xx response's headers, in order
        self.events = []  # "informational", "response", "data", "end", as they came
        self.data = bytearray()
        self.trailers = None
        self.ended = False
        self.reset = None  # error code when the server reset the stream

    @property
    def status(self):
        for name, value in self.headers or ():
            if name == ":status":
                return int(value)
        return None

    def header(self, name):
        for key, value in self.headers or ():
            if key == name:
                return value
        return None

    @property
    def done(self):
        return self.ended or self.reset is not None


class H2Client(SocketOwner):
    """One HTTP/2 connection: h2c with prior knowledge, or TLS with ALPN ``h2``."""

    def __init__(
        self,
        port,
        host="127.0.0.1",
        tls_context=None,
        server_hostname="localhost",
        timeout=10.0,
        settings=None,
    ):
        raw = socket.create_connection((host, port), timeout=timeout)
        if tls_context is not None:
            self.sock = tls_context.wrap_socket(raw, server_hostname=server_hostname)
            if self.sock.selected_alpn_protocol() != "h2":
                raise AssertionError(f"ALPN chose {self.sock.selected_alpn_protocol()!r}")
            self.scheme = "https"
        else:
            self.sock = raw
            self.scheme = "http"
        self.sock.settimeout(timeout)
        self.authority = f"{server_hostname if tls_context else host}:{port}"
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self._survive_goaway()
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.streams = {}
        self.terminated = None  # the ConnectionTerminated event once the server sent GOAWAY
        self.settings_received = False  # whether the server's first SETTINGS arrived
        # Streams whose window we do not give back (a slow reader); the connection's we do.
        self.held = {}  # stream id -> bytes not given back yet
        self.closed = False
        self.flush()

    def _survive_goaway(self):
        """The h2 library closes its whole connection state on GOAWAY, but RFC 9113 §6.8 lets
        the streams the server already accepted finish (graceful shutdown: hyper sends GOAWAY,
        then a PING, then the responses). Keep the state machine open so they still parse."""
        machine = self.conn.state_machine
        process_input = machine.process_input

        def patched(input_):
            before = machine.state
            events = process_input(input_)
            if input_ is h2.connection.ConnectionInputs.RECV_GOAWAY:
                machine.state = before
            return events

        machine.process_input = patched

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    # ------------------------------------------------------------ requests
    def request(self, method, path, headers=(), body=None, end_stream=True):
        """Open a stream; ``body`` (bytes) is sent respecting flow control."""
        sid = self.conn.get_next_available_stream_id()
        self.streams[sid] = Stream(sid)
        head = [
            (":method", method),
            (":path", path),
            (":scheme", self.scheme),
            (":authority", self.authority),
        ]
        head += list(headers)
        self.conn.send_headers(sid, head, end_stream=end_stream and body is None)
        self.flush()
        if body is not None:
            self.send_body(sid, body, end_stream=end_stream)
        return sid

    def send_body(self, sid, data, end_stream=True, timeout=30.0):
        view = memoryview(data)
        deadline = time.monotonic() + timeout
        while view:
            window = min(
                self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size
            )
            if window <= 0:
                if time.monotonic() > deadline:
                    raise AssertionError("flow-control window stayed closed")
                self.receive_once()
                if self.streams[sid].done:
                    return
                continue
            chunk, view = view[:window], view[window:]
            self.conn.send_data(sid, chunk.tobytes(), end_stream=end_stream and not view)
            self.flush()
        if end_stream and not data:
            self.conn.end_stream(sid)
            self.flush()

    def hold(self, sid):
        """Stop giving ``sid``'s window back, as a client that does not read it would."""
        self.held.setdefault(sid, 0)

    def release(self, sid):
        """Give ``sid``'s window back again, all that it used meanwhile."""
        used = self.held.pop(sid, 0)
        if used > 0:
            self.conn.increment_flow_control_window(used, stream_id=sid)
            self.flush()

    def reset(self, sid, code=h2.errors.ErrorCodes.CANCEL):
        self.conn.reset_stream(sid, error_code=code)
        self.flush()

    # ------------------------------------------------------------ responses
    def receive_once(self):
        """Read once from the socket and process the events; False at EOF."""
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            data = b""
        if not data:
            self.closed = True
            return False
        for event in self.conn.receive_data(data):
            self._handle(event)
        self.flush()
        return True

    def _handle(self, event):
        stream = self.streams.get(getattr(event, "stream_id", None))
        if isinstance(event, h2.events.ResponseReceived):
            stream.headers = list(event.headers)
            stream.events.append("response")
        elif isinstance(event, h2.events.InformationalResponseReceived):
            stream.informational.append(list(event.headers))
            stream.events.append("informational")
        elif isinstance(event, h2.events.DataReceived):
            stream.data += event.data
            stream.events.append("data")
            # Give the window back at once: the tests measure the server, not us.
            if event.stream_id in self.held:
                if event.flow_controlled_length:
                    self.held[event.stream_id] += event.flow_controlled_length
                    self.conn.increment_flow_control_window(event.flow_controlled_length)
            else:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.TrailersReceived):
            stream.trailers = list(event.headers)
        elif isinstance(event, h2.events.StreamEnded):
            stream.ended = True
            stream.events.append("end")
        elif isinstance(event, h2.events.StreamReset):
            if stream is not None:
                stream.reset = event.error_code
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.terminated = event
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self.settings_received = True

    def wait(self, *sids, timeout=20.0):
        """Read until every stream in ``sids`` has ended or been reset."""
        deadline = time.monotonic() + timeout
        while not all(self.streams[s].done for s in sids):
            if time.monotonic() > deadline:
                raise AssertionError(f"streams {sids!r} not done in {timeout:.0f}s")
            if not self.receive_once():
                raise AssertionError(f"connection closed with streams {sids!r} open")
        return [self.streams[s] for s in sids]

    def get(self, path, headers=(), timeout=20.0):
        sid = self.request("GET", path, headers)
        return self.wait(sid, timeout=timeout)[0]


def tls_context(cafile, alpn=("h2",)):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(list(alpn))
    return ctx
