"""Proxy headers: take ``client``, ``scheme`` and ``server`` from a trusted reverse proxy.

When the direct peer (``scope["client"][0]``) is trusted (``--forwarded-allow-ips``), the
request's ``Forwarded`` (RFC 7239) or ``X-Forwarded-For`` / ``-Proto`` / ``-Host`` / ``-Port``
headers say who the real client is and how it reached the proxy.  Headers from an untrusted
peer are ignored.  The rules (uvicorn's, where uvicorn has one):

* **Trust.** ``--forwarded-allow-ips`` takes IP addresses, CIDR networks, ``*`` (trust every
  peer and every hop) and other literal strings, which match a ``Forwarded`` / XFF entry
  verbatim (an obfuscated identifier such as ``_edge1``).  A Unix-socket peer has no address
  (``client`` is ``None``), so it is trusted only with ``*``, as in uvicorn.
* **Client.** The hops are walked from the right (the entry our peer added) to the left,
  skipping trusted proxies; the first untrusted hop is the client (with ``*``, or when every
  hop is trusted: the leftmost).  It must be an IP address, optionally with a port (port 0
  when absent, as in uvicorn); ``unknown``, obfuscated identifiers and garbage leave
  ``client`` as it was.  A client spoofing ``X-Forwarded-For`` only adds entries to the left
  of the ones trusted proxies append, so it cannot pass for anyone else.
* **Scheme.** ``proto`` / ``X-Forwarded-Proto`` of ``http``, ``https``, ``ws`` or ``wss``
  (case-insensitive) sets ``scheme``, mapped to the scope type: ``https``/``wss`` give
  ``https`` for HTTP and ``wss`` for WebSocket scopes.  Other values are ignored.
* **Server.** ``host`` / ``X-Forwarded-Host`` (which may carry a port) and
  ``X-Forwarded-Port`` set ``server``: ``(host, port)``, the port defaulting to 443 or 80 for
  the forwarded scheme.  The ``Host`` request header is *not* rewritten (hypercorn does that;
  uvicorn ignores X-Forwarded-Host): apps that build URLs from ``Host`` need a proxy that
  passes the original one (nginx: ``proxy_set_header Host $host``).
* **Which value.** ``Forwarded`` takes precedence over the ``X-Forwarded-*`` headers when it has
  at least one element; ``proto``/``host`` then come from the element that named the chosen
  client.  For X-Forwarded-Proto/Host/Port holding lists, the entry at the chosen hop's position
  is used when the list is as long as X-Forwarded-For, otherwise the rightmost one (the value
  our trusted peer set).  Repeated header lines are joined with commas, as HTTP defines.

The scope passed on is a copy whenever something changes; the incoming dict is never mutated.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Iterable
from typing import Any, Callable, NamedTuple, Union

__all__ = [
    "Forwarded",
    "ProxyHeadersMiddleware",
    "TrustedHosts",
    "parse_forwarded_header",
    "resolve_forwarded",
]

_IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

# Per scope type: the scheme a forwarded protocol maps to.
_SCHEMES: dict[str, dict[str, str]] = {
    "http": {"http": "http", "https": "https", "ws": "http", "wss": "https"},
    "websocket": {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"},
}
_SECURE = frozenset(("https", "wss"))

_FORWARDED = b"forwarded"
_X_FOR = b"x-forwarded-for"
_X_PROTO = b"x-forwarded-proto"
_X_HOST = b"x-forwarded-host"
_X_PORT = b"x-forwarded-port"
_HEADER_NAMES = frozenset((_FORWARDED, _X_FOR, _X_PROTO, _X_HOST, _X_PORT))

_CACHE_MAX = 4096
_AF_INET, _AF_INET6 = socket.AF_INET, socket.AF_INET6
_inet_pton, _inet_ntop = socket.inet_pton, socket.inet_ntop


class TrustedHosts:
    """The ``--forwarded-allow-ips`` set: ``host in trusted`` for a peer or a hop string."""

    def __init__(self, spec: str | Iterable[str]) -> None:
        entries = spec.split(",") if isinstance(spec, str) else list(spec)
        self.always = False
        self.exact: set[str] = set()  # normalised IP addresses and literals
        self.networks: list[_IPNetwork] = []
        for raw in entries:
            if not isinstance(raw, str):
                raise ValueError(f"{raw!r} is not a string")
            entry = raw.strip()
            if not entry:
                continue
            if entry == "*":
                self.always = True
            elif "/" in entry:
                try:
                    self.networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    raise ValueError(f"{entry!r} is not a valid IP network") from None
            else:
                # Literals (not IP addresses) are matched verbatim, like uvicorn's.
                self.exact.add(canonical_ip(entry.strip("[]")) or entry)
        self._cache: dict[str, bool] = {}

    def __contains__(self, host: object) -> bool:
        if self.always:
            return True
        if not host or not isinstance(host, str):
            return False
        if host in self.exact:
            return True
        cached = self._cache.get(host)
        if cached is None:
            cached = self._lookup(host)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[host] = cached
        return cached

    def _lookup(self, host: str) -> bool:
        ip = canonical_ip(host)
        if ip is None:
            return False
        if ip in self.exact:
            return True
        if not self.networks:
            return False
        address = ipaddress.ip_address(ip)
        return any(address in net for net in self.networks)

    def socket_networks(self) -> list[str]:
        """The entries a socket peer can match, for the core's PROXY protocol check: ``*``,
        or IP networks (an address as a one-address network); literals match no socket."""
        if self.always:
            return ["*"]
        networks = [str(ipaddress.ip_network(ip)) for ip in sorted(self.exact) if _is_ip(ip)]
        return networks + [str(net) for net in self.networks]

    def __repr__(self) -> str:
        if self.always:
            return "TrustedHosts('*')"
        items = sorted(self.exact) + [str(net) for net in self.networks]
        return f"TrustedHosts({','.join(items)!r})"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class Forwarded(NamedTuple):
    """What trusted proxy headers say; ``None`` fields leave the scope's value alone."""

    client: tuple[str, int] | None
    proto: str | None  # lower-cased http / https / ws / wss
    host: str | None
    port: int | None


