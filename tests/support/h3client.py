"""A small HTTP/3 client on aioquic for the black-box tests: one QUIC connection, requests
on concurrent streams, the raw events kept (headers, data, trailers, resets), and the means
to send what a well-behaved client would not (malformed heads, cancelled streams)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection, HeadersState
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset

H3_NO_ERROR = 0x100
H3_INTERNAL_ERROR = 0x102
H3_REQUEST_CANCELLED = 0x10C
H3_MESSAGE_ERROR = 0x10E


@dataclass
class Exchange:
    """One request stream's answer, as it arrived."""

    stream_id: int
    headers: list[tuple[bytes, bytes]] | None = None
    # 1xx heads (103 Early Hints) before the final one, in order.
    informational: list[list[tuple[bytes, bytes]]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    trailers: list[tuple[bytes, bytes]] | None = None
    reset: int | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    data_seen: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def status(self) -> int:
        assert self.headers is not None, f"no response head (reset {self.reset})"
        return int(dict(self.headers)[b":status"])

    def header(self, name: bytes) -> bytes | None:
        return dict(self.headers or []).get(name)


def _is_informational(headers) -> bool:
    status = dict(headers).get(b":status", b"")
    return len(status) == 3 and status.startswith(b"1")


class _H3Connection(H3Connection):
    """aioquic's H3 layer, which takes a second HEADERS frame for trailers, taught that
    a 1xx head (RFC 9114 §4.1) is followed by another response head."""

    def _handle_request_or_push_frame(self, frame_type, frame_data, stream, stream_ended):
        events = super()._handle_request_or_push_frame(frame_type, frame_data, stream, stream_ended)
        for event in events:
            if (
                isinstance(event, HeadersReceived)
                and stream.headers_recv_state == HeadersState.AFTER_HEADERS
                and _is_informational(event.headers)
            ):
                stream.headers_recv_state = HeadersState.INITIAL
        return events


class H3Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.h3 = _H3Connection(self._quic)
        self.exchanges: dict[int, Exchange] = {}
        self.terminated: ConnectionTerminated | None = None
        self.goaway = False

    def quic_event_received(self, event) -> None:
        if isinstance(event, StreamReset):
            ex = self.exchanges.get(event.stream_id)
            if ex is not None:
                ex.reset = event.error_code
                ex.done.set()
        if isinstance(event, ConnectionTerminated):
            self.terminated = event
            for ex in self.exchanges.values():
                ex.done.set()
        for h3_event in self.h3.handle_event(event):
            ex = self.exchanges.get(getattr(h3_event, "stream_id", -1))
            if ex is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                if ex.headers is None and _is_informational(h3_event.headers):
                    ex.informational.append(list(h3_event.headers))
                elif ex.headers is None:
                    ex.headers = list(h3_event.headers)
                else:
                    ex.trailers = list(h3_event.headers)
            elif isinstance(h3_event, DataReceived):
                ex.body += h3_event.data
                ex.data_seen.set()
            if getattr(h3_event, "stream_ended", False):
                ex.done.set()

    def start(
        self,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]] | None = None,
        body: bytes | None = None,
        raw_head: list[tuple[bytes, bytes]] | None = None,
        end: bool = True,
    ) -> Exchange:
        """Sends a request (``raw_head``: exactly these fields, checks or not)."""
        stream_id = self._quic.get_next_available_stream_id()
        head = raw_head or [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", b"localhost"),
            (b":path", path.encode()),
        ] + list(headers or [])
        ex = Exchange(stream_id)
        self.exchanges[stream_id] = ex
        self.h3.send_headers(stream_id, head, end_stream=end and not body)
        if body:
            self.h3.send_data(stream_id, body, end_stream=end)
        self.transmit()
        return ex

    def send_body(self, ex: Exchange, data: bytes, end: bool = False) -> None:
        self.h3.send_data(ex.stream_id, data, end_stream=end)
        self.transmit()

    def cancel(self, ex: Exchange) -> None:
        """What a browser does when a tab is closed mid-response: both directions stop."""
        with contextlib.suppress(Exception):
            self._quic.stop_stream(ex.stream_id, H3_REQUEST_CANCELLED)
        with contextlib.suppress(Exception):
            self._quic.reset_stream(ex.stream_id, H3_REQUEST_CANCELLED)
        self.transmit()

    async def request(self, method: str, path: str, timeout: float = 20.0, **kwargs) -> Exchange:
        ex = self.start(method, path, **kwargs)
        await asyncio.wait_for(ex.done.wait(), timeout)
        return ex


def client_configuration(ca_file: str) -> QuicConfiguration:
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.load_verify_locations(ca_file)
    config.verify_mode = ssl.CERT_REQUIRED
    config.server_name = "localhost"
    return config


@contextlib.asynccontextmanager
async def h3_connect(port: int, ca_file: str, host: str = "127.0.0.1"):
    async with connect(
        host,
        port,
        configuration=client_configuration(ca_file),
        create_protocol=H3Client,
        wait_connected=True,
    ) as client:
        yield client
