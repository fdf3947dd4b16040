"""Raw HTTP/2 for tests/test_h2_conformance.py: build any frame, valid or not, and read the
server's frames back, so a test can send what the ``h2`` library refuses to send.

Outgoing frames are packed by hand from the RFC 9113 §4.1 layout (so lengths, flags, stream
ids and payloads can be wrong on purpose); header blocks come from ``hpack.Encoder`` or from the
raw HPACK representations below (RFC 7541 §5-§6). Incoming frames are parsed with
``hyperframe`` and their header blocks decoded with one ``hpack.Decoder`` per connection.

How a reaction is judged (``H2Conn.expect_*``):

* connection error with code C (RFC 9113 §5.4.1): a GOAWAY carrying C, after which the server
  MUST close the TCP connection; or the connection closed without a GOAWAY (sending one is
  only a SHOULD). A GOAWAY with another code, a RST_STREAM instead, or no reaction fails.
* stream error with code C on stream S (§5.4.2): RST_STREAM(S, C), or the connection error
  above with code C (§5.4.1: an endpoint MAY treat a stream error as a connection error).
* Frames the server sends before its reaction (a response to a malformed request, which
  §8.1.1 allows, WINDOW_UPDATE, ...) are skipped.

Failures raise a precise ``ConformanceFailure``: ``NoReaction`` (nothing within the timeout),
``Accepted`` (the server showed it took the input as valid), ``Answered`` (a normal response
ended the stream instead of a stream error), ``Closed``, ``NotClosed``, or a ``Got`` subclass
named after the frame and code the server sent instead (``got("GOAWAY", Err.PROTOCOL_ERROR)``).
So a test marked ``xfail(raises=...)`` for one known deviation fails for real when the server
deviates in any other way.
"""

import socket
import struct
import time
from enum import IntEnum

import hpack
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PushPromiseFrame,
    RstStreamFrame,
    SettingsFrame,
)

from tests.support.wire import BufferedSocket

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_WINDOW = 2**31 - 1
REACTION_TIMEOUT = 2.0  # for an error reaction (GOAWAY, RST_STREAM, close)
RESPONSE_TIMEOUT = 5.0  # for responses, PING and SETTINGS ACKs (only spent when failing)


class T(IntEnum):
    """Frame types (RFC 9113 §6)."""

    DATA = 0x0
    HEADERS = 0x1
    PRIORITY = 0x2
    RST_STREAM = 0x3
    SETTINGS = 0x4
    PUSH_PROMISE = 0x5
    PING = 0x6
    GOAWAY = 0x7
    WINDOW_UPDATE = 0x8
    CONTINUATION = 0x9


class F:
    """Frame flags."""

    END_STREAM = 0x1
    ACK = 0x1
    END_HEADERS = 0x4
    PADDED = 0x8
    PRIORITY = 0x20


class Err(IntEnum):
    """Error codes (RFC 9113 §7)."""

    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


class S(IntEnum):
    """SETTINGS parameters (RFC 9113 §6.5.2)."""

    HEADER_TABLE_SIZE = 0x1
    ENABLE_PUSH = 0x2
    MAX_CONCURRENT_STREAMS = 0x3
    INITIAL_WINDOW_SIZE = 0x4
    MAX_FRAME_SIZE = 0x5
    MAX_HEADER_LIST_SIZE = 0x6


def code_name(code):
    try:
        return Err(code).name
    except ValueError:
        return "0x%x" % code


# ---------------------------------------------------------------- failures


class ConformanceFailure(AssertionError):
    pass


class NoReaction(ConformanceFailure):
    """The server did not react within the timeout."""


class Closed(ConformanceFailure):
    """The connection closed (without GOAWAY) where the server should have gone on."""


class NotClosed(ConformanceFailure):
    """A GOAWAY for an error was sent, but the TCP connection stayed open (§5.4.1 MUST)."""


class Accepted(ConformanceFailure):
    """The server showed it took the offending input as valid (e.g. it answered a PING sent
    after it) instead of reacting with an error."""


class Answered(ConformanceFailure):
    """The server ended the stream with a normal response where a stream error was due."""


class Got(ConformanceFailure):
    """The server sent a frame other than the expected one; subclasses name which."""


_GOT = {}