def _split_node(node: str) -> tuple[str, str | None]:
    """``"1.2.3.4:80"`` / ``"[::1]:80"`` / ``"::1"`` / ``"_hidden"`` → (host, port text)."""
    node = node.strip()
    if ":" not in node:
        return node, None
    if node.startswith("["):
        end = node.find("]")
        if end < 0:
            return node, None
        rest = node[end + 1 :]
        return node[1:end], rest[1:] if rest.startswith(":") else None
    if node.count(":") == 1:
        host, _, port = node.partition(":")
        return host, port
    return node, None  # a bare IPv6 address (as some proxies write XFF) or no port


def _port_or_none(text: str | None) -> int | None:
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 5:  # not "²"
        return None
    port = int(text)
    return port if 0 < port <= 65535 else None


_MAPPED_PREFIX = b"\0" * 10 + b"\xff\xff"


def canonical_ip(text: str) -> str | None:
    """``text`` as the core writes addresses (IPv4 dotted quad, RFC 5952 IPv6, IPv4-mapped
    IPv6 as IPv4), or None when it is not an IP address.  ``inet_pton`` is some ten times
    faster than ``ipaddress`` and, for IPv4, accepts only the canonical form."""
    if "\0" in text:  # CPython refuses an embedded NUL, PyPy would stop reading there
        return None
    if ":" not in text:
        try:
            _inet_pton(_AF_INET, text)
        except OSError:
            return None
        return text
    try:
        packed = _inet_pton(_AF_INET6, text)
    except OSError:
        return None
    if packed[:12] == _MAPPED_PREFIX:
        return _inet_ntop(_AF_INET, packed[12:])
    return _inet_ntop(_AF_INET6, packed)


