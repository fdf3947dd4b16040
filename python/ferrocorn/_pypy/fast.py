"""PyPy: the fast path, where HTTP requests cross between the core and Python with no
cpyext object per request (src/asgi/pypy/fast.rs).

Under PyPy every object the extension makes or reads goes through cpyext, which costs more than
the work itself, while cffi calls into ``extern "C"`` functions are compiled by the JIT into
direct calls. So with the default runner the loop's reader is ``drain`` below, not the core's:
one cffi call takes every event queued since the last wake-up as one buffer of records, each
request's scope packed (``scope.py``) beside its handle; ``receive()``, ``send()`` and the end
of the call pass that handle with plain bytes and integers. The core runs the same state
transitions behind the handle as for ``HttpProtocol`` on CPython.

What the records do not carry (WebSockets, requests the packing cannot carry, log lines, the
static route's events) is left for ``Core.drain_slow``; messages other than a plain
``http.response.start`` / ``http.response.body`` go to ``Core.fast_send``, which takes them
apart as ``HttpProtocol.send`` does and raises the same errors.

Futures exist only when something must wait: a ``receive()`` before its body arrived, a
``send()`` whose response budget is full. They are kept here, by handle, and the core's
records say when to look again.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from typing import Any, Callable

import cffi

from .. import _ferrocorn
from .._ferrocorn import ClientDisconnected
from .http import _count, packed_start

_CDEF = """
int ferrocorn_fast_drain(void *fp, int first, const char **data, size_t *len);
void ferrocorn_fast_last(void *fp);
void ferrocorn_fast_drain_end(void *fp);
int ferrocorn_fast_receive(void *fp, uint64_t handle, const char **data, size_t *len);
int ferrocorn_fast_send_start(void *fp, uint64_t handle, uint32_t status,
                              const char *headers, size_t len, size_t count);
int ferrocorn_fast_send_body(void *fp, uint64_t handle, const char *body, size_t len,
                             int more_body);