def got(kind, code):
    """The ``Got`` subclass for "the server sent ``kind`` (GOAWAY, RST_STREAM) with ``code``"."""
    name = "Got_%s_%s" % (kind, code_name(code))
    if name not in _GOT:
        _GOT[name] = type(name, (Got,), {})
    return _GOT[name]


def _raise_got(frame, why):
    if isinstance(frame, GoAwayFrame):
        raise got("GOAWAY", frame.error_code)(
            "%s; got GOAWAY(%s, last_stream_id=%d, debug=%r)"
            % (why, code_name(frame.error_code), frame.last_stream_id, frame.additional_data)
        )
    raise got("RST_STREAM", frame.error_code)(
        "%s; got RST_STREAM(stream %d, %s)" % (why, frame.stream_id, code_name(frame.error_code))
    )


# ---------------------------------------------------------------- frames out


def frame(ftype, flags=0, stream_id=0, payload=b"", length=None):
    """One frame; ``length`` overrides the length field, ``stream_id`` may carry the R bit."""
    if length is None:
        length = len(payload)
    return struct.pack(">I", length)[1:] + struct.pack(">BBI", ftype, flags, stream_id) + payload


def _pad(body, pad, pad_length):
    """``body`` behind a Pad Length octet and followed by ``pad`` zero octets; the Pad Length
    field says ``pad_length`` (default: the true padding length)."""
    return bytes([pad if pad_length is None else pad_length]) + body + b"\0" * pad


def data(sid, payload=b"", end_stream=False, pad=None, pad_length=None, flags=0):
    if pad is not None:
        flags |= F.PADDED
        payload = _pad(payload, pad, pad_length)
    return frame(T.DATA, flags | (F.END_STREAM if end_stream else 0), sid, payload)


def priority_fields(dep=0, weight=16, exclusive=False):
    return struct.pack(">IB", dep | (0x80000000 if exclusive else 0), weight - 1)


def headers(
    sid,
    block,
    end_stream=False,
    end_headers=True,
    pad=None,
    pad_length=None,
    priority=None,
    flags=0,
):
    """HEADERS; ``priority`` is (dependency, weight, exclusive)."""
    body = block
    if priority is not None:
        flags |= F.PRIORITY
        body = priority_fields(*priority) + block
    if pad is not None:
        flags |= F.PADDED
        body = _pad(body, pad, pad_length)
    flags |= F.END_STREAM if end_stream else 0
    flags |= F.END_HEADERS if end_headers else 0
    return frame(T.HEADERS, flags, sid, body)


def continuation(sid, block, end_headers=True):
    return frame(T.CONTINUATION, F.END_HEADERS if end_headers else 0, sid, block)


def priority(sid, dep=0, weight=16, exclusive=False):
    return frame(T.PRIORITY, 0, sid, priority_fields(dep, weight, exclusive))


def rst_stream(sid, code=Err.CANCEL):
    return frame(T.RST_STREAM, 0, sid, struct.pack(">I", code))


def settings(*pairs, ack=False, stream_id=0):
    payload = b"".join(struct.pack(">HI", key, value) for key, value in pairs)
    return frame(T.SETTINGS, F.ACK if ack else 0, stream_id, payload)


def ping(opaque=b"\0" * 8, ack=False, stream_id=0, flags=0):
    return frame(T.PING, flags | (F.ACK if ack else 0), stream_id, opaque)


def goaway(last_stream_id=0, code=Err.NO_ERROR, debug=b"", stream_id=0):
    return frame(T.GOAWAY, 0, stream_id, struct.pack(">II", last_stream_id, code) + debug)


def window_update(sid, increment):
    return frame(T.WINDOW_UPDATE, 0, sid, struct.pack(">I", increment))


# ---------------------------------------------------------------- HPACK by hand (RFC 7541)


