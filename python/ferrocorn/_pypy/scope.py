"""PyPy: the ``http`` scope unpacked in Python from the one bytearray the core packs.

Under PyPy every object the extension creates or fills costs a C-API crossing, and the scope
is some twenty of them: built in Rust it took 2.9 µs a request, unpacked here by the JIT
0.7 µs. (A bytearray because cpyext hands one over more cheaply than bytes.) The packing is
``ScopeFactory::pack`` in ``src/asgi/scope.rs``; requests it does not carry (TLS, HTTP/2, a
NUL byte in a field) still get their scope built in Rust. Both paths must build the same
scope.
"""

from __future__ import annotations

from typing import Any, Callable

_METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH")}
_VERSIONS = {v.encode(): v for v in ("1.0", "1.1", "2", "3")}
# Shared by every scope, as in the core: it is constant.
_ASGI = {"version": "3.0", "spec_version": "2.5"}

# How many decoded hosts and paths an unpacker keeps (then it starts afresh).
_KNOWN_MAX = 512

# Field positions in the packing; header name/value pairs follow the last.
_METHOD, _VERSION, _RAW_PATH, _PATH, _QUERY = 0, 1, 2, 3, 4
_CLIENT_HOST, _CLIENT_PORT, _SERVER_HOST, _SERVER_PORT, _HEADERS = 5, 6, 7, 8, 9


def scope_unpacker(
    root_path: str, state: dict | None
) -> Callable[[bytes | bytearray], dict[str, Any]]:
    """The function that turns one packed request into its scope, for this server's
    ``root_path`` and lifespan ``state``."""
    root_raw = root_path.encode()
    # Hosts, ports and paths repeat from request to request (a connection's peer, the
    # server's address, an API's routes): each is decoded once, in a bounded table.
    known: dict[bytes, Any] = {}

    def text(raw: bytes) -> str:
        found = known.get(raw)
        if found is None:
            if len(known) >= _KNOWN_MAX:
                known.clear()
            found = known[raw] = raw.decode()
        return found

    def unpack(packed: bytes | bytearray) -> dict[str, Any]:
        f = bytes(packed).split(b"\0")
        raw_path = f[_RAW_PATH]
        # The decoded path is sent only when it differs; either way it is valid UTF-8.
        path = text(f[_PATH] or raw_path)
        if root_path:
            # The spec: `path` includes `root_path`; `raw_path` is what the client sent
            # behind the same prefix.
            path = root_path + path
            raw_path = root_raw + raw_path
        method = f[_METHOD]
        version = f[_VERSION]
        client_port = f[_CLIENT_PORT]
        server_port = f[_SERVER_PORT]
        # The keys in the order of the core's dict builder (src/asgi/scope.rs), so that an app
        # listing the scope sees the same on either path (tests/test_scope_parity.py).
        scope = {
            "type": "http",
            "scheme": "http",
            "method": _METHODS.get(method) or method.decode(),
            # Always present (the packing carries neither TLS nor HTTP/2: only the file sends,
            # and early hints on HTTP/1.1).
            "extensions": {
                "http.response.pathsend": {},
                "http.response.zerocopysend": {},
                "http.response.early_hint": {},
            }
            if version == b"1.1"
            else {"http.response.pathsend": {}, "http.response.zerocopysend": {}},
            "asgi": _ASGI,
            "http_version": _VERSIONS.get(version) or version.decode(),
            "path": path,
            "raw_path": raw_path,
            "query_string": f[_QUERY],
            "root_path": root_path,
            "headers": [(f[i], f[i + 1]) for i in range(_HEADERS, len(f), 2)],
            "client": (text(f[_CLIENT_HOST]), int(client_port)) if client_port else None,
            # A Unix socket has a path and no port.
            "server": (text(f[_SERVER_HOST]), int(server_port) if server_port else None),
        }
        if state is not None:
            scope["state"] = state.copy()  # a shallow copy per request (spec)
        return scope

    return unpack
