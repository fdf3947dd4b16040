"""The listening sockets: TCP at host/port, a Unix socket, an inherited descriptor or one
systemd passed (socket activation), and ``--http3``'s UDP socket."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
from collections.abc import Iterator
from typing import Any

from .options import ConfigError

__all__ = [
    "bind_tcp",
    "bind_udp",
    "bind_unix",
    "socket_from_fd",
    "socket_kind",
    "take_systemd_socket",
]

logger = logging.getLogger("ferrocorn.error")


def socket_kind(sock: socket.socket) -> str:
    """``"unix"`` for a Unix-domain socket, else ``"tcp"``: which ``Core.listen_*`` to call."""
    return "unix" if sock.family == getattr(socket, "AF_UNIX", None) else "tcp"


@contextlib.contextmanager
def _nonblocking_socket_objects() -> Iterator[None]:
    """Socket objects created inside start non-blocking, whatever the descriptor they wrap.

    O_NONBLOCK belongs to the open file description, which every process holding an inherited
    listener shares (the workers of a slot, all workers with ``--fd``/``--uds``). PyPy's socket
    constructor applies the default timeout to the descriptor, and with no default timeout that
    makes it *blocking* until our ``setblocking(False)`` a moment later. A sibling worker whose
    tokio accept() falls in that moment blocks its whole I/O thread in the kernel: its accepted
    connections go unanswered, and at shutdown it hangs. With a default timeout of 0, both
    CPython and PyPy set non-blocking (as the socket already is) instead."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(0.0)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _remove_stale_unix_socket(path: str) -> None:
    """Unlink a socket file nobody listens on; refuse to touch a live socket or other file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(errno.EEXIST, "path exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # left behind by a server that did not shut down cleanly
        return
    except socket.timeout:
        pass  # a listener whose backlog is full is still a live server
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, "another server is listening on this socket")


SD_LISTEN_FDS_START = 3  # sd_listen_fds(3): the first socket systemd passes


def take_systemd_socket() -> int | None:
    """The socket systemd passed to this very process (socket activation), or None.

    Consumes ``LISTEN_PID``/``LISTEN_FDS``/``LISTEN_FDNAMES`` (like ``sd_listen_fds(1)``), so
    that child processes never take the descriptor for theirs.
    """
    try:
        pid = int(os.environ.get("LISTEN_PID", ""))
        count = int(os.environ.get("LISTEN_FDS", ""))
    except ValueError:
        return None
    if pid != os.getpid() or count < 1:
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    if count > 1:
        logger.warning("systemd passed %d sockets; serving only the first one (fd 3).", count)
    return SD_LISTEN_FDS_START


def socket_from_fd(fd: int, backlog: int) -> socket.socket:
    """A listening, non-blocking socket object over the stream socket ``fd``."""
    try:
        # socket(fileno=...) asks the kernel for the family and type; detach so the
        # probe does not close the descriptor.
        with _nonblocking_socket_objects():
            probe = socket.socket(fileno=fd)
            try:
                family, kind = probe.family, probe.type
            finally:
                probe.detach()
            if kind != socket.SOCK_STREAM:
                raise OSError(errno.EPROTOTYPE, "not a stream socket")
            sock = socket.fromfd(fd, family, socket.SOCK_STREAM)
        try:
            if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                sock.listen(backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
    except OSError as exc:
        raise ConfigError(f"Could not use file descriptor {fd}: {exc}") from exc
    return sock


def bind_udp(address: tuple[Any, ...], reuse_port: bool = False) -> socket.socket:
    """The UDP socket ``--http3`` serves QUIC on, at ``address`` (the TCP socket's).

    ``reuse_port``: with ``SO_REUSEPORT``, as each worker binds its own (the kernel
    spreads clients over them by address, so a connection's packets reach one worker).
    """
    host, port = address[0], address[1]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"Could not bind HTTP/3 to UDP {host}:{port}: {exc}") from exc
    return sock


def bind_unix(path: str, permissions: int | None, backlog: int) -> socket.socket:
    try:
        _remove_stale_unix_socket(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            # chmod before listen(): until then connecting is refused, so no client
            # gets in under the umask-derived permissions.
            if permissions is not None:
                os.chmod(path, permissions)
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
    except OSError as exc:
        raise ConfigError(f"Could not bind to unix:{path}: {exc}") from exc
    return sock


def bind_tcp(host: str, port: int, backlog: int, reuse_port: bool = False) -> socket.socket:
    """``reuse_port``: with ``SO_REUSEPORT``, after checking that nothing else is bound there
    (the supervisor's per-worker sockets join it)."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # accept the URL form "[::1]"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    shown = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
    sock = None
    try:
        infos = socket.getaddrinfo(
            host or None, port, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
        )
        af, socktype, proto, _, sockaddr = infos[0]
        sock = socket.socket(af, socktype, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            # A plain bind first fails while anything is bound there, even a server using
            # SO_REUSEPORT itself, which a SO_REUSEPORT bind would silently join.
            sock.bind(sockaddr)
            sockaddr = sock.getsockname()  # port 0: the port the kernel chose
            sock.close()
            sock = socket.socket(af, socktype, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(sockaddr)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise ConfigError(f"Could not bind to {shown}: {exc}") from exc
    return sock
