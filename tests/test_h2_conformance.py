"""HTTP/2 conformance, black box: h2spec-style cases for RFC 9113 (HTTP/2) and RFC 7541
(HPACK), sent as raw frames over h2c (prior knowledge) to a ``--http 2`` server.

Groups follow h2spec's: "generic" (things that must work), then RFC 9113 by section, then
HPACK. Every case names its RFC section and asserts the exact reaction; what counts as a
connection error or a stream error is spelled out in tests/support/h2frames.py (a GOAWAY
with the code then the close, or a bare close, since GOAWAY is a SHOULD; a stream error may
also be raised as a connection error with the same code, RFC 9113 §5.4.1).

Known deviations from a MUST are ``xfail(strict=True, raises=<the one failure seen>)``: the
``h2`` crate reacting with another error code to HPACK errors (``raises=got(<frame>, <code>)``),
plus pseudo-headers in trailers, which h2 drops before ferrocorn could see them
(``raises=Answered``). Each fails for real if the server deviates in any other way, and XPASSes
(an error, strict) once the deviation is fixed.
"""

import json
import struct
import time

import pytest
from hyperframe.frame import DataFrame, HeadersFrame, PingFrame, SettingsFrame

from tests.support.h2frames import (
    EOS,
    IDX_AUTHORITY,
    IDX_METHOD_GET,
    IDX_PATH,
    IDX_PATH_ROOT,
    IDX_SCHEME_HTTP,
    MAX_WINDOW,
    PREFACE,
    Answered,
    Err,
    F,
    Got,
    H2Conn,
    S,
    T,
    continuation,
    data,
    frame,
    goaway,
    got,
    headers,
    hp_huffman_literal,
    hp_indexed,
    hp_int,
    hp_literal,
    hp_size_update,
    hp_str,
    huffman,
    huffman_bytes,
    ping,
    priority,
    raw_block,
    rst_stream,
    settings,
    window_update,
)
from tests.support.helpers import start_server

APP = "tests.apps.basic:app"

PE = Err.PROTOCOL_ERROR

# The h2 crate (0.4.20) turns every frame it cannot parse into GOAWAY(PROTOCOL_ERROR), where
# RFC 9113 asks for FRAME_SIZE_ERROR or FLOW_CONTROL_ERROR: ferrocorn's guard in front of h2
# (http/h2_frame_rules.rs) answers those frames itself, with the right codes. h2 also maps every
# HPACK decoding error to GOAWAY(PROTOCOL_ERROR) (header_block! macro), which stays.
H2_HPACK = (
    "h2 0.4.20 codec/framed_read.rs maps HPACK decoding errors to GOAWAY(PROTOCOL_ERROR), "
    "not COMPRESSION_ERROR (RFC 9113 §4.3, RFC 7541 §2.3.3/§4.2/§5.2/§6.1/§6.3)"
)


def deviation(kind, code, reason):
    return pytest.mark.xfail(strict=True, raises=got(kind, code), reason=reason)


@pytest.fixture(scope="module")
def server():
    srv = start_server(APP, "--http", "2")
    yield srv
    srv.close()
    out = srv.output()
    assert "panicked" not in out, out[-4000:]


@pytest.fixture
def conn(server):
    c = H2Conn(server.port).handshake()
    yield c
    c.close()


def connect(server, *settings_pairs):
    return H2Conn(server.port).handshake(*settings_pairs)


def authority(c):
    return "%s:%d" % (c.host, c.port)


def base_block(c, path="/scope"):
    """GET ``path`` from static-table indexes and literals without indexing: touches no
    dynamic table."""
    return (
        hp_indexed(IDX_METHOD_GET)
        + hp_indexed(IDX_SCHEME_HTTP)
        + hp_literal(IDX_PATH, path)
        + hp_literal(IDX_AUTHORITY, authority(c))
    )


def scope_headers(c, sid, block):
    """Sends a GET whose block is ``block`` (for /scope) and returns the headers the app saw."""
    c.send(headers(sid, block, end_stream=True))
    resp = c.response(sid)
    assert resp.status == 200, (resp.headers, bytes(resp.body))
    return [tuple(h) for h in json.loads(bytes(resp.body))["headers"]]


def open_stream(c, sid, path="/echo"):
    """A request whose body never comes: the stream stays open on both sides."""
    c.request(sid, "POST", path, end_stream=False)


def half_closed_remote(c, sid, tag):
    """A complete request the app never answers (until the client goes): the stream is
    half-closed (remote) for the server."""
    c.request(sid, "GET", "/wait_disconnect?id=conf-%s" % tag)


def echo(resp):
    assert resp.status == 200, (resp.headers, bytes(resp.body))
    return json.loads(bytes(resp.body))


# ======================================================================== generic


def test_generic_server_preface_is_settings(server):
    """RFC 9113 §3.4: the server connection preface is a SETTINGS frame, the first frame it
    sends, on stream 0; §8.4: a server MUST NOT set SETTINGS_ENABLE_PUSH to anything but 0."""
    with H2Conn(server.port) as c:
        c.send(PREFACE, settings())
        first = c.read_frame()
        assert isinstance(first, SettingsFrame), first
        assert "ACK" not in first.flags and first.stream_id == 0
        assert first.settings.get(S.ENABLE_PUSH, 0) == 0


def test_generic_get(conn):
    """RFC 9113 §8.1: a GET with END_STREAM on its HEADERS gets a complete response."""
    conn.request(1, "GET", "/hello")
    resp = conn.response(1)
    assert resp.status == 200
    assert bytes(resp.body) == b"hello world"
    assert resp.header("content-length") == "11"


def test_generic_head(conn):
    """RFC 9110 §9.3.2 over RFC 9113 §8.1: a HEAD response carries no content."""
    conn.request(1, "HEAD", "/hello")
    resp = conn.response(1)
    assert resp.status == 200
    assert bytes(resp.body) == b"" and not any(resp.data_frames)


def test_generic_post_one_data_frame(conn):
    """RFC 9113 §6.1: a body in one DATA frame with END_STREAM."""
    conn.request(1, "POST", "/echo", [("content-length", "5")], body=b"hello")
    assert echo(conn.response(1))["body"] == "hello"


def test_generic_post_multiple_data_frames(conn):
    """RFC 9113 §6.1/§8.1.1: several DATA frames; content-length equals their sum."""
    conn.request(1, "POST", "/echo", [("content-length", "9")], end_stream=False)
    conn.send(data(1, b"abc"), data(1, b"def"), data(1, b"ghi", end_stream=True))
    assert echo(conn.response(1))["body"] == "abcdefghi"


def test_generic_post_padded_data(conn):
    """RFC 9113 §6.1: padding is not part of the content."""
    conn.request(1, "POST", "/echo", end_stream=False)
    conn.send(data(1, b"padded", pad=20), data(1, b"", pad=0, end_stream=True))
    assert echo(conn.response(1))["body"] == "padded"


def test_generic_post_empty_final_data_frame(conn):
    """RFC 9113 §6.1: a zero-length DATA frame that only carries END_STREAM."""
    conn.request(1, "POST", "/echo", end_stream=False)
    conn.send(data(1, b"x"), data(1, b"", end_stream=True))
    assert echo(conn.response(1))["body"] == "x"


def test_generic_post_with_trailers(conn):
    """RFC 9113 §8.1: HEADERS, DATA, then a trailer HEADERS frame with END_STREAM."""
    conn.request(1, "POST", "/echo", end_stream=False)
    trailer = conn.block([("x-checksum", "abc")])
    conn.send(data(1, b"body"), headers(1, trailer, end_stream=True))
    assert echo(conn.response(1))["body"] == "body"