int ferrocorn_fast_complete(void *fp, uint64_t handle, const char **text, size_t *len);
int ferrocorn_fast_fail(void *fp, uint64_t handle);
"""

ffi = cffi.FFI()
ffi.cdef(_CDEF)
# The extension itself, already loaded: the functions are exported by the same library.
lib = ffi.dlopen(_ferrocorn.__file__)

# Record kinds and flags (fast.rs).
_REQUEST, _RECEIVE, _SEND_DONE = 1, 2, 3
_SLOW = 1
_RECORD = struct.Struct("<IB3xQ")
_HEAD = _RECORD.size
# fc_receive's answers.
_RECV_WAIT, _RECV_LAST, _RECV_MORE, _RECV_DISCONNECT = 0, 1, 2, 3
# Sent codes (protocol.rs `Sent`), and GONE.
_DONE, _COMPLETE, _WAIT, _DISCONNECTED, _FAULT = 0, 1, 2, 3, 4
_GONE = -1
_DISCONNECT = {"type": "http.disconnect"}

error_logger = logging.getLogger("ferrocorn.error")


def _disconnected() -> ClientDisconnected:
    return ClientDisconnected("the client disconnected or the response is already complete")


async def _ready(message: dict) -> dict:
    return message


class _Core:
    """What the requests of one core share: its fast path and the futures that wait."""

    __slots__ = ("core", "fp", "loop", "done", "waiting", "data", "size")

    def __init__(self, core: Any, address: int, loop: Any) -> None:
        self.core = core
        self.fp = ffi.cast("void *", address)
        self.loop = loop
        done = loop.create_future()
        done.set_result(None)
        # What send() returns when nothing waits (a done future awaits at once).
        self.done = done
        # Requests with a parked receive() or send(), by handle.
        self.waiting: dict[int, FastRequest] = {}
        # Out-parameters, reused: a request's calls never overlap.
        self.data = ffi.new("const char **")
        self.size = ffi.new("size_t *")


class FastRequest:
    """One request on the fast path: what the runner calls ``proto`` (``receive``, ``send``,
    ``complete``, ``fail``), behind the core's handle."""

    __slots__ = ("handle", "shared", "receivers", "sending")

    def __init__(self, handle: int, shared: _Core) -> None:
        self.handle = handle
        self.shared = shared
        # Parked receive() futures, oldest first (None until one parks).
        self.receivers: deque | None = None
        # A send() waiting for room: (future, message).
        self.sending: tuple | None = None

    # -- receive ------------------------------------------------------------------------------

    def _message(self) -> dict | None:
        shared = self.shared
        code = lib.ferrocorn_fast_receive(shared.fp, self.handle, shared.data, shared.size)
        if code == _RECV_LAST or code == _RECV_MORE:
            size = shared.size[0]
            body = ffi.buffer(shared.data[0], size)[:] if size else b""
            if size:
                _count(size)
            return {"type": "http.request", "body": body, "more_body": code == _RECV_MORE}
        if code == _RECV_WAIT:
            return None
        return {"type": "http.disconnect"}

    def receive(self) -> Any:
        """Like the core's: it does its work when called (a first call answers ``Expect:
        100-continue``), not when awaited."""
        if not self.receivers:
            message = self._message()
            if message is not None:
                return _ready(message)
        future = self.shared.loop.create_future()
        if self.receivers is None:
            self.receivers = deque()
        self.receivers.append(future)
        self.shared.waiting[self.handle] = self
        return future

    def _resolve_receivers(self) -> None:
        receivers = self.receivers
        while receivers:
            future = receivers[0]
            if future.done():
                receivers.popleft()  # cancelled: its message stays for the next call
                continue
            message = self._message()
            if message is None:
                break  # armed again
            receivers.popleft()
            future.set_result(message)
        self._forget_if_idle()

    def _forget_if_idle(self) -> None:
        if not self.receivers and self.sending is None:
            self.shared.waiting.pop(self.handle, None)

    # -- send ---------------------------------------------------------------------------------

    def send(self, message: Any) -> Any:
        if self.sending is not None:
            raise RuntimeError("send() called before the previous send() finished")
        result = self._deliver(message)
        if result is not None:
            return result
        future = self.shared.loop.create_future()
        self.sending = (future, message)
        self.shared.waiting[self.handle] = self
        return future

    def _deliver(self, message: Any) -> Any:
        """What ``send`` returns, or None when the message must wait for room."""
        if type(message) is dict:
            kind = message.get("type")
            if kind == "http.response.body":
                body = message.get("body", b"")
                more_body = message.get("more_body", False)
                if type(body) is bytes and (more_body is False or more_body is True):
                    shared = self.shared
                    code = lib.ferrocorn_fast_send_body(
                        shared.fp, self.handle, body, len(body), more_body
                    )
                    return self._sent(code, message)
            elif kind == "http.response.start":
                code = self._send_start(message)
                if code is not None:
                    return self._sent(code, message)
        return self._deliver_slowly(message)

    def _send_start(self, message: dict) -> int | None:
        """The start message taken apart here, or None when it is not of the common shape
        (``packed_start``) or promises trailers (the slow way chunks for them)."""
        parts = packed_start(message)
        if parts is None or parts[3]:
            return None
        status, packed, count, _ = parts
        shared = self.shared
        return lib.ferrocorn_fast_send_start(
            shared.fp, self.handle, status, packed, len(packed), count
        )

    def _sent(self, code: int, message: dict) -> Any:
        if code == _DONE:
            return self.shared.done
        if code == _COMPLETE:
            if self.receivers:
                self._resolve_receivers()  # http.disconnect, now the response is sent
            return self.shared.done
        if code == _WAIT:
            return None
        if code == _FAULT:
            return self._deliver_slowly(message)
        raise _disconnected()

    def _deliver_slowly(self, message: Any) -> Any:
        """The message as ``HttpProtocol.send`` takes it apart: the same checks, the same
        errors naming the key."""
        result = self.shared.core.fast_send(self.handle, message)
        if result is not None and self.receivers:
            self._resolve_receivers()  # the response may be complete now
        return result

    def _retry_send(self) -> None:
        """Room appeared (or the client left): send the waiting message now, and complete
        the future the app awaits with the outcome."""
        sending = self.sending
        if sending is None:
            return
        future, message = sending
        self.sending = None
        if future.done():
            self._forget_if_idle()
            return  # cancelled: the app no longer waits for it, nothing is sent
        try:
            result = self._deliver(message)
        except BaseException as exc:  # noqa: B036 - handed to the app's await
            future.set_exception(exc)
            self._forget_if_idle()
            return
        if result is None:
            self.sending = sending  # still no room: waits again
            return
        future.set_result(None)
        self._forget_if_idle()

    # -- the end of the call ------------------------------------------------------------------

    def _release(self) -> None:
        self.receivers = None
        self.sending = None
        self.shared.waiting.pop(self.handle, None)

    def complete(self) -> str | None:
        """The app returned: a protocol fault's text for the error log, or None."""
        shared = self.shared
        code = lib.ferrocorn_fast_complete(shared.fp, self.handle, shared.data, shared.size)
        self._release()
        if code == 1:
            return ffi.buffer(shared.data[0], shared.size[0])[:].decode()
        return None

    def fail(self, exc: BaseException | None) -> bool:
        """The app raised (``exc``) or was cancelled (None): whether it deserves a log."""
        lib.ferrocorn_fast_fail(self.shared.fp, self.handle)
        self._release()
        return exc is not None and not isinstance(exc, ClientDisconnected)


def reader(core: Any, address: int, start: Callable, app: Any, runner: Any) -> Callable[[], None]:
    """The loop's reader for ``core``'s wake-ups: drains the fast path at ``address``
    (``Core.fast_path``), starting each request with ``start(runner, app, scope, proto)``
    (``starter.py``)."""
    import asyncio

    shared = _Core(core, address, asyncio.get_event_loop())
    fp = shared.fp
    data, size = ffi.new("const char **"), ffi.new("size_t *")
    waiting = shared.waiting
    drain_slow = core.drain_slow
    fast_drain = lib.ferrocorn_fast_drain
    fast_last = lib.ferrocorn_fast_last
    drain_end = lib.ferrocorn_fast_drain_end
    unpack_record = _RECORD.unpack_from

    def dispatch(records: Any, end: int) -> None:
        at = 0
        while at < end:
            length, kind, handle = unpack_record(records, at)
            if at + length >= end:
                fast_last(fp)
            try:
                if kind == _REQUEST:
                    proto = FastRequest(handle, shared)
                    try:
                        start(runner, app, records[at + _HEAD : at + length], proto)
                    except BaseException:
                        lib.ferrocorn_fast_fail(fp, handle)
                        raise
                else:
                    request = waiting.get(handle)
                    if request is not None:
                        if kind == _RECEIVE:
                            request._resolve_receivers()
                        else:
                            request._retry_send()
            except Exception:
                error_logger.exception("Error while dispatching a request")
            at += length

    def drain() -> None:
        flags = fast_drain(fp, 1, data, size)
        length = size[0]
        if length:
            # Read in place (the core keeps the buffer until the next drain): a copy of the
            # whole batch would be one large object, which PyPy's GC promotes at once and which
            # then drives its major collections; each request's slice below is small and dies young.
            dispatch(ffi.buffer(data[0], length), length)
        if flags & _SLOW:
            drain_slow()
        drain_end(fp)

    return drain