def _client_from_node(host: str, port_text: str | None) -> tuple[str, int] | None:
    """An IP-address hop as an ASGI ``client``; None for unknown / obfuscated / garbage."""
    ip = canonical_ip(host)
    if ip is None:
        return None
    return ip, _port_or_none(port_text) or 0


def _split_host_port(value: str) -> tuple[str | None, int | None]:
    """A Host-style ``name[:port]`` (IPv6 in brackets); (None, None) when unusable."""
    value = value.strip()
    if not value or any(c <= " " or c in "/\\@\x7f" for c in value):
        return None, None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None, None
        rest = value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None, None
        return value[1:end] or None, _port_or_none(rest[1:]) if rest else None
    host, sep, port = value.rpartition(":")
    if not sep:
        return value, None
    if ":" in host:  # an unbracketed IPv6 address, no port
        return value, None
    return host or None, _port_or_none(port)


def _choose_hop(hosts: list[str], trusted: TrustedHosts) -> int:
    """The index of the client: the rightmost untrusted hop, else the leftmost."""
    if not trusted.always:
        for index in range(len(hosts) - 1, -1, -1):
            if hosts[index] not in trusted:
                return index
    return 0


def parse_forwarded_header(value: str) -> list[dict[str, str]]:
    """RFC 7239 ``Forwarded`` → one dict per element (parameter names lower-cased).

    Quoted strings (with backslash escapes) may contain ``,``, ``;`` and ``=``.  Pairs that are
    not ``name=value`` are skipped; an element without any valid pair is dropped.
    """
    elements: list[dict[str, str]] = []
    current: dict[str, str] = {}
    pair: list[str] = []  # characters of the pair being read
    name: str | None = None
    i, n = 0, len(value)

    def end_pair() -> None:
        nonlocal name
        if name is not None:
            key = name.strip().lower()
            if key and key not in current:  # RFC 7239: a parameter occurs at most once
                current[key] = "".join(pair).strip()
        name = None
        pair.clear()

    while i < n:
        c = value[i]
        if c == '"' and name is not None and not "".join(pair).strip():
            i += 1
            while i < n and value[i] != '"':
                if value[i] == "\\" and i + 1 < n:
                    i += 1
                pair.append(value[i])
                i += 1
            i += 1  # the closing quote (or the end of a truncated value)
            continue
        if c == "=" and name is None:
            name = "".join(pair)
            pair.clear()
        elif c == ";":
            end_pair()
        elif c == ",":
            end_pair()
            if current:
                elements.append(current)
            current = {}
        else:
            pair.append(c)
        i += 1
    end_pair()
    if current:
        elements.append(current)
    return elements


def _pick(value: str, hop: int, hops: int) -> str:
    """From a comma-separated list, the entry aligned with the chosen X-Forwarded-For hop when
    the lengths match, else the rightmost one."""
    if "," not in value:
        return value.strip()
    values = value.split(",")
    return (values[hop] if len(values) == hops else values[-1]).strip()