@pytest.mark.parametrize(
    "kwargs",
    [{"pad": 33}, {"priority": (0, 255, False)}, {"pad": 4, "priority": (0, 1, True)}],
    ids=["padded", "priority", "padded+priority"],
)
def test_generic_headers_with_padding_and_priority(conn, kwargs):
    """RFC 9113 §6.2: HEADERS with the PADDED and/or PRIORITY flags."""
    block = conn.block(conn.request_fields("GET", "/hello"))
    conn.send(headers(1, block, end_stream=True, **kwargs))
    assert bytes(conn.response(1).body) == b"hello world"


@pytest.mark.parametrize("count", [1, 4])
def test_generic_continuation(conn, count):
    """RFC 9113 §6.10: a field block split over HEADERS and ``count`` CONTINUATION frames,
    cut in the middle of field representations."""
    block = conn.block(conn.request_fields("GET", "/scope", [("x-long", "v" * 300)]))
    step = len(block) // (count + 1) + 1
    pieces = [block[i : i + step] for i in range(0, len(block), step)]
    assert len(pieces) == count + 1
    frames = [headers(1, pieces[0], end_stream=True, end_headers=False)]
    for i, piece in enumerate(pieces[1:]):
        frames.append(continuation(1, piece, end_headers=i == count - 1))
    conn.send(*frames)
    resp = conn.response(1)
    assert ["x-long", "v" * 300] in json.loads(bytes(resp.body))["headers"]


def test_generic_interleaved_streams(conn):
    """RFC 9113 §5: streams are multiplexed; DATA frames of three requests interleave."""
    for sid in (1, 3, 5):
        conn.request(sid, "POST", "/echo", end_stream=False)
    conn.send(
        data(5, b"5a"),
        data(1, b"1a"),
        data(3, b"3a"),
        data(3, b"3b", end_stream=True),
        data(1, b"1b", end_stream=True),
        data(5, b"5b", end_stream=True),
    )
    bodies = {sid: echo(conn.response(sid))["body"] for sid in (5, 3, 1)}
    assert bodies == {1: "1a1b", 3: "3a3b", 5: "5a5b"}


def test_generic_ping_is_acknowledged(conn):
    """RFC 9113 §6.7: a PING gets a PING with ACK and the identical payload, on stream 0."""
    conn.send(ping(b"h2spec!!"))
    reply = conn.wait_for(lambda f: isinstance(f, PingFrame), "PING ACK")
    assert "ACK" in reply.flags and reply.stream_id == 0
    assert bytes(reply.opaque_data) == b"h2spec!!"


@pytest.mark.parametrize(
    "param,value",
    [
        (S.HEADER_TABLE_SIZE, 4096),
        (S.ENABLE_PUSH, 0),
        (S.MAX_CONCURRENT_STREAMS, 100),
        (S.INITIAL_WINDOW_SIZE, 65535),
        (S.MAX_FRAME_SIZE, 16384),
        (S.MAX_HEADER_LIST_SIZE, 65536),
    ],
    ids=lambda v: v.name if isinstance(v, S) else str(v),
)
def test_generic_settings_are_acknowledged(conn, param, value):
    """RFC 9113 §6.5.3: every SETTINGS frame without ACK is acknowledged."""
    conn.send(settings((param, value)))
    conn.wait_for(lambda f: isinstance(f, SettingsFrame) and "ACK" in f.flags, "SETTINGS ACK")
    conn.request(1)
    assert conn.response(1).status == 200


@pytest.mark.parametrize(
    "prio",
    [(0, 1, False), (0, 256, False), (1, 16, False), (1, 16, True)],
    ids=["weight1", "weight256", "dependency", "exclusive"],
)
def test_generic_priority_on_idle_stream_then_lower_stream(conn, prio):
    """RFC 9113 §5.1/§6.3: PRIORITY may be sent for an idle stream and opens nothing, so a
    HEADERS frame on a lower stream id afterwards is still a valid new stream."""
    conn.send(priority(9, *prio))
    conn.sync()
    conn.request(1)
    assert conn.response(1).status == 200


@pytest.mark.parametrize("code", [Err.CANCEL, 0xFF], ids=["CANCEL", "unknown-code"])
def test_generic_rst_stream_cancels_one_stream(conn, code):
    """RFC 9113 §6.4: RST_STREAM ends only its stream; the connection goes on. §7: an unknown
    error code MUST NOT trigger any special behavior."""
    half_closed_remote(conn, 1, "rst-%d" % code)
    conn.send(rst_stream(1, code))
    conn.sync()
    conn.request(3)
    assert bytes(conn.response(3).body) == b"hello world"


def test_generic_window_update(conn):
    """RFC 9113 §6.9: WINDOW_UPDATE on the connection and on an open stream."""
    open_stream(conn, 1)
    conn.send(window_update(0, 1000), window_update(1, 1000))
    conn.sync()
    conn.send(data(1, b"ok", end_stream=True))
    assert echo(conn.response(1))["body"] == "ok"


@pytest.mark.parametrize("code", [Err.NO_ERROR, 0xFF], ids=["NO_ERROR", "unknown-code"])
def test_generic_client_goaway_leaves_its_streams_alone(conn, code):
    """RFC 9113 §6.8: a client's GOAWAY names the last *server-initiated* stream it processed
    (0: none); it says nothing against the client's own open requests, which complete. §7: an
    unknown error code MUST NOT trigger any special behavior."""
    conn.request(1, "GET", "/slow?s=0.2")
    conn.send(goaway(0, code))
    resp = conn.response(1)
    assert resp.status == 200 and bytes(resp.body) == b"slept 0.2"


def test_generic_h2c_through_protocol_detection(server_factory):
    """The default --http auto mode sniffs the preface, then hands the same bytes to the
    HTTP/2 implementation: requests, PING and error handling work as with --http 2."""
    auto = server_factory(APP)
    with H2Conn(auto.port).handshake() as c:
        c.request(1)
        assert bytes(c.response(1).body) == b"hello world"
        c.sync()
        c.send(data(0, b"x"))  # RFC 9113 §6.1: connection error PROTOCOL_ERROR
        c.expect_connection_error(PE)


# ======================================================================== 3.4 preface


def test_3_4_invalid_preface(server):
    """RFC 9113 §3.4: an invalid connection preface is a connection error PROTOCOL_ERROR;
    the GOAWAY MAY be omitted."""
    with H2Conn(server.port) as c:
        c.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", settings())
        c.expect_connection_error(PE)


def test_3_4_preface_not_followed_by_settings(server):
    """RFC 9113 §3.4: the client preface MUST be followed by a SETTINGS frame; anything else
    is an invalid preface, a connection error PROTOCOL_ERROR."""
    with H2Conn(server.port) as c:
        c.send(PREFACE, ping(b"notfirst"))
        c.expect_connection_error(PE, accepted=lambda f: isinstance(f, PingFrame))


# ======================================================================== 4.1 frame format


@pytest.mark.parametrize("sid", [0, 1, 7], ids=["stream0", "open-stream", "idle-stream"])
def test_4_1_unknown_frame_type_is_ignored(conn, sid):
    """RFC 9113 §4.1/§5.5: frames of unknown type MUST be ignored and discarded, on any
    stream."""
    if sid == 1:
        open_stream(conn, 1)
    conn.send(frame(0xFA, 0xFF, sid, b"extension payload"))
    conn.sync()
    if sid == 1:
        conn.send(data(1, b"after", end_stream=True))
        assert echo(conn.response(1))["body"] == "after"


def test_4_1_undefined_flags_are_ignored(conn):
    """RFC 9113 §4.1: flags with no defined meaning for a frame type MUST be ignored."""
    conn.send(ping(b"flagged!", flags=0xFE))
    reply = conn.wait_for(lambda f: isinstance(f, PingFrame), "PING ACK")
    assert "ACK" in reply.flags and bytes(reply.opaque_data) == b"flagged!"
    # HEADERS: 0x02, 0x10, 0x40, 0x80 are undefined; DATA: everything but 0x1 and 0x8.
    conn.send(
        headers(1, conn.block(conn.request_fields("POST", "/echo")), flags=0xD2),
        data(1, b"flags", end_stream=True, flags=0xF6),
    )
    assert echo(conn.response(1))["body"] == "flags"


