"""The HTTP connection scope the app receives (ASGI 3.0, HTTP spec 2.x)."""

import json

import httpx
import pytest

from tests.support.helpers import RawConnection, request_bytes, start_server


@pytest.fixture(scope="module")
def server():
    with start_server("tests.apps.basic:app", "--lifespan", "on") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


def get_scope(client, target="/scope", method="GET", **kwargs):
    resp = client.request(method, target, **kwargs)
    assert resp.status_code == 200, resp.text
    return resp.json()


def raw_scope(port, target="/scope", version="HTTP/1.1", headers=None, method="GET"):
    with RawConnection(port) as conn:
        conn.send(
            request_bytes(method, target, headers or [("Connection", "close")], version=version)
        )
        resp = conn.read_response(method)
        local = conn.sock.getsockname()
    assert resp is not None and resp.status == 200, resp
    return json.loads(resp.body), local


def test_basic_keys_and_constants(client):
    scope = get_scope(client)
    assert scope["type"] == "http"
    assert scope["asgi"]["version"] == "3.0"
    assert str(scope["asgi"]["spec_version"]).startswith("2.")
    assert scope["scheme"] == "http"
    assert scope["http_version"] == "1.1"
    assert scope["method"] == "GET"
    for key in ("path", "raw_path", "query_string", "root_path", "headers", "client", "server"):
        assert key in scope["keys"], key


FILE_SENDS = {"http.response.pathsend": {}, "http.response.zerocopysend": {}}


def test_extensions_always_present(client, server):
    """``extensions`` is in every scope, holding what works on the connection: cleartext
    HTTP/1.1 has neither trailers (HTTP/2 only) nor TLS, but the file sends and 103 Early
    Hints; HTTP/1.0 clients cannot take a 1xx response, so theirs has the file sends only."""
    scope = get_scope(client)
    assert "extensions" in scope["keys"]
    assert scope["extensions"] == {**FILE_SENDS, "http.response.early_hint": {}}
    # HTTP/1.0 too.
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/scope", version="HTTP/1.0"))
        extensions = json.loads(conn.read_response().body)["extensions"]
        assert extensions == FILE_SENDS


def test_http_version_1_0(server):
    scope, _ = raw_scope(server.port, version="HTTP/1.0", headers=[])
    assert scope["http_version"] == "1.0"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_method(client, method):
    scope = get_scope(client, method=method, content=b"x" if method in ("POST", "PUT") else None)
    assert scope["method"] == method


def test_path_percent_decoded_and_raw_path(server):
    scope, _ = raw_scope(server.port, "/scope/caf%C3%A9/a%20b?x=%20y&z=%C3%A9")
    assert scope["path"] == "/scope/café/a b"
    assert scope["path_type"] == "str"
    assert scope["raw_path"] == "/scope/caf%C3%A9/a%20b"
    assert scope["raw_path_type"] == "bytes"
    assert scope["query_string"] == "x=%20y&z=%C3%A9"
    assert scope["query_string_type"] == "bytes"


def test_path_with_invalid_utf8_escapes_gets_replacement_characters(server):
    # %FF is no UTF-8 byte and %C3 starts a sequence that never ends: each becomes U+FFFD.
    scope, _ = raw_scope(server.port, "/scope/a%FFb%C3")
    assert scope["path"] == "/scope/a\ufffdb\ufffd"
    assert scope["raw_path"] == "/scope/a%FFb%C3"


def test_encoded_route_name_decoded(server):
    # "/%73cope" decodes to "/scope": the app must see the decoded path.
    scope, _ = raw_scope(server.port, "/%73cope")
    assert scope["path"] == "/scope"
    assert scope["raw_path"] == "/%73cope"


def test_unroutable_path_decoded(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/caf%C3%A9/a%20b", [("Connection", "close")]))
        resp = conn.read_response()
    assert resp.status == 404
    assert resp.body.decode("utf-8") == "no route /café/a b"


def test_query_string_not_decoded(client):
    scope = get_scope(client, "/scope?a=1&b=%C3%A9+x&a=2")
    assert scope["query_string"] == "a=1&b=%C3%A9+x&a=2"
    assert scope["path"] == "/scope"
    assert scope["raw_path"] == "/scope"


def test_empty_query_string(client):
    scope = get_scope(client, "/scope")
    assert scope["query_string"] == ""
    assert scope["query_string_type"] == "bytes"


def test_root_path_default_empty(client):
    scope = get_scope(client)
    assert scope["root_path"] == ""
    assert scope["path"] == "/scope"


def test_headers_lowercase_duplicates_in_order(server):
    scope, _ = raw_scope(
        server.port,
        headers=[
            ("X-Dup", "first"),
            ("X-MiXeD-Case", "Value-Case-Kept"),
            ("x-dup", "second"),
            ("X-DUP", "third"),
            ("Connection", "close"),
        ],
    )
    headers = [tuple(h) for h in scope["headers"]]
    assert ("x-mixed-case", "Value-Case-Kept") in headers
    dups = [v for n, v in headers if n == "x-dup"]
    assert dups == ["first", "second", "third"]
    assert ("host", "test") in headers
    for name, _ in headers:
        assert name == name.lower(), name
    assert scope["headers_type"] in ("list", "tuple")
    for item_type, length, name_type, value_type in scope["header_item_types"]:
        # ASGI allows any 2-item iterable; ferrocorn promises 2-tuples (lists also accepted).
        assert item_type in ("tuple", "list")
        assert length == 2
        assert (name_type, value_type) == ("bytes", "bytes")


def test_client_and_server_addresses(server):
    scope, local = raw_scope(server.port)
    assert scope["client_item_types"] == ["str", "int"]
    assert scope["server_item_types"] == ["str", "int"]
    assert scope["client"] == [local[0], local[1]]
    assert scope["server"] == ["127.0.0.1", server.port]


def test_state_visible_and_shallow_copied(client):
    scope = get_scope(client)
    assert scope["has_state"]
    assert scope["state"].get("startup_value") == "set-at-startup"
    resp = client.post("/state/mutate")
    assert resp.status_code == 200, resp.text
    scope = get_scope(client)
    assert scope["state"].get("startup_value") == "set-at-startup"
    assert "added_by_request" not in scope["state"]


@pytest.fixture(scope="module")
def root_path_server():
    with start_server("tests.apps.basic:app", "--root-path", "/api") as s:
        yield s


def test_root_path_included_in_path(root_path_server):
    with httpx.Client(base_url=root_path_server.url, timeout=10) as c:
        scope = c.get("/scope?k=v").json()
    assert scope["root_path"] == "/api"
    assert scope["path"] == "/api/scope"
    assert scope["query_string"] == "k=v"
