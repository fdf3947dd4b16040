"""Property-based tests (hypothesis) of the ASGI send() and receive() sides (issue #7).

send(): the app (tests/apps/fuzz_app.py) passes a generated list of messages -- valid ones,
str instead of bytes, wrong types, missing keys, unknown types, start/body in any order, huge
statuses, None values, nested garbage -- to send(). Every call must return or raise one of
TypeError/ValueError/RuntimeError/KeyError/OSError (or a subclass); the client must get a
complete response or a clean close within the timeout; a new connection then gets 200.

receive(): a random sequence of client behaviours (body pieces, pauses, an early close)
against an app calling receive() in a loop: receive() never raises and ends with
http.disconnect or the last body chunk (with the full body).
"""

import json
import socket
import time
import uuid

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.support.helpers import IncompleteResponse, RawConnection, request_bytes, start_server  # noqa: E402,E501

LIVENESS_TIMEOUT = 10.0  # a bound on hanging, not a performance assertion
SEND_EXAMPLES = 300
RECEIVE_EXAMPLES = 100


@pytest.fixture(scope="module")
def server():
    # Body pre-reading off: the app is called as soon as the head arrives, so the receive
    # property always sees the client's behaviour through receive().
    with start_server(
        "tests.apps.fuzz_app:app", "--no-access-log", "--body-preread-limit", "0"
    ) as s:
        yield s
        assert s.proc.poll() is None, "server died:\n" + s.output()[-3000:]
        out = s.output()
        for bad in ("SystemError", "panicked", "Fatal Python error"):
            assert bad not in out, out[-3000:]


def get(server, target):
    with RawConnection(server.port, timeout=LIVENESS_TIMEOUT) as conn:
        conn.send(request_bytes("GET", target, [("Connection", "close")]))
        return conn.read_response()


def report(server, rid, predicate=lambda r: r is not None, timeout=LIVENESS_TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        resp = get(server, "/report?id=" + rid)
        assert resp is not None and resp.status == 200, resp
        data = json.loads(resp.body)
        if predicate(data) or time.monotonic() > deadline:
            return data
        time.sleep(0.02)


def assert_alive(server):
    assert server.proc.poll() is None, "server died:\n" + server.output()[-3000:]
    resp = get(server, "/hello")
    assert resp is not None and resp.status == 200 and resp.body == b"hello", resp


# ---------------------------------------------------------------- tagged JSON values


def b(data):
    return {"b": data.decode("latin-1")}


garbage = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**80), 2**80).map(lambda i: {"i": i}),
        st.floats(allow_nan=False, allow_infinity=False).map(lambda f: {"f": f}),
        st.text(max_size=20).map(lambda s: {"s": s}),
        st.binary(max_size=20).map(b),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(lambda v: {"l": v}),
        st.lists(children, max_size=4).map(lambda v: {"t": v}),
        st.lists(st.tuples(st.text(max_size=8).map(lambda s: {"s": s}), children), max_size=4).map(
            lambda v: {"d": [list(p) for p in v]}
        ),
    ),
    max_leaves=8,
)

header_token = st.one_of(
    st.sampled_from(
        [
            b"content-type",
            b"x-a",
            b"content-length",
            b"transfer-encoding",
            b"connection",
            b"X-Upper",
            b"bad name",
            b"x\r\ny",
            b"",
            b"set-cookie",
        ]
    ),
    st.binary(max_size=16),
)
header_value = st.one_of(
    st.sampled_from(
        [
            b"text/plain",
            b"0",
            b"5",
            b"-1",
            b"99999999999999999999",
            b"chunked",
            b"close",
            b"a\r\nX-Injected: 1",
            b"\x00",
            b"",
        ]
    ),
    st.binary(max_size=16),
)
header_part = st.one_of(
    header_token.map(b), header_value.map(b), st.text(max_size=10).map(lambda s: {"s": s}), garbage
)
header = st.one_of(
    st.tuples(header_token.map(b), header_value.map(b)).map(lambda p: {"t": list(p)}),
    st.lists(header_part, min_size=0, max_size=3).map(lambda v: {"l": v}),
    st.tuples(header_part, header_part).map(lambda p: {"t": list(p)}),
    garbage,
)
headers = st.one_of(st.lists(header, max_size=5).map(lambda v: {"l": v}), garbage)
status = st.one_of(
    st.sampled_from(
        [200, 204, 304, 404, 500, 100, 101, 199, 599, 600, 0, -1, 2**31, 2**63, 2**64 + 200]
    ).map(lambda i: {"i": i}),
    st.integers(-(2**70), 2**70).map(lambda i: {"i": i}),
    garbage,
)
body = st.one_of(
    st.binary(max_size=64).map(b), st.text(max_size=16).map(lambda s: {"s": s}), garbage
)
msg_type = st.one_of(
    st.sampled_from(
        [
            "http.response.start",
            "http.response.body",
            "http.response.trailers",
            "http.response.push",
            "http.response.pathsend",
            "http.response.zerocopy",
            "websocket.send",
            "websocket.accept",
            "http.disconnect",
            "lifespan.startup",
            "",
            "HTTP.RESPONSE.START",
        ]
    ).map(lambda s: {"s": s}),
    garbage,
)
KEYS = {
    "status": status,
    "headers": headers,
    "body": body,
    "more_body": garbage,
    "trailers": garbage,
}