def hp_int(value, prefix_bits, first=0):
    """An integer with an N-bit prefix (§5.1); ``first`` holds the bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def huffman(raw):
    """The Huffman code (§5.2, Appendix B) of ``raw`` as (bits as an int, bit count)."""
    bits = count = 0
    for byte in raw:
        bits = (bits << REQUEST_CODES_LENGTH[byte]) | REQUEST_CODES[byte]
        count += REQUEST_CODES_LENGTH[byte]
    return bits, count


EOS = (REQUEST_CODES[256], REQUEST_CODES_LENGTH[256])


def huffman_bytes(bits, count, pad_bits=None, pad_value=None):
    """Packs ``count`` bits into octets; the padding is the most significant bits of EOS (all
    ones) unless ``pad_bits``/``pad_value`` say otherwise (for invalid encodings)."""
    if pad_bits is None:
        pad_bits = -count % 8
    if pad_value is None:
        pad_value = (1 << pad_bits) - 1
    bits = (bits << pad_bits) | pad_value
    count += pad_bits
    assert count % 8 == 0, "padding must fill the last octet"
    return bits.to_bytes(count // 8, "big")


def hp_str(raw, huff=False):
    """A string literal (§5.2): H bit, 7-bit-prefix length, octets."""
    if isinstance(raw, str):
        raw = raw.encode("latin-1")
    if huff:
        raw = huffman_bytes(*huffman(raw))
    return hp_int(len(raw), 7, 0x80 if huff else 0) + raw


def hp_huffman_literal(encoded):
    """A Huffman string literal with the given (possibly invalid) encoded octets."""
    return hp_int(len(encoded), 7, 0x80) + encoded


def hp_indexed(index):
    """Indexed header field (§6.1)."""
    return hp_int(index, 7, 0x80)


_LITERAL = {"incremental": (6, 0x40), "without": (4, 0x00), "never": (4, 0x10)}


def hp_literal(name, value, indexing="without", huff=False):
    """Literal header field (§6.2): ``name`` is a str/bytes literal or an int index."""
    bits, first = _LITERAL[indexing]
    if isinstance(name, int):
        return hp_int(name, bits, first) + hp_str(value, huff)
    return hp_int(0, bits, first) + hp_str(name, huff) + hp_str(value, huff)


def hp_size_update(size):
    """Dynamic table size update (§6.3)."""
    return hp_int(size, 5, 0x20)


def raw_block(fields):
    """Every field as a literal without indexing with a literal name: exact bytes, in order,
    and no change to either side's dynamic table."""
    return b"".join(hp_literal(name, value) for name, value in fields)


# Static table indexes used by the tests (RFC 7541 Appendix A).
IDX_AUTHORITY = 1
IDX_METHOD_GET = 2
IDX_PATH_ROOT = 4
IDX_SCHEME_HTTP = 6
IDX_PATH = 4  # name index of ":path"


# ---------------------------------------------------------------- the connection


class Response:
    def __init__(self, sid):
        self.sid = sid
        self.headers = None  # [(name, value)] of the response HEADERS, as str
        self.trailers = None
        self.body = bytearray()
        self.data_frames = []  # payload sizes, in order
        self.ended = False
        self.reset = None  # the RST_STREAM frame, if the server reset the stream
        self.informational = []

    @property
    def status(self):
        return int(dict(self.headers)[":status"])

    def header(self, name):
        for key, value in self.headers or ():
            if key == name:
                return value
        return None