def test_4_1_reserved_bit_is_ignored(conn):
    """RFC 9113 §4.1: the reserved bit of the stream identifier MUST be ignored on receipt."""
    conn.send(ping(b"reserved", stream_id=0x80000000))
    reply = conn.wait_for(lambda f: isinstance(f, PingFrame), "PING ACK")
    assert bytes(reply.opaque_data) == b"reserved"
    conn.send(headers(0x80000001, conn.block(conn.request_fields()), end_stream=True))
    assert bytes(conn.response(1).body) == b"hello world"


# ======================================================================== 4.2 frame size


def test_4_2_data_of_max_frame_size(conn):
    """RFC 9113 §4.2: a frame of exactly SETTINGS_MAX_FRAME_SIZE octets is valid."""
    size = conn.max_frame_size
    conn.request(1, "POST", "/echo", end_stream=False)
    conn.send(data(1, b"m" * size, end_stream=True))
    assert echo(conn.response(1))["size"] == size


def test_4_2_data_over_max_frame_size(conn):
    """RFC 9113 §4.2: a frame over SETTINGS_MAX_FRAME_SIZE is a FRAME_SIZE_ERROR (a stream
    error is enough for DATA)."""
    open_stream(conn, 1)
    conn.send(data(1, b"m" * (conn.max_frame_size + 1), end_stream=True))
    conn.expect_stream_error(1, Err.FRAME_SIZE_ERROR)


def test_4_2_headers_over_max_frame_size(conn):
    """RFC 9113 §4.2: a HEADERS frame over SETTINGS_MAX_FRAME_SIZE alters the connection
    state (HPACK): it MUST be a connection error FRAME_SIZE_ERROR."""
    big = [("x-big-%d" % i, "b" * 1000) for i in range(20)]
    block = raw_block(conn.request_fields("GET", "/hello", big))
    assert len(block) > conn.max_frame_size
    conn.send(headers(1, block, end_stream=True))
    conn.expect_connection_error(Err.FRAME_SIZE_ERROR)


# ======================================================================== 4.3 header compression


@deviation("GOAWAY", PE, H2_HPACK)
def test_4_3_invalid_header_block(conn):
    """RFC 9113 §4.3: a field block that fails to decode is a connection error
    COMPRESSION_ERROR (here: a literal whose string runs past the end of the block)."""
    block = base_block(conn, "/hello") + b"\x00\x05x-bad\x10ab"
    conn.send(headers(1, block, end_stream=True))
    conn.expect_connection_error(Err.COMPRESSION_ERROR)


INTERLEAVED = {
    "priority-same-stream": lambda: priority(1, 0, 16),
    "headers-other-stream": lambda: headers(3, raw_block([(":method", "GET")]), end_stream=True),
    "data-same-stream": lambda: data(1, b"x"),
    "ping": lambda: ping(b"12345678"),
    "window-update": lambda: window_update(0, 100),
    "rst-stream-other-stream": lambda: rst_stream(3),
    "unknown-extension": lambda: frame(0xFA, 0, 1, b"extension"),
}


@pytest.mark.parametrize("kind", sorted(INTERLEAVED))
def test_4_3_frame_inside_header_block(conn, kind):
    """RFC 9113 §4.3/§6.2/§6.10 (and §5.5 for extension frames): a field block is a
    contiguous sequence of frames; any other frame before END_HEADERS is a connection error
    PROTOCOL_ERROR."""
    block = raw_block(conn.request_fields("POST", "/echo"))
    conn.send(
        headers(1, block[:10], end_headers=False), INTERLEAVED[kind](), continuation(1, block[10:])
    )
    conn.expect_connection_error(PE)


def test_4_3_hpack_state_survives_a_malformed_request(conn):
    """RFC 9113 §4.3/§8.1.1: a malformed request is a stream error, but its field block still
    updates the decoder's dynamic table; the next request may refer to the entries it added."""
    bad = (
        base_block(conn, "/hello")
        + hp_literal("x-kept", "kept-value", "incremental")
        + hp_literal("te", "gzip")
    )  # malformed: TE other than "trailers" (§8.2.2)
    conn.send(headers(1, bad, end_stream=True))
    reaction = conn.expect_stream_error(1, PE, answered_fails=True)
    if reaction is None or reaction.type == T.GOAWAY:
        return  # treated as a connection error: allowed, and nothing left to check
    seen = scope_headers(conn, 3, base_block(conn) + hp_indexed(62))
    assert ("x-kept", "kept-value") in seen


# ======================================================================== 5.1 stream states


IDLE = {
    "data": lambda: data(1, b"x", end_stream=True),
    "rst_stream": lambda: rst_stream(1, Err.CANCEL),  # also §6.4
    "window_update": lambda: window_update(1, 100),
    "continuation": lambda: continuation(1, raw_block([(":method", "GET")])),
}


@pytest.mark.parametrize("kind", sorted(IDLE))
def test_5_1_frame_on_idle_stream(conn, kind):
    """RFC 9113 §5.1 (idle): any frame but HEADERS or PRIORITY on an idle stream is a
    connection error PROTOCOL_ERROR (§6.4 repeats it for RST_STREAM, §6.10 for
    CONTINUATION)."""
    conn.send(IDLE[kind]())
    conn.expect_connection_error(PE)


def test_5_1_data_on_half_closed_remote_stream(conn):
    """RFC 9113 §5.1 (half-closed (remote)) and §6.1: DATA after the client's END_STREAM is a
    stream error STREAM_CLOSED."""
    half_closed_remote(conn, 1, "hc-data")
    conn.sync()
    conn.send(data(1, b"late"))
    conn.expect_stream_error(1, Err.STREAM_CLOSED)


def test_5_1_headers_on_half_closed_remote_stream(conn):
    """RFC 9113 §5.1 (half-closed (remote)): a further HEADERS frame is a stream error
    STREAM_CLOSED."""
    half_closed_remote(conn, 1, "hc-headers")
    conn.sync()
    conn.send(headers(1, raw_block([("x-late", "1")]), end_stream=True))
    conn.expect_stream_error(1, Err.STREAM_CLOSED)


def test_5_1_continuation_on_half_closed_remote_stream(conn):
    """RFC 9113 §5.1/§6.10: a CONTINUATION on a half-closed (remote) stream: a stream error
    STREAM_CLOSED (§5.1), or a connection error PROTOCOL_ERROR since no field block is open
    (§6.10). Both are accepted."""
    half_closed_remote(conn, 1, "hc-cont")
    conn.sync()
    conn.send(continuation(1, raw_block([("x-late", "1")])))
    conn.expect_error(
        1, stream_codes=(Err.STREAM_CLOSED,), connection_codes=(Err.STREAM_CLOSED, PE)
    )


def test_5_1_allowed_frames_on_half_closed_remote_stream(conn):
    """RFC 9113 §5.1 (half-closed (remote)): WINDOW_UPDATE, PRIORITY and RST_STREAM are
    still allowed; the first two do not disturb the response."""
    conn.request(1, "GET", "/slow?s=0.2")
    conn.send(window_update(1, 1000), priority(1, 0, 100))
    assert conn.response(1).status == 200
    half_closed_remote(conn, 3, "hc-rst")
    conn.sync()
    conn.send(rst_stream(3, Err.CANCEL))
    conn.sync()


def closed_by_rst(c):
    open_stream(c, 1, "/wait_disconnect?id=conf-closed-rst")
    c.send(rst_stream(1, Err.CANCEL))
    c.sync()