@st.composite
def message(draw):
    kind = draw(st.sampled_from(["start", "body", "random", "garbage"]))
    if kind == "garbage":
        return draw(garbage)
    if kind == "start":
        fields = {
            "type": {"s": "http.response.start"},
            "status": draw(status),
            "headers": draw(headers),
        }
        if draw(st.booleans()):
            fields["trailers"] = draw(st.sampled_from([True, False, None]))
    elif kind == "body":
        fields = {"type": {"s": "http.response.body"}, "body": draw(body)}
        if draw(st.booleans()):
            fields["more_body"] = draw(st.one_of(st.booleans(), garbage))
    else:
        fields = {"type": draw(msg_type)}
        for key in draw(st.lists(st.sampled_from(sorted(KEYS)), max_size=3, unique=True)):
            fields[key] = draw(KEYS[key])
    for key in draw(st.lists(st.sampled_from(sorted(fields) + ["extra"]), max_size=2, unique=True)):
        if key == "extra":
            fields[draw(st.text(max_size=6))] = draw(garbage)
        elif draw(st.booleans()):
            del fields[key]  # missing key
        else:
            fields[key] = None
    return {"d": [[{"s": k}, v] for k, v in fields.items()]}


GOOD_START = {
    "d": [
        [{"s": "type"}, {"s": "http.response.start"}],
        [{"s": "status"}, {"i": 200}],
        [{"s": "headers"}, {"l": []}],
    ]
}
GOOD_BODY = {"d": [[{"s": "type"}, {"s": "http.response.body"}], [{"s": "body"}, b(b"x")]]}

messages = st.lists(
    st.one_of(message(), st.just(GOOD_START), st.just(GOOD_BODY)), min_size=0, max_size=6
)


@settings(
    deadline=None,
    max_examples=SEND_EXAMPLES,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(msgs=messages)
def test_send_any_messages(server, msgs):
    rid = uuid.uuid4().hex
    payload = json.dumps({"messages": msgs}).encode()
    with RawConnection(server.port, timeout=LIVENESS_TIMEOUT) as conn:
        conn.send(request_bytes("POST", "/send?id=" + rid, [("Connection", "close")], body=payload))
        try:
            resp = conn.read_response()
            if resp is not None:
                assert 100 <= resp.status <= 999, resp
        except IncompleteResponse:
            pass  # a response cut short by a close: allowed (the app may stop mid-body)
        except socket.timeout:
            raise AssertionError(
                "no response nor close within %.0fs for %r" % (LIVENESS_TIMEOUT, msgs)
            ) from None
    data = report(server, rid)
    assert data is not None, "the app never finished for %r" % (msgs,)
    results = data["results"]
    assert len(results) == len(msgs), (results, msgs)
    for result, msg in zip(results, msgs):
        assert result["outcome"] == "ok" or result["allowed"], (result, msg)
        assert result["outcome"] != "SystemError", (result, msg)
    assert_alive(server)


# ---------------------------------------------------------------- receive side

actions = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 70000)),
        st.tuples(st.just("pause"), st.sampled_from([0.0, 0.01, 0.05])),
        st.tuples(st.just("close"), st.just(0)),
    ),
    min_size=0,
    max_size=6,
)


@settings(
    deadline=None,
    max_examples=RECEIVE_EXAMPLES,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=actions, chunked=st.booleans(), declared=st.integers(0, 200000))
def test_receive_any_client_behaviour(server, steps, chunked, declared):
    rid = uuid.uuid4().hex
    if chunked:
        head = request_bytes(
            "POST",
            "/receive?id=" + rid,
            [("Transfer-Encoding", "chunked"), ("Connection", "close")],
        )
    else:
        head = request_bytes(
            "POST",
            "/receive?id=" + rid,
            [("Content-Length", str(declared)), ("Connection", "close")],
        )
    conn = RawConnection(server.port, timeout=LIVENESS_TIMEOUT)
    sent = 0
    closed = False
    try:
        conn.send(head)
        # Wait for the app to be running before the behaviour starts.
        started = report(server, rid, lambda r: r is not None)
        assert started is not None, "app not called"
        for action, arg in steps:
            if action == "close":
                conn.close()
                closed = True
                break
            if action == "pause":
                time.sleep(arg)
                continue
            if not chunked:
                arg = min(arg, declared - sent)
                if arg <= 0:
                    continue
            piece = b"z" * arg
            data = (b"%x\r\n%s\r\n" % (arg, piece)) if chunked else piece
            try:
                conn.send(data)
            except OSError:
                break  # the server may already have answered and closed
            sent += arg
        complete = not closed and (chunked or sent == declared)
        if not closed:
            if chunked:
                conn.send(b"0\r\n\r\n")
            elif sent < declared:
                conn.close()  # the body can never complete: end the exchange
                closed = True
                complete = False
        if complete:
            try:
                resp = conn.read_response()
            except socket.timeout:
                raise AssertionError("no response within %.0fs" % LIVENESS_TIMEOUT) from None
            assert resp is not None and resp.status == 200, resp
            assert json.loads(resp.body) == {"size": sent}
    finally:
        conn.close()
    data = report(server, rid, lambda r: r is not None and r["state"] == "done")
    assert data["state"] == "done", data
    assert "raised" not in data, data
    msgs = data["messages"]
    assert msgs, data
    assert all(m["type"] == "http.request" for m in msgs[:-1]), data
    last = msgs[-1]
    if complete:
        assert last == {"type": "http.request", "len": last["len"], "more_body": False}, data
        assert sum(m["len"] for m in msgs) == sent, data
    else:
        assert last["type"] == "http.disconnect" or (
            last["type"] == "http.request"
            and not last["more_body"]
            and sum(m["len"] for m in msgs) == sent
        ), data
    assert_alive(server)