class H2Conn(BufferedSocket):
    """A raw client connection with h2c prior knowledge."""

    def __init__(self, port, host="127.0.0.1", timeout=REACTION_TIMEOUT):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.response_timeout = max(timeout, RESPONSE_TIMEOUT)
        BufferedSocket.__init__(
            self, socket.create_connection((host, port), timeout=self.response_timeout)
        )
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.server_settings = {}
        self.received = []  # every frame read so far, in order
        self.responses = {}  # stream id -> Response, filled as frames arrive
        self._block = None  # (HEADERS/PUSH_PROMISE frame, fragments) while CONTINUATIONs come
        self._ping = 0

    # ------------------------------------------------------------ plumbing
    def send(self, *chunks):
        self.sock.sendall(b"".join(chunks))

    def read_frame(self, timeout=None):
        """The next frame (header blocks joined and decoded: a HEADERS frame gets ``fields``);
        False at EOF, None on timeout."""
        deadline = time.monotonic() + (self.response_timeout if timeout is None else timeout)
        while True:
            ready = self.need(9, deadline)
            if not ready:
                return ready
            f, length = Frame.parse_frame_header(memoryview(bytes(self.buf[:9])))
            ready = self.need(9 + length, deadline)
            if not ready:
                return ready
            body = self.take(9 + length)[9:]
            f.parse_body(memoryview(body))
            self.received.append(f)
            if isinstance(f, (HeadersFrame, PushPromiseFrame)):
                if "END_HEADERS" not in f.flags:
                    self._block = (f, [bytes(f.data)])
                    continue
                f.fields = self._decode(bytes(f.data))
            elif isinstance(f, ContinuationFrame) and self._block is not None:
                first, fragments = self._block
                fragments.append(bytes(f.data))
                if "END_HEADERS" not in f.flags:
                    continue
                self._block = None
                first.fields = self._decode(b"".join(fragments))
                f = first
            elif isinstance(f, SettingsFrame) and "ACK" not in f.flags:
                self.server_settings.update(f.settings)
            self._track(f)
            return f

    def _decode(self, block):
        return [(str(name), str(value)) for name, value in self.decoder.decode(block)]

    # ------------------------------------------------------------ connection setup
    def handshake(self, *settings_pairs, preface=PREFACE):
        """Preface + SETTINGS; waits for the server's SETTINGS (ACKed) and the ACK of ours."""
        self.send(preface, settings(*settings_pairs))
        have_settings = have_ack = False
        deadline = time.monotonic() + self.response_timeout
        while not (have_settings and have_ack):
            f = self.read_frame(deadline - time.monotonic())
            if f is None:
                raise NoReaction("handshake: no SETTINGS/ACK from the server")
            if f is False:
                raise Closed("handshake: connection closed")
            if isinstance(f, SettingsFrame):
                if "ACK" in f.flags:
                    have_ack = True
                else:
                    have_settings = True
                    self.send(settings(ack=True))
            elif isinstance(f, GoAwayFrame):
                _raise_got(f, "handshake")
        return self

    @property
    def max_frame_size(self):
        return self.server_settings.get(S.MAX_FRAME_SIZE, 16384)

    # ------------------------------------------------------------ requests
    def request_fields(self, method="GET", path="/hello", extra=()):
        return [
            (":method", method),
            (":scheme", "http"),
            (":path", path),
            (":authority", "%s:%d" % (self.host, self.port)),
        ] + list(extra)

    def block(self, fields):
        """An HPACK block from this connection's encoder (huffman, incremental indexing)."""
        return self.encoder.encode(fields)

    def request(self, sid, method="GET", path="/hello", extra=(), end_stream=True, body=None):
        """HEADERS (+ one DATA when ``body`` is given) on ``sid``."""
        block = self.block(self.request_fields(method, path, extra))
        if body is None:
            self.send(headers(sid, block, end_stream=end_stream))
        else:
            self.send(headers(sid, block), data(sid, body, end_stream=end_stream))

    # ------------------------------------------------------------ reading reactions
    def _track(self, f):
        """Files HEADERS, DATA and RST_STREAM into the per-stream ``Response``."""
        if not isinstance(f, (HeadersFrame, DataFrame, RstStreamFrame)) or not f.stream_id:
            return
        resp = self.responses.setdefault(f.stream_id, Response(f.stream_id))
        if isinstance(f, RstStreamFrame):
            resp.reset = f
            return
        if isinstance(f, HeadersFrame):
            if resp.headers is None:
                if dict(f.fields).get(":status", "").startswith("1"):
                    resp.informational.append(f.fields)
                else:
                    resp.headers = f.fields
            else:
                resp.trailers = f.fields
        else:
            resp.body += f.data
            resp.data_frames.append(len(f.data))
        if "END_STREAM" in f.flags:
            resp.ended = True

    def response(self, sid, timeout=None):
        """Reads until stream ``sid`` has ended (frames of other streams are kept for their
        own ``response`` calls); a GOAWAY, or a RST_STREAM on ``sid``, raise ``Got``."""
        resp = self.responses.setdefault(sid, Response(sid))
        deadline = time.monotonic() + (self.response_timeout if timeout is None else timeout)
        while not resp.ended:
            if resp.reset is not None:
                _raise_got(resp.reset, "stream %d: expected a response" % sid)
            f = self.read_frame(deadline - time.monotonic())
            if f is None:
                raise NoReaction(
                    "stream %d: response incomplete: %r %r"
                    % (sid, resp.headers, bytes(resp.body[:200]))
                )
            if f is False:
                raise Closed("stream %d: connection closed mid-response" % sid)
            if isinstance(f, GoAwayFrame):
                _raise_got(f, "stream %d: expected a response" % sid)
        return resp

    def sync(self, timeout=None):
        """PING round trip: returns the frames read before the ACK. GOAWAY or RST_STREAM on any
        stream raise ``Got``; so does a close (``Closed``): whatever was sent before was
        accepted without error."""
        self._ping += 1
        opaque = struct.pack(">Q", 0x5EED000000000000 + self._ping)
        self.send(ping(opaque))
        frames = []
        deadline = time.monotonic() + (self.response_timeout if timeout is None else timeout)
        while True:
            f = self.read_frame(deadline - time.monotonic())
            if f is None:
                raise NoReaction("no PING ACK within the timeout")
            if f is False:
                raise Closed("connection closed before the PING ACK")
            if isinstance(f, (GoAwayFrame, RstStreamFrame)):
                _raise_got(f, "expected no error")
            if isinstance(f, PingFrame) and "ACK" in f.flags and bytes(f.opaque_data) == opaque:
                return frames
            frames.append(f)

    def _await_close(self, deadline):
        while True:
            f = self.read_frame(max(deadline - time.monotonic(), 0.01))
            if f is False:
                return
            if f is None:
                raise NotClosed("GOAWAY for an error sent, but the connection stayed open")

    def wait_for(self, predicate, what, timeout=None):
        """Reads until ``predicate(frame)``; returns that frame. GOAWAY or RST_STREAM (unless
        the predicate takes them) raise ``Got``."""
        deadline = time.monotonic() + (self.response_timeout if timeout is None else timeout)
        while True:
            f = self.read_frame(deadline - time.monotonic())
            if f is None:
                raise NoReaction("no %s within the timeout" % what)
            if f is False:
                raise Closed("connection closed while waiting for %s" % what)
            if predicate(f):
                return f
            if isinstance(f, (GoAwayFrame, RstStreamFrame)):
                _raise_got(f, "waiting for %s" % what)

    def expect_error(
        self, sid=None, stream_codes=(), connection_codes=(), answered_fails=False, accepted=None
    ):
        """RST_STREAM(``sid``, one of ``stream_codes``), or GOAWAY with one of
        ``connection_codes`` followed by the close, or a close without GOAWAY. Returns the
        RST_STREAM or GOAWAY frame (None for a bare close).

        ``answered_fails``: the client has ended stream ``sid``, so a server END_STREAM on it
        closes the stream (RFC 9113 §5.1) and no RST_STREAM can follow: raise ``Answered``.
        ``accepted(frame)``: true for a frame that shows the input was taken as valid: raise
        ``Accepted`` at once instead of waiting for the timeout."""
        want = []
        if stream_codes:
            want.append("RST_STREAM(%d, %s)" % (sid, _names(stream_codes)))
        if connection_codes:
            want.append("GOAWAY(%s)" % _names(connection_codes))
        want = "expected " + " or ".join(want)
        deadline = time.monotonic() + self.timeout
        while True:
            f = self.read_frame(deadline - time.monotonic())
            if f is False:
                return None  # closed without GOAWAY: allowed (GOAWAY is a SHOULD, §5.4.1)
            if f is None:
                raise NoReaction(want)
            if accepted is not None and accepted(f):
                raise Accepted("%s; got %r instead" % (want, f))
            if (
                answered_fails
                and f.stream_id == sid
                and "END_STREAM" in f.flags
                and isinstance(f, (HeadersFrame, DataFrame))
            ):
                raise Answered(
                    "stream %d ended with a normal response (%s), no stream error"
                    % (sid, type(f).__name__)
                )
            if isinstance(f, RstStreamFrame):
                if f.stream_id == sid and f.error_code in stream_codes:
                    return f
                if f.stream_id == sid or not stream_codes:
                    _raise_got(f, want)
            if isinstance(f, GoAwayFrame):
                if f.error_code not in connection_codes:
                    _raise_got(f, want)
                self._await_close(time.monotonic() + self.timeout)
                return f

    def expect_connection_error(self, *codes, accepted=None):
        """A connection error with one of ``codes`` (see the module docstring)."""
        return self.expect_error(connection_codes=codes, accepted=accepted)

    def expect_stream_error(self, sid, *codes, answered_fails=False):
        """A stream error on ``sid`` with one of ``codes``, or a connection error with one."""
        return self.expect_error(
            sid, stream_codes=codes, connection_codes=codes, answered_fails=answered_fails
        )


def _names(codes):
    return "/".join(code_name(c) for c in codes)