def closed_by_end_stream(c):
    c.request(1)
    c.response(1)


@pytest.mark.parametrize(
    "close", [closed_by_rst, closed_by_end_stream], ids=["after-rst", "after-end-stream"]
)
def test_5_1_data_on_closed_stream(conn, close):
    """RFC 9113 §5.1 (closed) and §6.1: DATA on a closed stream is STREAM_CLOSED: a stream
    error after RST_STREAM, a connection error after END_STREAM (§6.1 says stream error;
    either is accepted for both)."""
    close(conn)
    conn.send(data(1, b"late", end_stream=True))
    conn.expect_stream_error(1, Err.STREAM_CLOSED)


@pytest.mark.parametrize(
    "close", [closed_by_rst, closed_by_end_stream], ids=["after-rst", "after-end-stream"]
)
def test_5_1_headers_on_closed_stream(conn, close):
    """RFC 9113 §5.1 (closed): HEADERS on a closed stream is STREAM_CLOSED (stream error after
    RST_STREAM, connection error after END_STREAM); it is also a reused, non-increasing stream
    id, which §5.1.1 makes a connection error PROTOCOL_ERROR. Those are accepted."""
    close(conn)
    conn.send(headers(1, conn.block(conn.request_fields()), end_stream=True))
    conn.expect_error(
        1, stream_codes=(Err.STREAM_CLOSED,), connection_codes=(Err.STREAM_CLOSED, PE)
    )


@pytest.mark.parametrize(
    "close", [closed_by_rst, closed_by_end_stream], ids=["after-rst", "after-end-stream"]
)
def test_5_1_continuation_on_closed_stream(conn, close):
    """RFC 9113 §5.1/§6.10: CONTINUATION on a closed stream: STREAM_CLOSED, or a connection
    error PROTOCOL_ERROR as no field block is open."""
    close(conn)
    conn.send(continuation(1, raw_block([("x-late", "1")])))
    conn.expect_error(
        1, stream_codes=(Err.STREAM_CLOSED,), connection_codes=(Err.STREAM_CLOSED, PE)
    )


@pytest.mark.parametrize(
    "late",
    [lambda: window_update(1, 100), lambda: rst_stream(1, Err.CANCEL), lambda: priority(1)],
    ids=["window_update", "rst_stream", "priority"],
)
def test_5_1_frames_ignored_on_recently_closed_stream(conn, late):
    """RFC 9113 §5.1 (closed): WINDOW_UPDATE or RST_STREAM received just after sending
    END_STREAM MUST be ignored; PRIORITY is allowed on closed streams."""
    closed_by_end_stream(conn)
    conn.send(late())
    conn.sync()
    conn.request(3)
    assert conn.response(3).status == 200


# ======================================================================== 5.1.1 stream identifiers


def test_5_1_1_even_stream_id(conn):
    """RFC 9113 §5.1.1: a client-initiated stream MUST use an odd identifier; an unexpected
    identifier is a connection error PROTOCOL_ERROR."""
    conn.send(headers(2, conn.block(conn.request_fields()), end_stream=True))
    conn.expect_connection_error(PE)


def test_5_1_1_decreasing_stream_id(conn):
    """RFC 9113 §5.1.1: a new stream id MUST be greater than all the client opened before."""
    conn.request(5)
    assert conn.response(5).status == 200
    conn.send(headers(3, conn.block(conn.request_fields()), end_stream=True))
    conn.expect_connection_error(PE)


# ======================================================================== 5.1.2 concurrency


def test_5_1_2_exceeding_max_concurrent_streams(conn):
    """RFC 9113 §5.1.2: a HEADERS frame over the advertised SETTINGS_MAX_CONCURRENT_STREAMS
    is a stream error PROTOCOL_ERROR or REFUSED_STREAM."""
    limit = conn.server_settings.get(S.MAX_CONCURRENT_STREAMS)
    assert limit is not None and 0 < limit <= 1000, limit
    conn.send(
        *[
            headers(2 * i + 1, conn.block(conn.request_fields("POST", "/echo")))
            for i in range(limit)
        ]
    )
    over = 2 * limit + 1
    conn.send(headers(over, conn.block(conn.request_fields()), end_stream=True))
    conn.expect_stream_error(over, PE, Err.REFUSED_STREAM)


# ======================================================================== 5.3 priority


def test_5_3_1_headers_depending_on_itself(conn):
    """RFC 7540 §5.3.1: a stream cannot depend on itself: stream error PROTOCOL_ERROR."""
    conn.send(
        headers(1, conn.block(conn.request_fields()), end_stream=True, priority=(1, 16, False))
    )
    conn.expect_stream_error(1, PE)


def test_5_3_1_priority_depending_on_itself(conn):
    """RFC 7540 §5.3.1: a PRIORITY frame making a stream depend on itself: stream error
    PROTOCOL_ERROR."""
    half_closed_remote(conn, 1, "prio-self")
    conn.sync()
    conn.send(priority(1, 1, 16))
    conn.expect_stream_error(1, PE)


# ======================================================================== 5.4 error handling


def test_5_4_1_connection_error_goaway_then_close(conn):
    """RFC 9113 §5.4.1/§6.8: after a connection error the server sends GOAWAY naming the last
    stream it processed (3 here), then closes the TCP connection."""
    conn.request(1)
    conn.request(3)
    conn.response(1)
    conn.response(3)
    conn.send(ping(b"12345678", stream_id=1))  # PING on a stream: PROTOCOL_ERROR (§6.7)
    goaway_frame = conn.expect_connection_error(PE)
    assert goaway_frame is not None, "closed without GOAWAY"
    assert goaway_frame.last_stream_id == 3


def test_5_4_2_stream_error_leaves_other_streams(conn):
    """RFC 9113 §5.4.2: after a stream error (RST_STREAM), other streams go on; if the server
    chose a connection error instead (allowed, §5.4.1) there is nothing more to check."""
    conn.request(1, "POST", "/echo", end_stream=False)
    conn.send(headers(3, raw_block(conn.request_fields() + [("te", "gzip")]), end_stream=True))
    reaction = conn.expect_stream_error(3, PE, answered_fails=True)
    if reaction is None or reaction.type == T.GOAWAY:
        return
    conn.send(data(1, b"still here", end_stream=True))
    assert echo(conn.response(1))["body"] == "still here"


# ======================================================================== 6.1 DATA


def test_6_1_data_on_stream_0(conn):
    """RFC 9113 §6.1: DATA on stream 0 is a connection error PROTOCOL_ERROR."""
    conn.send(data(0, b"x"))
    conn.expect_connection_error(PE)


@pytest.mark.parametrize("excess", [0, 5], ids=["pad-equals-payload", "pad-exceeds-payload"])
def test_6_1_data_padding_too_long(conn, excess):
    """RFC 9113 §6.1: a Pad Length of the payload length or more is a connection error
    PROTOCOL_ERROR."""
    open_stream(conn, 1)
    # Payload: Pad Length octet + 3 data octets; Pad Length says 4 (+ excess).
    conn.send(data(1, b"abc", pad=0, pad_length=4 + excess))
    conn.expect_connection_error(PE)


# ======================================================================== 6.2 HEADERS


def test_6_2_headers_on_stream_0(conn):
    """RFC 9113 §6.2: HEADERS on stream 0 is a connection error PROTOCOL_ERROR."""
    conn.send(headers(0, raw_block(conn.request_fields()), end_stream=True))
    conn.expect_connection_error(PE)


def test_6_2_headers_padding_too_long(conn):
    """RFC 9113 §6.2: padding that is the payload length or more is a connection error
    PROTOCOL_ERROR."""
    block = raw_block(conn.request_fields())
    # The payload is the Pad Length octet + the block: a Pad Length equal to it.
    conn.send(headers(1, block, end_stream=True, pad=0, pad_length=len(block) + 1))
    conn.expect_connection_error(PE)


