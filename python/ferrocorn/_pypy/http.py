"""PyPy: ``receive()`` and ``send()`` for HTTP requests, with the messages made and taken
apart in Python.

Under PyPy the extension making or reading a message dict costs a C-API crossing per key,
header pair and bytes object: an ``http.response.start`` with two headers took 1.8 µs that way,
and 0.45 µs when Python checks the types, packs the headers into one bytes object and passes
that (``HttpProtocol.send_start_packed``). Anything off the common shape (a non-bool
``more_body``, a bytearray body, a header that is not a pair of bytes, an invalid value) goes
to ``HttpProtocol.send`` with the message itself, so the error it raises names the key
exactly as on CPython. ``receive()`` likewise gets the body (a bytearray, cheaper through
cpyext than bytes) from ``HttpProtocol.receive_ready`` and ``more_body`` from
``more_body_pending`` (two calls: a tuple of the two cost ~10 µs more for a 10 KiB body), and
makes the dict here; when it has to wait it is the core's ``receive``. The body is whatever
had arrived, merged by the core (up to 64 KiB, ``MERGED_CHUNK_BYTES`` in src/bridge/body.rs),
as on CPython.
"""

from __future__ import annotations

import gc
from typing import Any, Callable

from .._ferrocorn import HttpProtocol

_receive = HttpProtocol.receive
_receive_ready = HttpProtocol.receive_ready
_more_body_pending = HttpProtocol.more_body_pending
_send = HttpProtocol.send
_send_start_packed = HttpProtocol.send_start_packed
_send_body_bytes = HttpProtocol.send_body_bytes
_NO_HEADERS: list = []
# cpyext reads a large bytes object far more slowly than a bytearray copy of it (10 KiB: 12 µs
# against 1.3 µs in a PyPy micro-benchmark; 150 bytes: 0.49 against 0.69 µs).
_COPY_ABOVE = 1024
# ...but only the first time: cpyext keeps what it made for a bytes object as long as the object
# lives, and a constant body (a cached page, a fixed chunk) then crosses in ~0.8 µs. So a large
# body seen twice in a row goes as itself. Up to 1 MiB, the most the reference below keeps.
_REUSE_MAX = 1024 * 1024
_last_large: Any = None
# Body bytes that crossed as fresh objects (bytearray copies both ways, and the bytes the app
# gets) since the GC last took a step. PyPy's incremental collector moves on with minor
# collections, which large objects do not cause: streaming 256 MiB through left ~780 MB
# resident before the next major collection (tests/test_integrity.py), with nothing alive. One
# step of the major collection per this many bytes keeps that near the window's size. Measured
# on this machine: 16 MiB left the 256 MiB upload at +124 MB and a 100 MB slow download at
# +51-54 MB (tests/test_send.py allows 50); 4 MiB: +55 MB and under 50. A step took 2 ms at the
# median (p90 19 ms) in a micro-benchmark with a 180 MB heap.
# A body sent again as the same object (a constant chunk) is not copied and not counted.
_STEP_EVERY = 4 * 1024 * 1024
_crossed = 0
_collect_step = getattr(gc, "collect_step", None)


def _count(size: int) -> None:
    """``size`` body bytes were copied into fresh objects."""
    global _crossed
    _crossed += size
    if _crossed > _STEP_EVERY:
        _crossed = 0
        if _collect_step is not None:
            _collect_step()


def _crossable(body: bytes) -> Any:
    """What to hand the core for a bytes body over ``_COPY_ABOVE``."""
    global _last_large
    if body is _last_large:
        return body
    if len(body) <= _REUSE_MAX:
        _last_large = body
    _count(len(body))
    return bytearray(body)


def packed_start(message: dict) -> tuple[int, bytes, int, bool] | None:
    """An ``http.response.start`` of the common shape taken apart: (status, its headers packed
    ``name\\0value\\0...``, their count, trailers); None for anything else, which the caller
    then sends as the message itself, whose parse names the fault. Shared by this module and
    the fast path (``fast.py``)."""
    status = message.get("status")
    if type(status) is not int or not 200 <= status <= 599:
        return None
    trailers = message.get("trailers", False)
    if trailers is not False and trailers is not True:
        return None
    headers = message.get("headers", _NO_HEADERS)
    if type(headers) is not list and type(headers) is not tuple:
        return None
    fields = []
    for pair in headers:
        if (type(pair) is not tuple and type(pair) is not list) or len(pair) != 2:
            return None
        name, value = pair
        if type(name) is not bytes or type(value) is not bytes:
            return None
        fields.append(name)
        fields.append(value)
    return status, b"\0".join(fields), len(headers), trailers


def _start_packed(proto: HttpProtocol, message: dict) -> Any:
    """``send_start_packed`` for a message of the common shape, else None."""
    parts = packed_start(message)
    if parts is None:
        return None
    return _send_start_packed(proto, *parts)


def http_send(proto: HttpProtocol) -> Callable[[Any], Any]:
    """The ``send`` callable the app gets for one HTTP request."""

    def send(message: Any) -> Any:
        if type(message) is dict:
            kind = message.get("type")
            if kind == "http.response.body":
                body = message.get("body", b"")
                more_body = message.get("more_body", False)
                if type(body) is bytes and (more_body is False or more_body is True):
                    if len(body) > _COPY_ABOVE:
                        body = _crossable(body)
                    return _send_body_bytes(proto, body, more_body)
            elif kind == "http.response.start":
                sent = _start_packed(proto, message)
                if sent is not None:
                    return sent
        return _send(proto, message)

    return send


async def _ready(message: dict) -> dict:
    return message


def http_receive(proto: HttpProtocol) -> Callable[[], Any]:
    """The ``receive`` callable the app gets for one HTTP request. Like the core's, it does
    its work when called (a first call answers ``Expect: 100-continue``), not when awaited."""

    def receive() -> Any:
        body = _receive_ready(proto)
        if body is None:
            return _receive(proto)  # parks a future until tokio has something
        if body is False:
            return _ready({"type": "http.disconnect"})
        # A bytearray from the core (cheaper through cpyext than bytes); the app gets bytes.
        _count(len(body))
        return _ready(
            {"type": "http.request", "body": bytes(body), "more_body": _more_body_pending(proto)}
        )

    return receive