def resolve_forwarded(
    trusted: TrustedHosts,
    *,
    forwarded: str | None = None,
    x_forwarded_for: str | None = None,
    x_forwarded_proto: str | None = None,
    x_forwarded_host: str | None = None,
    x_forwarded_port: str | None = None,
) -> Forwarded:
    """Interpret proxy header values (already known to come from a trusted peer)."""
    if forwarded is not None:
        elements = parse_forwarded_header(forwarded)
        if elements:
            nodes = [_split_node(e.get("for", "")) for e in elements]
            hop = _choose_hop([host for host, _ in nodes], trusted)
            element = elements[hop]
            proto = element.get("proto", "").lower() or None
            host, port = _split_host_port(element["host"]) if "host" in element else (None, None)
            return Forwarded(_client_from_node(*nodes[hop]), proto, host, port)

    client = None
    hop = hops = 0
    if x_forwarded_for is not None:
        if "," not in x_forwarded_for:  # one hop: the common case behind a single proxy
            node = _split_node(x_forwarded_for)
            if node[0]:
                hops = 1
                client = _client_from_node(*node)
        else:
            nodes = []
            for entry in x_forwarded_for.split(","):
                node = _split_node(entry)
                if node[0]:
                    nodes.append(node)
            if nodes:
                hops = len(nodes)
                hop = _choose_hop([host for host, _ in nodes], trusted)
                client = _client_from_node(*nodes[hop])

    proto = None
    if x_forwarded_proto is not None:
        proto = _pick(x_forwarded_proto, hop, hops).lower() or None
    host = port = None
    if x_forwarded_host is not None:
        host, port = _split_host_port(_pick(x_forwarded_host, hop, hops))
    if x_forwarded_port is not None:
        port = _port_or_none(_pick(x_forwarded_port, hop, hops)) or port
    return Forwarded(client, proto, host, port)


def _header_values(headers: Iterable[tuple[bytes, bytes]]) -> dict[bytes, str]:
    found: dict[bytes, str] = {}
    for name, value in headers:
        if name in _HEADER_NAMES:
            text = value.decode("latin-1")
            if name in found:
                found[name] += "," + text  # repeated lines are one comma-separated list
            else:
                found[name] = text
    return found


class ProxyHeadersMiddleware:
    """ASGI middleware applying trusted proxy headers to ``http`` and ``websocket`` scopes.

    ``__call__`` is a plain function returning the app's awaitable (no extra coroutine per
    request); ``rewrite(scope)`` returns ``scope`` itself when nothing applies, else a copy.
    """

    __slots__ = ("app", "trusted")

    def __init__(
        self,
        app: Callable[..., Awaitable[None]],
        trusted_hosts: TrustedHosts | str | Iterable[str] = "127.0.0.1",
    ) -> None:
        self.app = app
        if not isinstance(trusted_hosts, TrustedHosts):
            trusted_hosts = TrustedHosts(trusted_hosts)
        self.trusted = trusted_hosts

    def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Awaitable[None]:
        return self.app(self.rewrite(scope), receive, send)

    def rewrite(self, scope: dict[str, Any]) -> dict[str, Any]:
        # The common cases return early and cheaply: an untrusted peer, or no proxy header.
        client = scope.get("client")
        trusted = self.trusted
        if client is None:
            if not trusted.always:
                return scope
        elif client[0] not in trusted.exact and (
            not (trusted.networks or trusted.always) or client[0] not in trusted
        ):
            return scope
        for name, _ in scope.get("headers", ()):
            if name in _HEADER_NAMES:
                break
        else:
            return scope
        schemes = _SCHEMES.get(scope["type"])
        if schemes is None:
            return scope
        found = _header_values(scope["headers"])
        info = resolve_forwarded(
            trusted,
            forwarded=found.get(_FORWARDED),
            x_forwarded_for=found.get(_X_FOR),
            x_forwarded_proto=found.get(_X_PROTO),
            x_forwarded_host=found.get(_X_HOST),
            x_forwarded_port=found.get(_X_PORT),
        )
        new_scope = None
        if info.client is not None:
            new_scope = dict(scope)
            new_scope["client"] = info.client
        scheme = schemes.get(info.proto) if info.proto is not None else None
        if scheme is not None and scheme != scope.get("scheme"):
            if new_scope is None:
                new_scope = dict(scope)
            new_scope["scheme"] = scheme
        if info.host is not None or info.port is not None:
            if new_scope is None:
                new_scope = dict(scope)
            effective = new_scope.get("scheme", "http")
            server = scope.get("server") or (None, None)
            host = info.host if info.host is not None else server[0]
            port = info.port
            if port is None:
                port = 443 if effective in _SECURE else 80
            new_scope["server"] = (host, port)
        return scope if new_scope is None else new_scope