# ======================================================================== 6.3 PRIORITY


def test_6_3_priority_on_stream_0(conn):
    """RFC 9113 §6.3: PRIORITY on stream 0 is a connection error PROTOCOL_ERROR."""
    conn.send(priority(0, 1, 16))
    conn.expect_connection_error(PE)


def test_6_3_priority_wrong_length(conn):
    """RFC 9113 §6.3: a PRIORITY frame whose length is not 5 is a stream error
    FRAME_SIZE_ERROR."""
    half_closed_remote(conn, 1, "prio-len")
    conn.sync()
    conn.send(frame(T.PRIORITY, 0, 1, b"\0\0\0\0"))
    conn.expect_stream_error(1, Err.FRAME_SIZE_ERROR)


# ======================================================================== 6.4 RST_STREAM


def test_6_4_rst_stream_on_stream_0(conn):
    """RFC 9113 §6.4: RST_STREAM on stream 0 is a connection error PROTOCOL_ERROR."""
    conn.send(rst_stream(0, Err.CANCEL))
    conn.expect_connection_error(PE)


@pytest.mark.parametrize("length", [3, 5])
def test_6_4_rst_stream_wrong_length(conn, length):
    """RFC 9113 §6.4: a RST_STREAM whose length is not 4 is a connection error
    FRAME_SIZE_ERROR."""
    half_closed_remote(conn, 1, "rst-len-%d" % length)
    conn.sync()
    conn.send(frame(T.RST_STREAM, 0, 1, b"\0" * length))
    conn.expect_connection_error(Err.FRAME_SIZE_ERROR)


# ======================================================================== 6.5 SETTINGS


def test_6_5_settings_ack_with_payload(conn):
    """RFC 9113 §6.5: a SETTINGS ACK with a payload is a connection error FRAME_SIZE_ERROR."""
    conn.send(settings((S.INITIAL_WINDOW_SIZE, 65535), ack=True))
    conn.expect_connection_error(Err.FRAME_SIZE_ERROR)


def test_6_5_settings_on_a_stream(conn):
    """RFC 9113 §6.5: SETTINGS on a stream other than 0 is a connection error
    PROTOCOL_ERROR."""
    conn.send(settings((S.INITIAL_WINDOW_SIZE, 65535), stream_id=1))
    conn.expect_connection_error(PE)


def test_6_5_settings_length_not_multiple_of_6(conn):
    """RFC 9113 §6.5: a SETTINGS length that is not a multiple of 6 is a connection error
    FRAME_SIZE_ERROR."""
    conn.send(frame(T.SETTINGS, 0, 0, struct.pack(">HI", S.ENABLE_PUSH, 0)[:5]))
    conn.expect_connection_error(Err.FRAME_SIZE_ERROR)


def test_6_5_2_enable_push_invalid(conn):
    """RFC 9113 §6.5.2: SETTINGS_ENABLE_PUSH other than 0 or 1 is a connection error
    PROTOCOL_ERROR."""
    conn.send(settings((S.ENABLE_PUSH, 2)))
    conn.expect_connection_error(PE)


@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
def test_6_5_2_initial_window_size_too_large(conn, split):
    """RFC 9113 §6.5.2: SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 is a connection error
    FLOW_CONTROL_ERROR; also when the frame arrives in pieces (sent apart, so the server most
    likely reads them apart: the answer must be the same either way)."""
    frame_bytes = settings((S.MAX_CONCURRENT_STREAMS, 10), (S.INITIAL_WINDOW_SIZE, 2**31))
    if not split:
        conn.send(frame_bytes)
    else:
        for piece in (frame_bytes[:5], frame_bytes[5:13], frame_bytes[13:]):
            conn.send(piece)
            time.sleep(0.05)
    conn.expect_connection_error(Err.FLOW_CONTROL_ERROR)


@pytest.mark.parametrize("value", [16383, 2**24], ids=["below-2^14", "above-2^24-1"])
def test_6_5_2_max_frame_size_out_of_range(conn, value):
    """RFC 9113 §6.5.2: SETTINGS_MAX_FRAME_SIZE outside 2^14..2^24-1 is a connection error
    PROTOCOL_ERROR."""
    conn.send(settings((S.MAX_FRAME_SIZE, value)))
    conn.expect_connection_error(PE)


def test_6_5_2_unknown_setting_is_ignored(conn):
    """RFC 9113 §6.5.2: an unknown or unsupported setting MUST be ignored (and the frame
    acknowledged)."""
    conn.send(settings((0xFF, 1), (0x7A7A, 0xFFFFFFFF)))
    conn.wait_for(lambda f: isinstance(f, SettingsFrame) and "ACK" in f.flags, "SETTINGS ACK")
    conn.request(1)
    assert conn.response(1).status == 200


def test_6_5_3_values_are_processed_in_order(server):
    """RFC 9113 §6.5.3: values in one SETTINGS frame are processed in order, so of two
    INITIAL_WINDOW_SIZE values the last (1) holds: the response comes one octet at a time."""
    with connect(server, (S.INITIAL_WINDOW_SIZE, 100), (S.INITIAL_WINDOW_SIZE, 1)) as c:
        c.request(1)
        first = c.wait_for(lambda f: isinstance(f, DataFrame) and f.data, "DATA")
        assert bytes(first.data) == b"h"
        assert not [f for f in c.sync() if isinstance(f, DataFrame) and f.data]
        c.send(window_update(1, 100))
        assert bytes(c.response(1).body) == b"hello world"


