"""Slot handover: while a slot has no worker serving, a live worker accepts on its socket.

With one ``SO_REUSEPORT`` socket per slot (supervisor.py), the kernel hashes every new
connection to one slot's socket.  When a slot's worker dies (a crash, ``kill -9``) its socket
stays open in the supervisor, so the connections hashed to it queue there, unreset, until
the replacement serves, which takes as long as the app's import and lifespan startup.  The
supervisor therefore hands the socket (a descriptor over ``SCM_RIGHTS``) to a worker that
serves, which accepts on it beside its own (``Core.adopt_tcp``) until the slot's own worker
is serving again, then lets go of it (``Core.release_listener``).  Letting go closes only
that worker's descriptor: what is queued then stays queued for the slot's worker, so the
slot design's promise (nothing queued is reset on SIGHUP, recycling or a crash) holds.

The channel is a ``SOCK_SEQPACKET`` socket pair per worker (one message per datagram):
``adopt SLOT`` with the descriptor, ``release SLOT`` without.  Only the supervisor writes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from ._ferrocorn import Core

logger = logging.getLogger("ferrocorn.error")

_ADOPT = b"adopt"
_RELEASE = b"release"
_MAX_MESSAGE = 64


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """(the supervisor's end, the worker's end)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    return ours, theirs


class _Holder(Protocol):
    """What the supervisor knows of a worker for the handover (supervisor._Worker)."""

    slot: int
    ready: bool
    retiring: bool
    control: socket.socket | None


class SlotCovers:
    """The supervisor's side: which live worker covers which slot that has none serving."""

    def __init__(self) -> None:
        self._covers: dict[int, _Holder] = {}

    def update(
        self,
        workers: Sequence[_Holder],
        sockets: list[socket.socket],
        slots: int,
    ) -> None:
        """Called whenever the supervisor's loop wakes: hand out and take back slots."""
        alive = {id(w) for w in workers}
        for slot, holder in list(self._covers.items()):
            if id(holder) not in alive:
                del self._covers[slot]  # it died: its descriptor went with it
            elif slot >= slots or slot >= len(sockets) or _serving(workers, slot):
                self._release(slot)
        for slot in range(min(slots, len(sockets))):
            if _serving(workers, slot):
                continue
            cover = self._covers.get(slot)
            if cover is not None and cover.ready and not cover.retiring:
                continue
            candidates = [
                w
                for w in workers
                if w.ready and not w.retiring and w.control is not None and w.slot != slot
            ]
            if not candidates:
                continue
            # The one covering the fewest slots already.
            load = {id(w): 0 for w in candidates}
            for holder in self._covers.values():
                if id(holder) in load:
                    load[id(holder)] += 1
            chosen = min(candidates, key=lambda w: load[id(w)])
            if cover is not None:
                self._release(slot)  # it is stopping: its core lets go anyway
            if _send(chosen, f"adopt {slot}".encode(), sockets[slot].fileno()):
                self._covers[slot] = chosen
                logger.debug("No worker serves slot %d: a sibling accepts its connections.", slot)

    def release_all(self) -> None:
        for slot in list(self._covers):
            self._release(slot)

    def _release(self, slot: int) -> None:
        cover = self._covers.pop(slot, None)
        if cover is not None:
            _send(cover, f"release {slot}".encode(), None)


def _serving(workers: Sequence[_Holder], slot: int) -> bool:
    return any(w.slot == slot and w.ready and not w.retiring for w in workers)


def _send(worker: _Holder, message: bytes, fd: int | None) -> bool:
    channel = worker.control
    if channel is None:
        return False
    try:
        if fd is None:
            channel.send(message)
        else:
            socket.send_fds(channel, [message], [fd])
    except OSError as exc:  # the worker is gone or stuck: its exit is handled elsewhere
        logger.debug("Slot handover message %r not sent: %s", message, exc)
        return False
    return True


def serve_channel(channel: socket.socket, core: Callable[[], Core | None]) -> threading.Thread:
    """The worker's side: a thread that adopts and releases slots as the supervisor says,
    on ``core()`` (None once the worker no longer serves)."""
    thread = threading.Thread(
        target=_receive, args=(channel, core), name="ferrocorn-slot-handover", daemon=True
    )
    thread.start()
    return thread


def _receive(channel: socket.socket, core: Callable[[], Core | None]) -> None:
    adopted: dict[bytes, int] = {}
    with channel:
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(channel, _MAX_MESSAGE, 1)
            except OSError:
                return
            if not message:
                for fd in fds:
                    os.close(fd)
                return  # the supervisor is gone
            verb, _, slot = message.partition(b" ")
            serving = core()
            if verb == _ADOPT and fds:
                for extra in fds[1:]:
                    os.close(extra)
                if serving is None:
                    os.close(fds[0])
                    continue
                try:
                    adopted[slot] = serving.adopt_tcp(fds[0])  # owns the descriptor now
                except (OSError, RuntimeError) as exc:
                    logger.debug("Could not accept on slot %s's socket: %s", slot.decode(), exc)
            elif verb == _RELEASE:
                listener = adopted.pop(slot, None)
                if listener is not None and serving is not None:
                    with contextlib.suppress(RuntimeError):
                        serving.release_listener(listener)
            else:
                for fd in fds:
                    os.close(fd)