def test_6_5_2_field_block_over_max_header_list_size(conn):
    """RFC 9113 §6.5.2/§10.5.1: SETTINGS_MAX_HEADER_LIST_SIZE is advisory: a larger field block
    may be answered (431 or otherwise) or refused with a stream error, but unless the connection
    is closed it MUST still be decoded, so the HPACK state stays in step (§4.3): a later
    request that refers to an entry the large block added is understood."""
    limit = conn.server_settings.get(S.MAX_HEADER_LIST_SIZE)
    assert limit, "the server advertises SETTINGS_MAX_HEADER_LIST_SIZE"
    filler = [("x-fill-%03d" % i, "f" * 1000) for i in range(limit // 1000 + 5)]
    block = (
        base_block(conn, "/hello") + hp_literal("x-kept", "v1", "incremental") + raw_block(filler)
    )
    step = conn.max_frame_size
    pieces = [block[i : i + step] for i in range(0, len(block), step)]
    frames = [headers(1, pieces[0], end_stream=True, end_headers=len(pieces) == 1)]
    for i, piece in enumerate(pieces[1:], 2):
        frames.append(continuation(1, piece, end_headers=i == len(pieces)))
    conn.send(*frames)
    try:
        conn.response(1)  # any complete response (ferrocorn/h2: 431)
    except Got as exc:
        if isinstance(exc, tuple(got("GOAWAY", code) for code in Err)):
            return  # the connection ends: no HPACK state left to keep
        assert type(exc).__name__.startswith("Got_RST_STREAM"), exc  # a stream error
    seen = scope_headers(conn, 3, base_block(conn) + hp_indexed(62))
    assert ("x-kept", "v1") in seen


# ======================================================================== 6.7 PING


def test_6_7_ping_ack_is_not_answered(conn):
    """RFC 9113 §6.7: an endpoint MUST NOT respond to a PING with the ACK flag."""
    conn.send(ping(b"ackedack", ack=True))
    before = conn.sync()
    assert not [f for f in before if isinstance(f, PingFrame)], before


def test_6_7_ping_on_a_stream(conn):
    """RFC 9113 §6.7: PING on a stream other than 0 is a connection error PROTOCOL_ERROR."""
    conn.send(ping(b"12345678", stream_id=1))
    conn.expect_connection_error(PE)


@pytest.mark.parametrize("length", [6, 9])
def test_6_7_ping_wrong_length(conn, length):
    """RFC 9113 §6.7: a PING whose length is not 8 is a connection error FRAME_SIZE_ERROR."""
    conn.send(ping(b"p" * length))
    conn.expect_connection_error(Err.FRAME_SIZE_ERROR)


# ======================================================================== 6.8 GOAWAY


def test_6_8_goaway_on_a_stream(conn):
    """RFC 9113 §6.8: GOAWAY on a stream other than 0 is a connection error PROTOCOL_ERROR."""
    conn.send(goaway(0, Err.NO_ERROR, stream_id=1))
    conn.expect_connection_error(PE)


def test_6_8_goaway_too_short(conn):
    """RFC 9113 §4.2: a frame too small for its mandatory fields (a 4-octet GOAWAY) is a
    FRAME_SIZE_ERROR, a connection error for a frame on stream 0."""
    conn.send(frame(T.GOAWAY, 0, 0, b"\0\0\0\0"))
    conn.expect_connection_error(Err.FRAME_SIZE_ERROR)


# ======================================================================== 6.9 WINDOW_UPDATE


def test_6_9_zero_increment_on_connection(conn):
    """RFC 9113 §6.9: a WINDOW_UPDATE of 0 for the connection is a connection error
    PROTOCOL_ERROR."""
    conn.send(window_update(0, 0))
    conn.expect_connection_error(PE)


def test_6_9_zero_increment_on_stream(conn):
    """RFC 9113 §6.9: a WINDOW_UPDATE of 0 for a stream is a stream error PROTOCOL_ERROR."""
    open_stream(conn, 1)
    conn.send(window_update(1, 0))
    conn.expect_stream_error(1, PE)


def test_6_9_wrong_length(conn):
    """RFC 9113 §6.9: a WINDOW_UPDATE whose length is not 4 is a connection error
    FRAME_SIZE_ERROR."""
    conn.send(frame(T.WINDOW_UPDATE, 0, 0, b"\0\0\x01"))
    conn.expect_connection_error(Err.FRAME_SIZE_ERROR)


def test_6_9_reserved_bit_of_increment_is_ignored(conn):
    """RFC 9113 §6.9: the reserved bit of the increment is ignored (read as an increment of 1
    it is valid; read as 2^31+1 it would overflow the window)."""
    conn.send(window_update(0, 0x80000001))
    conn.sync()


def test_6_9_1_connection_window_overflow(conn):
    """RFC 9113 §6.9.1: a WINDOW_UPDATE taking the connection window above 2^31-1 is a
    connection error FLOW_CONTROL_ERROR."""
    conn.send(window_update(0, MAX_WINDOW))
    conn.expect_connection_error(Err.FLOW_CONTROL_ERROR)


def test_6_9_1_stream_window_overflow(conn):
    """RFC 9113 §6.9.1: a WINDOW_UPDATE taking a stream window above 2^31-1 is a stream error
    FLOW_CONTROL_ERROR."""
    open_stream(conn, 1)
    conn.send(window_update(1, MAX_WINDOW))
    conn.expect_stream_error(1, Err.FLOW_CONTROL_ERROR)


def test_6_9_1_server_respects_stream_window(server):
    """RFC 9113 §6.9.1: with SETTINGS_INITIAL_WINDOW_SIZE 1 the server sends one octet of DATA
    per octet of window it is given."""
    with connect(server, (S.INITIAL_WINDOW_SIZE, 1)) as c:
        c.request(1)
        first = c.wait_for(lambda f: isinstance(f, DataFrame) and f.data, "DATA")
        assert bytes(first.data) == b"h"
        assert not [f for f in c.sync() if isinstance(f, DataFrame) and f.data]
        c.send(window_update(1, 3))
        got_bytes = bytearray()
        while len(got_bytes) < 3:
            f = c.wait_for(lambda f: isinstance(f, DataFrame), "DATA")
            got_bytes += f.data
        assert bytes(got_bytes) == b"ell"
        assert not [f for f in c.sync() if isinstance(f, DataFrame) and f.data]
        c.send(window_update(1, 100))
        assert bytes(c.response(1).body) == b"hello world"


def test_6_9_1_server_respects_connection_window(server):
    """RFC 9113 §6.9.1: the connection window (65535, never raised here) bounds the DATA sent
    even when the stream window is huge."""
    with connect(server, (S.INITIAL_WINDOW_SIZE, MAX_WINDOW)) as c:
        c.request(1, "GET", "/stream?size=100000")
        received = 0
        while received < 65535:
            f = c.wait_for(lambda f: isinstance(f, DataFrame), "DATA")
            received += len(f.data)
        assert received == 65535
        assert not [f for f in c.sync() if isinstance(f, DataFrame) and f.data]
        c.send(window_update(0, 100000))
        assert len(c.response(1).body) == 100000


def test_6_9_2_initial_window_change_applies_to_open_streams(server):
    """RFC 9113 §6.9.2: a new SETTINGS_INITIAL_WINDOW_SIZE adjusts the windows of open
    streams: from 0 to 1, one octet of the pending response may go."""
    with connect(server, (S.INITIAL_WINDOW_SIZE, 0)) as c:
        c.request(1)
        c.wait_for(lambda f: isinstance(f, HeadersFrame) and f.stream_id == 1, "HEADERS")
        assert not [f for f in c.sync() if isinstance(f, DataFrame) and f.data]
        c.send(settings((S.INITIAL_WINDOW_SIZE, 1)))
        first = c.wait_for(lambda f: isinstance(f, DataFrame) and f.data, "DATA")
        assert bytes(first.data) == b"h"


def test_6_9_2_negative_window(server):
    """RFC 9113 §6.9.2: lowering SETTINGS_INITIAL_WINDOW_SIZE can make a stream window
    negative; the sender then waits until WINDOW_UPDATEs make it positive again.
    Window 3 -> 3 octets sent -> INITIAL 2 makes it -1 -> +2 allows exactly 1 octet."""
    with connect(server, (S.INITIAL_WINDOW_SIZE, 3)) as c:
        c.request(1)
        received = bytearray()
        while len(received) < 3:
            received += c.wait_for(lambda f: isinstance(f, DataFrame), "DATA").data
        assert bytes(received) == b"hel"
        c.send(settings((S.INITIAL_WINDOW_SIZE, 2)))
        c.wait_for(lambda f: isinstance(f, SettingsFrame) and "ACK" in f.flags, "SETTINGS ACK")
        c.send(window_update(1, 2))
        nxt = c.wait_for(lambda f: isinstance(f, DataFrame) and f.data, "DATA")
        assert bytes(nxt.data) == b"l"
        assert not [f for f in c.sync() if isinstance(f, DataFrame) and f.data]
        c.send(window_update(1, 100))
        assert bytes(c.response(1).body) == b"hello world"


def test_6_9_2_initial_window_change_overflowing_a_stream(conn):
    """RFC 9113 §6.9.2: a SETTINGS_INITIAL_WINDOW_SIZE change that takes an open stream's
    window above 2^31-1 is a connection error FLOW_CONTROL_ERROR."""
    open_stream(conn, 1)
    conn.send(window_update(1, MAX_WINDOW - 65535))  # the stream window is now 2^31-1
    conn.sync()
    conn.send(settings((S.INITIAL_WINDOW_SIZE, 65536)))
    conn.expect_connection_error(Err.FLOW_CONTROL_ERROR)


# ======================================================================== 6.10 CONTINUATION


def _split(c, path="/hello"):
    block = raw_block(c.request_fields("GET", path))
    return block[:8], block[8:20], block[20:]


def test_6_10_continuation_followed_by_other_frame(conn):
    """RFC 9113 §6.10: a CONTINUATION without END_HEADERS followed by another frame type is a
    connection error PROTOCOL_ERROR."""
    a, b, c = _split(conn)
    conn.send(
        headers(1, a, end_stream=True, end_headers=False), continuation(1, b, False), data(1, b"x")
    )
    conn.expect_connection_error(PE)


def test_6_10_continuation_on_other_stream(conn):
    """RFC 9113 §6.10: a CONTINUATION on another stream than the open field block is a
    connection error PROTOCOL_ERROR."""
    a, b, c = _split(conn)
    conn.send(headers(1, a, end_stream=True, end_headers=False), continuation(3, b + c))
    conn.expect_connection_error(PE)


def test_6_10_continuation_on_stream_0(conn):
    """RFC 9113 §6.10: CONTINUATION on stream 0 is a connection error PROTOCOL_ERROR."""
    a, b, c = _split(conn)
    conn.send(headers(1, a, end_stream=True, end_headers=False), continuation(0, b + c))
    conn.expect_connection_error(PE)


def test_6_10_continuation_after_end_headers(conn):
    """RFC 9113 §6.10: CONTINUATION after a HEADERS frame with END_HEADERS is a connection
    error PROTOCOL_ERROR."""
    open_stream(conn, 1)
    conn.send(continuation(1, raw_block([("x-late", "1")])))
    conn.expect_connection_error(PE)


def test_6_10_continuation_after_continuation_with_end_headers(conn):
    """RFC 9113 §6.10: CONTINUATION after a CONTINUATION with END_HEADERS is a connection
    error PROTOCOL_ERROR."""
    a, b, c = _split(conn, "/echo")
    conn.send(
        headers(1, a, end_headers=False),
        continuation(1, b + c, True),
        continuation(1, raw_block([("x-late", "1")])),
    )
    conn.expect_connection_error(PE)


def test_6_10_continuation_after_data(conn):
    """RFC 9113 §6.10: CONTINUATION after a DATA frame is a connection error PROTOCOL_ERROR."""
    open_stream(conn, 1)
    conn.send(data(1, b"x"), continuation(1, raw_block([("x-late", "1")])))
    conn.expect_connection_error(PE)


# ======================================================================== 8 HTTP semantics


def _fields(method="GET", scheme="http", path="/hello", auth=True):
    out = []
    if method is not None:
        out.append((":method", method))
    if scheme is not None:
        out.append((":scheme", scheme))
    if path is not None:
        out.append((":path", path))
    if auth:
        out.append((":authority", "localhost"))
    return out


MALFORMED = {
    # §8.2.1 field validity
    "uppercase-name": _fields() + [("X-Upper", "1")],
    "name-with-space": _fields() + [("x bad", "1")],
    "name-with-colon": _fields() + [("x:bad", "1")],
    "value-with-nul": _fields() + [("x-bad", "a\x00b")],
    "value-with-cr": _fields() + [("x-bad", "a\rb")],
    "value-with-lf": _fields() + [("x-bad", "a\nb")],
    "value-leading-space": _fields() + [("x-bad", " a")],
    "value-trailing-tab": _fields() + [("x-bad", "a\t")],
    # §8.2.2 connection-specific fields
    "connection": _fields() + [("connection", "keep-alive")],
    "keep-alive": _fields() + [("keep-alive", "timeout=5")],
    "proxy-connection": _fields() + [("proxy-connection", "keep-alive")],
    "transfer-encoding": _fields() + [("transfer-encoding", "chunked")],
    "upgrade": _fields() + [("upgrade", "h2c")],
    "te-not-trailers": _fields() + [("te", "gzip")],
    # §8.3 pseudo-header fields
    "pseudo-after-regular": _fields()[:3] + [("x-a", "1"), (":authority", "localhost")],
    "unknown-pseudo": _fields() + [(":foo", "bar")],
    "response-pseudo": _fields() + [(":status", "200")],
    # §8.3.1 request pseudo-header fields
    "missing-method": _fields(method=None),
    "missing-scheme": _fields(scheme=None),
    "missing-path": _fields(path=None),
    "empty-path": _fields(path=""),
    "duplicate-method": _fields() + [(":method", "GET")],
    "duplicate-scheme": _fields() + [(":scheme", "http")],
    "duplicate-path": _fields() + [(":path", "/hello")],
    # §8.5 CONNECT
    "connect-with-path": _fields(method="CONNECT"),
    "connect-without-authority": _fields(method="CONNECT", scheme=None, path=None, auth=False),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_8_malformed_request(conn, name):
    """RFC 9113 §8.1.1: a malformed request (§8.2.1 field names/values, §8.2.2
    connection-specific fields, §8.3 pseudo-headers, §8.5 CONNECT) is a stream error
    PROTOCOL_ERROR (a response may come first, but not one that ends the stream). The h2
    crate checks most of these; ferrocorn checks surrounding whitespace in values and
    CONNECT's :authority (src/http/headers.rs)."""
    conn.send(headers(1, raw_block(MALFORMED[name]), end_stream=True))
    conn.expect_stream_error(1, PE, answered_fails=True)


def test_8_2_2_te_trailers_is_allowed(conn):
    """RFC 9113 §8.2.2: TE is allowed with exactly the value "trailers"."""
    conn.send(headers(1, raw_block(_fields(path="/hello") + [("te", "trailers")]), end_stream=True))
    assert conn.response(1).status == 200


def test_8_1_trailers_without_end_stream(conn):
    """RFC 9113 §8.1: a trailer section HEADERS frame without END_STREAM is malformed: stream
    error PROTOCOL_ERROR."""
    open_stream(conn, 1)
    conn.send(data(1, b"x"), headers(1, raw_block([("x-trailer", "1")])))
    conn.expect_stream_error(1, PE)


@pytest.mark.xfail(
    strict=True,
    raises=Answered,
    reason="h2 0.4.20 proto/streams/recv.rs recv_trailers keeps only the regular fields "
    "(Headers::into_fields): pseudo-headers in trailers are dropped silently, and ferrocorn "
    "never sees them",
)
def test_8_1_pseudo_header_in_trailers(conn):
    """RFC 9113 §8.1/§8.3: pseudo-header fields MUST NOT appear in a trailer section; the
    request is malformed: stream error PROTOCOL_ERROR."""
    open_stream(conn, 1)
    conn.send(data(1, b"x"), headers(1, raw_block([(":path", "/x")]), end_stream=True))
    conn.expect_stream_error(1, PE, answered_fails=True)


@pytest.mark.parametrize(
    "declared,chunks",
    [("1", [b"four"]), ("10", [b"four"]), ("5", [b"abc", b"def"]), ("3", [b"a", b"b"]), ("4", [])],
    ids=[
        "one-frame-longer",
        "one-frame-shorter",
        "frames-sum-longer",
        "frames-sum-shorter",
        "no-data",
    ],
)
def test_8_1_1_content_length_mismatch(conn, declared, chunks):
    """RFC 9113 §8.1.1: a content-length that differs from the sum of the DATA payloads is
    malformed: stream error PROTOCOL_ERROR."""
    block = raw_block(_fields("POST", path="/echo") + [("content-length", declared)])
    frames = [headers(1, block, end_stream=not chunks)]
    frames += [data(1, chunk, end_stream=i == len(chunks) - 1) for i, chunk in enumerate(chunks)]
    conn.send(*frames)
    conn.expect_stream_error(1, PE)


def test_8_4_push_promise_from_client(conn):
    """RFC 9113 §8.4: a server MUST treat a PUSH_PROMISE as a connection error
    PROTOCOL_ERROR."""
    open_stream(conn, 1)
    payload = struct.pack(">I", 2) + raw_block(_fields())
    conn.send(frame(T.PUSH_PROMISE, F.END_HEADERS, 1, payload))
    conn.expect_connection_error(PE)


# ======================================================================== HPACK (RFC 7541)


def test_hpack_indexed_static_fields(conn):
    """RFC 7541 §6.1: indexed representations from the static table (:method GET, :scheme
    http, :path /)."""
    block = (
        hp_indexed(IDX_METHOD_GET)
        + hp_indexed(IDX_SCHEME_HTTP)
        + hp_indexed(IDX_PATH_ROOT)
        + hp_literal(IDX_AUTHORITY, authority(conn))
    )
    conn.send(headers(1, block, end_stream=True))
    assert bytes(conn.response(1).body) == b"hello world"


@pytest.mark.parametrize("indexing", ["incremental", "without", "never"])
@pytest.mark.parametrize("named", ["indexed-name", "new-name"])
def test_hpack_literal_representations(conn, indexing, named):
    """RFC 7541 §6.2.1-§6.2.3 (literal with incremental indexing, without indexing, never
    indexed; name from the static table or a literal) with Huffman-coded strings (§5.2; the
    other fields of the block are raw strings): the app sees the field; an incrementally
    indexed one can then be referred to as dynamic entry 62."""
    name = 58 if named == "indexed-name" else "x-lit"  # 58: user-agent
    expect = ("user-agent" if named == "indexed-name" else "x-lit", "v\u00e9-%s" % indexing)
    value = expect[1].encode("latin-1")
    block = base_block(conn) + hp_literal(name, value, indexing, huff=True)
    assert expect in scope_headers(conn, 1, block)
    if indexing == "incremental":
        assert expect in scope_headers(conn, 3, base_block(conn) + hp_indexed(62))


def test_hpack_dynamic_table_eviction(conn):
    """RFC 7541 §4.4: adding entries beyond the table size evicts the oldest; the index space
    shifts (§2.3.3): the newest entry is 62."""
    sizes = [("x-a", "a" * 1300), ("x-b", "b" * 1300), ("x-c", "c" * 1300)]
    block = base_block(conn) + b"".join(hp_literal(n, v, "incremental") for n, v in sizes)
    scope_headers(conn, 1, block)  # 3 * (1300+3+32) > 4096: x-a is evicted
    seen = scope_headers(conn, 3, base_block(conn) + hp_indexed(62) + hp_indexed(63))
    assert ("x-c", "c" * 1300) in seen and ("x-b", "b" * 1300) in seen
    assert ("x-a", "a" * 1300) not in seen


def test_hpack_dynamic_table_size_updates(conn):
    """RFC 7541 §4.2/§6.3: dynamic table size updates at the start of a block, two in a row
    (shrink to 0, which empties the table, then back to 4096), are accepted and the table
    works afterwards."""
    scope_headers(conn, 1, base_block(conn) + hp_literal("x-old", "1", "incremental"))
    block = (
        hp_size_update(0)
        + hp_size_update(4096)
        + base_block(conn)
        + hp_literal("x-new", "2", "incremental")
    )
    assert ("x-new", "2") in scope_headers(conn, 3, block)
    seen = scope_headers(conn, 5, base_block(conn) + hp_indexed(62))
    assert ("x-new", "2") in seen


def test_hpack_server_signals_table_size_change(server):
    """RFC 7541 §4.2: after the client lowers SETTINGS_HEADER_TABLE_SIZE to 0, the server's
    next field block MUST begin with a dynamic table size update to a size <= 0."""
    with connect(server, (S.HEADER_TABLE_SIZE, 0)) as c:
        c.request(1)
        resp_headers = c.wait_for(lambda f: isinstance(f, HeadersFrame), "HEADERS")
        block = bytes(resp_headers.data)
        assert block[0] & 0xE0 == 0x20, "no dynamic table size update first: %r" % block[:8]
        assert block[0] & 0x1F == 0, "size update to %d, not 0" % (block[0] & 0x1F)


@deviation("GOAWAY", PE, H2_HPACK)
def test_hpack_indexed_out_of_range(conn):
    """RFC 7541 §2.3.3: an index beyond the static and dynamic tables is a decoding error,
    COMPRESSION_ERROR (RFC 9113 §4.3)."""
    conn.send(headers(1, base_block(conn, "/hello") + hp_indexed(70), end_stream=True))
    conn.expect_connection_error(Err.COMPRESSION_ERROR)


@deviation("GOAWAY", PE, H2_HPACK)
def test_hpack_literal_name_index_out_of_range(conn):
    """RFC 7541 §2.3.3: a literal whose name index is out of range: COMPRESSION_ERROR."""
    block = base_block(conn, "/hello") + hp_literal(70, "v")
    conn.send(headers(1, block, end_stream=True))
    conn.expect_connection_error(Err.COMPRESSION_ERROR)


@deviation("GOAWAY", PE, H2_HPACK)
def test_hpack_index_zero(conn):
    """RFC 7541 §6.1: index 0 is not used: a decoding error, COMPRESSION_ERROR."""
    conn.send(headers(1, base_block(conn, "/hello") + hp_indexed(0), end_stream=True))
    conn.expect_connection_error(Err.COMPRESSION_ERROR)


@deviation("GOAWAY", PE, H2_HPACK)
def test_hpack_size_update_after_a_field(conn):
    """RFC 7541 §4.2: a dynamic table size update MUST come at the start of a block; one
    after a field is a decoding error, COMPRESSION_ERROR."""
    block = base_block(conn, "/hello") + hp_size_update(100)
    conn.send(headers(1, block, end_stream=True))
    conn.expect_connection_error(Err.COMPRESSION_ERROR)


@deviation("GOAWAY", PE, H2_HPACK)
def test_hpack_size_update_over_settings_limit(conn):
    """RFC 7541 §6.3: a size update above SETTINGS_HEADER_TABLE_SIZE (4096 by default) is a
    decoding error, COMPRESSION_ERROR."""
    block = hp_size_update(4097) + base_block(conn, "/hello")
    conn.send(headers(1, block, end_stream=True))
    conn.expect_connection_error(Err.COMPRESSION_ERROR)


@deviation("GOAWAY", PE, H2_HPACK)
def test_hpack_integer_overflow(conn):
    """RFC 7541 §5.1: an integer too large for the decoder is a decoding error,
    COMPRESSION_ERROR."""
    huge = b"\xff" + b"\xff" * 10 + b"\x01"  # indexed field, index > 2^70
    conn.send(headers(1, base_block(conn, "/hello") + huge, end_stream=True))
    conn.expect_connection_error(Err.COMPRESSION_ERROR)


def _huffman_case(kind):
    bits, count = huffman(b"a")  # 5 bits
    if kind == "padding-over-7-bits":
        return huffman_bytes(bits, count, pad_bits=11)  # 5 + 11 ones = 2 octets
    if kind == "padding-not-eos-prefix":
        return huffman_bytes(bits, count, pad_bits=3, pad_value=0)
    # "contains-eos": 'a' + EOS (30 bits) + 5 padding ones
    eos_bits, eos_count = EOS
    return huffman_bytes((bits << eos_count) | eos_bits, count + eos_count)


@deviation("GOAWAY", PE, H2_HPACK)
@pytest.mark.parametrize("kind", ["padding-over-7-bits", "padding-not-eos-prefix", "contains-eos"])
def test_hpack_invalid_huffman(conn, kind):
    """RFC 7541 §5.2: Huffman padding longer than 7 bits, padding that is not the EOS prefix,
    and an encoded EOS symbol are decoding errors, COMPRESSION_ERROR."""
    block = (
        base_block(conn, "/hello")
        + hp_int(0, 4, 0)
        + hp_str("x-huff")
        + hp_huffman_literal(_huffman_case(kind))
    )
    conn.send(headers(1, block, end_stream=True))
    conn.expect_connection_error(Err.COMPRESSION_ERROR)
