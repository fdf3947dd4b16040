"""Proxy headers: the pure parser/resolver, the middleware, and the real server's scope.

The test client connects from 127.0.0.1, which the default ``--forwarded-allow-ips`` trusts;
``--forwarded-allow-ips 10.0.0.1`` makes it untrusted.
"""

import asyncio
import copy
import json
import os
import re
import tempfile
import uuid

import httpx
import pytest
from ferrocorn.config import Config, ConfigError
from ferrocorn.proxy_headers import (
    Forwarded,
    ProxyHeadersMiddleware,
    TrustedHosts,
    canonical_ip,
    parse_forwarded_header,
    resolve_forwarded,
)

from tests.support.helpers import RawConnection, request_bytes, run_ferrocorn, start_server

# ---------------------------------------------------------------- TrustedHosts


def test_trusted_hosts_ips_networks_literals():
    trusted = TrustedHosts("127.0.0.1, 10.0.0.0/8 ,::1, 2001:db8::/32, _edge, ")
    for host in ("127.0.0.1", "10.1.2.3", "::1", "0:0:0:0:0:0:0:1", "2001:db8::5", "_edge"):
        assert host in trusted, host
    for host in ("127.0.0.2", "11.0.0.1", "::2", "2001:db9::1", "_other", "", None, "unknown"):
        assert host not in trusted, host
    # IPv4-mapped IPv6 addresses are the IPv4 address.
    assert "::ffff:10.0.0.7" in trusted
    assert "::ffff:127.0.0.1" in trusted
    assert not trusted.always


def test_trusted_hosts_star_and_lists():
    star = TrustedHosts("*")
    assert star.always
    assert "203.0.113.9" in star and None in star and "anything" in star
    assert "192.168.1.1" in TrustedHosts(["192.168.1.0/24", "10.0.0.1"])
    assert "127.0.0.1" not in TrustedHosts("")


@pytest.mark.parametrize("bad", ["10.0.0.0/99", "300.1.2.3/8", "fe80::/200"])
def test_trusted_hosts_invalid_network(bad):
    with pytest.raises(ValueError, match="not a valid IP network"):
        TrustedHosts(bad)


def test_trusted_hosts_cache_is_bounded():
    trusted = TrustedHosts("10.0.0.0/8")
    for i in range(5000):
        assert f"11.0.{i // 256}.{i % 256}" not in trusted
    assert len(trusted._cache) <= 4096
    assert "10.9.9.9" in trusted and "10.9.9.9" in trusted  # cached answer is the same


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.2.3.4", "1.2.3.4"),
        ("255.255.255.255", "255.255.255.255"),
        ("2001:DB8:0:0:0:0:0:1", "2001:db8::1"),
        ("::ffff:10.1.2.3", "10.1.2.3"),
        ("::1", "::1"),
        ("1.2.3", None),
        ("1.2.3.256", None),
        ("01.2.3.4", None),
        ("1.2.3.4 ", None),
        ("1.2.3.4\x00", None),
        ("example.com", None),
        ("unknown", None),
        ("_hidden", None),
        ("", None),
        ("::g", None),
    ],
)
def test_canonical_ip(text, expected):
    assert canonical_ip(text) == expected


# ---------------------------------------------------------------- Forwarded (RFC 7239) parser


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            "for=192.0.2.60;proto=http;by=203.0.113.43",
            [{"for": "192.0.2.60", "proto": "http", "by": "203.0.113.43"}],
        ),
        ('For="[2001:db8:cafe::17]:4711"', [{"for": "[2001:db8:cafe::17]:4711"}]),
        ("for=192.0.2.43, for=198.51.100.17", [{"for": "192.0.2.43"}, {"for": "198.51.100.17"}]),
        ('for="_a,b;c=d";proto=https', [{"for": "_a,b;c=d", "proto": "https"}]),
        (r'for="a\"b\\c"', [{"for": 'a"b\\c'}]),
        (";;for=1.2.3.4;;", [{"for": "1.2.3.4"}]),
        (" for = 1.2.3.4 ; PROTO = HTTPS ", [{"for": "1.2.3.4", "proto": "HTTPS"}]),
        ("for=1.1.1.1;for=2.2.2.2", [{"for": "1.1.1.1"}]),  # a parameter occurs once
        ('host="example.com:8080"', [{"host": "example.com:8080"}]),
        ("garbage", []),
        ("for", []),
        ("", []),
        (",,,", []),
        ('for="unterminated', [{"for": "unterminated"}]),
        ("for=unknown, for=_hidden", [{"for": "unknown"}, {"for": "_hidden"}]),
    ],
)
def test_parse_forwarded_header(header, expected):
    assert parse_forwarded_header(header) == expected


# ---------------------------------------------------------------- resolve_forwarded

LOCAL = TrustedHosts("127.0.0.1")
CHAIN = TrustedHosts("127.0.0.1,10.0.0.0/8")


@pytest.mark.parametrize(
    ("xff", "trusted", "client"),
    [
        ("1.2.3.4", LOCAL, ("1.2.3.4", 0)),
        ("  1.2.3.4  ", LOCAL, ("1.2.3.4", 0)),
        # The rightmost untrusted hop, walking from the right through trusted proxies.
        ("5.5.5.5, 10.1.1.1, 10.2.2.2", CHAIN, ("5.5.5.5", 0)),
        # A spoofed entry left of the real client does not count.
        ("1.1.1.1, 5.5.5.5, 10.0.0.2", CHAIN, ("5.5.5.5", 0)),
        # An untrusted proxy stops the walk: it is the client as far as we can tell.
        ("5.5.5.5, 8.8.8.8, 10.0.0.2", CHAIN, ("8.8.8.8", 0)),
        # Every hop trusted: the leftmost one.
        ("10.0.0.3, 10.0.0.2", CHAIN, ("10.0.0.3", 0)),
        # '*': the leftmost one, like uvicorn.
        ("1.1.1.1, 2.2.2.2", TrustedHosts("*"), ("1.1.1.1", 0)),
        # Ports, brackets, bare IPv6, mapped IPv4.
        ("1.2.3.4:5678", LOCAL, ("1.2.3.4", 5678)),
        ("[2001:db8::1]:443", LOCAL, ("2001:db8::1", 443)),
        ("2001:db8::1", LOCAL, ("2001:db8::1", 0)),
        ("::ffff:1.2.3.4", LOCAL, ("1.2.3.4", 0)),
        ("1.2.3.4:99999", LOCAL, ("1.2.3.4", 0)),
        # Not an address: client unchanged.
        ("unknown", LOCAL, None),
        ("_hidden", LOCAL, None),
        ("not-an-ip", LOCAL, None),
        ("", LOCAL, None),
        (" , ", LOCAL, None),
        ("1.2.3.4, unknown", LOCAL, None),
    ],
)
def test_x_forwarded_for(xff, trusted, client):
    assert resolve_forwarded(trusted, x_forwarded_for=xff).client == client


def test_x_forwarded_proto_host_port():
    r = resolve_forwarded(LOCAL, x_forwarded_proto=" HTTPS ")
    assert r == Forwarded(None, "https", None, None)
    r = resolve_forwarded(LOCAL, x_forwarded_host="example.com:8443")
    assert (r.host, r.port) == ("example.com", 8443)
    r = resolve_forwarded(LOCAL, x_forwarded_host="example.com:8443", x_forwarded_port="9000")
    assert (r.host, r.port) == ("example.com", 9000)
    for bad_port in ("nope", "0", "65536", "-1", "\xb2", "1e3", "123456"):
        r = resolve_forwarded(LOCAL, x_forwarded_host="example.com", x_forwarded_port=bad_port)
        assert (r.host, r.port) == ("example.com", None), bad_port
    r = resolve_forwarded(LOCAL, x_forwarded_for="1.2.3.4:\xb2")
    assert r.client == ("1.2.3.4", 0)
    r = resolve_forwarded(LOCAL, x_forwarded_host="[2001:db8::2]:81")
    assert (r.host, r.port) == ("2001:db8::2", 81)
    r = resolve_forwarded(LOCAL, x_forwarded_port="8080")
    assert (r.host, r.port) == (None, 8080)
    for bad in ("", "exa mple.com", "a/b", "[::1", "[::1]x", "user@host"):
        assert resolve_forwarded(LOCAL, x_forwarded_host=bad).host is None, bad


def test_x_forwarded_lists_follow_the_chosen_hop():
    # Aligned with X-Forwarded-For: the entry of the chosen hop.
    r = resolve_forwarded(
        CHAIN,
        x_forwarded_for="5.5.5.5, 10.0.0.9",
        x_forwarded_proto="https, http",
        x_forwarded_host="public.example, internal.example",
        x_forwarded_port="443, 8080",
    )
    assert r == Forwarded(("5.5.5.5", 0), "https", "public.example", 443)
    # Not aligned: the rightmost entry (set by our trusted peer).
    r = resolve_forwarded(LOCAL, x_forwarded_for="5.5.5.5", x_forwarded_proto="http, https")
    assert r.proto == "https"
    r = resolve_forwarded(LOCAL, x_forwarded_proto="https, http")
    assert r.proto == "http"


def test_forwarded_header_resolution():
    r = resolve_forwarded(LOCAL, forwarded='for="[2001:db8::1]:4711";proto=HTTPS;host=example.com')
    assert r == Forwarded(("2001:db8::1", 4711), "https", "example.com", None)
    # Walk from the right; proto/host from the element naming the chosen client.
    r = resolve_forwarded(
        CHAIN,
        forwarded="for=1.1.1.1;proto=https;host=a.example, for=10.0.0.5;proto=http;host=b",
    )
    assert r == Forwarded(("1.1.1.1", 0), "https", "a.example", None)
    # Obfuscated or unknown client: ignored, but the element's proto/host still apply.
    r = resolve_forwarded(LOCAL, forwarded="for=_hidden;proto=https")
    assert r == Forwarded(None, "https", None, None)
    r = resolve_forwarded(LOCAL, forwarded="for=unknown;host=example.org:8000")
    assert r == Forwarded(None, None, "example.org", 8000)
    # An element without for= is an unknown hop.
    r = resolve_forwarded(LOCAL, forwarded="proto=https")
    assert r == Forwarded(None, "https", None, None)
    # A trusted obfuscated proxy (a literal in --forwarded-allow-ips) is walked through.
    r = resolve_forwarded(TrustedHosts("127.0.0.1,_edge"), forwarded="for=2.2.2.2, for=_edge")
    assert r.client == ("2.2.2.2", 0)
    # '*': the leftmost element.
    r = resolve_forwarded(TrustedHosts("*"), forwarded="for=3.3.3.3, for=4.4.4.4")
    assert r.client == ("3.3.3.3", 0)


def test_forwarded_takes_precedence_unless_empty():
    r = resolve_forwarded(
        LOCAL,
        forwarded="for=1.1.1.1;proto=http",
        x_forwarded_for="2.2.2.2",
        x_forwarded_proto="https",
    )
    assert r == Forwarded(("1.1.1.1", 0), "http", None, None)
    r = resolve_forwarded(
        LOCAL, forwarded="garbage", x_forwarded_for="2.2.2.2", x_forwarded_proto="https"
    )
    assert r == Forwarded(("2.2.2.2", 0), "https", None, None)


# ---------------------------------------------------------------- the middleware


def make_scope(headers, client=("127.0.0.1", 50000), scope_type="http", scheme="http"):
    return {
        "type": scope_type,
        "scheme": scheme if scope_type == "http" else "ws",
        "client": client,
        "server": ("127.0.0.1", 8000),
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "path": "/",
    }


def rewrite(headers, trusted="127.0.0.1", **kwargs):
    scope = make_scope(headers, **kwargs)
    before = copy.deepcopy(scope)
    result = ProxyHeadersMiddleware(None, trusted).rewrite(scope)
    assert scope == before, "the incoming scope must not be mutated"
    return scope, result


def test_middleware_rewrites_a_copy():
    scope, result = rewrite(
        [
            ("X-Forwarded-For", "1.2.3.4"),
            ("X-Forwarded-Proto", "https"),
            ("X-Forwarded-Host", "example.com"),
        ]
    )
    assert result is not scope
    assert result["client"] == ("1.2.3.4", 0)
    assert result["scheme"] == "https"
    assert result["server"] == ("example.com", 443)
    assert result["headers"] == scope["headers"]  # the Host header is not rewritten
    assert result["path"] == "/"


def test_middleware_leaves_the_scope_alone():
    # No proxy header, or an untrusted peer: the very same object.
    for headers, kwargs in [
        ([("Host", "x"), ("User-Agent", "t")], {}),
        ([("X-Forwarded-For", "1.2.3.4")], {"trusted": "10.0.0.1"}),
        ([("X-Forwarded-For", "1.2.3.4")], {"client": ("203.0.113.5", 1)}),
        ([("X-Forwarded-Proto", "ftp")], {}),
        ([("X-Forwarded-Proto", "http")], {}),  # already http
        ([("X-Forwarded-For", "unknown")], {}),
    ]:
        scope, result = rewrite(headers, **kwargs)
        assert result is scope, (headers, kwargs)


def test_middleware_unix_socket_peer_needs_star():
    headers = [("X-Forwarded-For", "1.2.3.4")]
    scope, result = rewrite(headers, client=None)
    assert result is scope
    scope, result = rewrite(headers, client=None, trusted="*")
    assert result["client"] == ("1.2.3.4", 0)


def test_middleware_schemes_and_server_ports():
    for proto, scope_type, scheme in [
        ("https", "http", "https"),
        ("wss", "http", "https"),
        ("ws", "http", "http"),
        ("https", "websocket", "wss"),
        ("http", "websocket", "ws"),
        ("wss", "websocket", "wss"),
    ]:
        _, result = rewrite([("X-Forwarded-Proto", proto)], scope_type=scope_type, scheme="https")
        assert result.get("scheme") == scheme, (proto, scope_type)
    _, result = rewrite([("X-Forwarded-Host", "example.com")])
    assert result["server"] == ("example.com", 80)
    _, result = rewrite([("X-Forwarded-Host", "example.com")], scope_type="websocket")
    assert result["server"] == ("example.com", 80)
    _, result = rewrite([("X-Forwarded-Port", "8443")])
    assert result["server"] == ("127.0.0.1", 8443)
    _, result = rewrite([("Forwarded", 'proto=https;host="[::1]:9443"')])
    assert result["server"] == ("::1", 9443)
    assert result["scheme"] == "https"


def test_middleware_joins_repeated_header_lines():
    _, result = rewrite(
        [("X-Forwarded-For", "5.5.5.5"), ("X-Forwarded-For", "10.0.0.2")],
        trusted="127.0.0.1,10.0.0.0/8",
    )
    assert result["client"] == ("5.5.5.5", 0)
    _, result = rewrite(
        [("Forwarded", "for=6.6.6.6"), ("Forwarded", "for=10.0.0.3")],
        trusted="127.0.0.1,10.0.0.0/8",
    )
    assert result["client"] == ("6.6.6.6", 0)


def test_middleware_call_passes_the_rewritten_scope():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope)

    middleware = ProxyHeadersMiddleware(app)
    scope = make_scope([("X-Forwarded-For", "9.9.9.9")])
    asyncio.run(middleware(scope, None, None))
    lifespan = {"type": "lifespan"}
    asyncio.run(middleware(lifespan, None, None))
    assert seen[0]["client"] == ("9.9.9.9", 0)
    assert scope["client"] == ("127.0.0.1", 50000)
    assert seen[1] is lifespan


def test_config_options(monkeypatch):
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    config = Config("m:app")
    assert config.proxy_headers is True
    assert config.forwarded_allow_ips == "127.0.0.1"
    assert "127.0.0.1" in config.trusted_hosts
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "10.0.0.0/8")
    config = Config("m:app")
    assert "10.2.3.4" in config.trusted_hosts and "127.0.0.1" not in config.trusted_hosts
    config = Config("m:app", forwarded_allow_ips=["192.168.0.1"], proxy_headers=False)
    assert "192.168.0.1" in config.trusted_hosts and config.proxy_headers is False
    with pytest.raises(ConfigError, match="Invalid forwarded_allow_ips: '1.2.3.4/40' is not"):
        Config("m:app", forwarded_allow_ips="1.2.3.4/40")


def test_cli_environment_variables(monkeypatch):
    from click.testing import CliRunner
    from ferrocorn import cli, server

    configs = []
    monkeypatch.setattr(server, "run_config", lambda config: configs.append(config) or 0)
    runner = CliRunner()
    result = runner.invoke(cli.main, ["m:app"], env={"FORWARDED_ALLOW_IPS": "10.0.0.1"})
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        cli.main,
        ["m:app"],
        env={"FORWARDED_ALLOW_IPS": "10.0.0.1", "FERROCORN_FORWARDED_ALLOW_IPS": "10.0.0.2"},
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        cli.main,
        ["m:app", "--forwarded-allow-ips", "*", "--no-proxy-headers"],
        env={"FERROCORN_FORWARDED_ALLOW_IPS": "10.0.0.2"},
    )
    assert result.exit_code == 0, result.output
    assert [c.forwarded_allow_ips for c in configs] == ["10.0.0.1", "10.0.0.2", "*"]
    assert [c.proxy_headers for c in configs] == [True, True, False]


# ---------------------------------------------------------------- the real server

# Three code paths apply proxy headers: the middleware (no access log), the wrapper with the
# default access line, and the extended wrapper (custom access-log format and metrics).
PATHS = {
    "middleware": ["--no-access-log"],
    "access-log": [],
    "extended": [
        "--access-log-format",
        "%(client)s %(scheme)s %(request_id)s",
        "--metrics",
        "--metrics-port",
        "0",
    ],
}


@pytest.fixture(scope="module", params=sorted(PATHS))
def trusting_server(request):
    server = start_server("tests.apps.basic:app", *PATHS[request.param])
    server.path_name = request.param
    yield server
    server.close()


def scope_of(server, headers, path="/scope"):
    resp = httpx.get(server.url + path, headers=headers, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_server_trusted_peer(trusting_server):
    s = scope_of(
        trusting_server,
        {
            "X-Forwarded-For": "203.0.113.7, 127.0.0.1",
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Host": "example.com",
        },
    )
    assert s["client"] == ["203.0.113.7", 0]
    assert s["client_item_types"] == ["str", "int"]
    assert s["scheme"] == "https"
    assert s["server"] == ["example.com", 443]
    assert ["host", f"127.0.0.1:{trusting_server.port}"] in s["headers"]

    s = scope_of(
        trusting_server,
        {"Forwarded": 'for="[2001:db8::1]:4711";proto=https;host="example.org:8443"'},
    )
    assert (s["client"], s["scheme"], s["server"]) == (
        ["2001:db8::1", 4711],
        "https",
        ["example.org", 8443],
    )

    s = scope_of(trusting_server, {"X-Forwarded-Port": "8080", "X-Forwarded-Proto": "http"})
    assert s["client"][0] == "127.0.0.1" and s["client"][1] > 0
    assert (s["scheme"], s["server"]) == ("http", ["127.0.0.1", 8080])


def test_server_without_proxy_headers_is_untouched(trusting_server):
    s = scope_of(trusting_server, {})
    assert s["client"][0] == "127.0.0.1" and s["client"][1] > 0
    assert s["scheme"] == "http"
    assert s["server"] == ["127.0.0.1", trusting_server.port]


def test_server_access_log_shows_forwarded_client(trusting_server):
    if trusting_server.path_name == "middleware":
        pytest.skip("no access log")
    marker = uuid.uuid4().hex
    httpx.get(
        trusting_server.url + "/hello",
        params={"m": marker},
        timeout=10,
        headers={
            "X-Forwarded-For": "198.51.100.4",
            "X-Forwarded-Proto": "https",
            "X-Request-ID": marker,
        },
    )
    if trusting_server.path_name == "extended":
        expected = f"198.51.100.4:0 https {marker}"
    else:
        expected = f'198.51.100.4:0 - "GET /hello?m={marker} HTTP/1.1" 200'
    assert trusting_server.wait_for_output(re.escape(expected), timeout=5), trusting_server.output()


@pytest.mark.parametrize(
    "flags",
    [
        ["--forwarded-allow-ips", "10.0.0.1"],
        ["--forwarded-allow-ips", "10.0.0.0/8"],
        ["--no-proxy-headers"],
        ["--no-proxy-headers", "--no-access-log"],
        ["--forwarded-allow-ips", "10.0.0.1", "--no-access-log"],
        ["--forwarded-allow-ips", "10.0.0.1", "--metrics", "--metrics-port", "0"],
    ],
)
def test_server_untrusted_peer_headers_ignored(server_factory, flags):
    server = server_factory("tests.apps.basic:app", *flags)
    s = scope_of(
        server,
        {
            "X-Forwarded-For": "203.0.113.7",
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Host": "example.com",
            "Forwarded": "for=1.1.1.1",
        },
    )
    assert s["client"][0] == "127.0.0.1"
    assert s["scheme"] == "http"
    assert s["server"] == ["127.0.0.1", server.port]


@pytest.mark.parametrize(
    ("allow", "xff", "client"),
    [
        ("127.0.0.0/8", "203.0.113.7", "203.0.113.7"),
        ("127.0.0.1,10.0.0.0/8", "1.1.1.1, 5.5.5.5, 10.9.8.7, 10.0.0.1", "5.5.5.5"),
        ("*", "1.1.1.1, 5.5.5.5, 10.9.8.7", "1.1.1.1"),
    ],
)
def test_server_cidrs_star_and_hops(server_factory, allow, xff, client):
    server = server_factory("tests.apps.basic:app", "--forwarded-allow-ips", allow)
    assert scope_of(server, {"X-Forwarded-For": xff})["client"] == [client, 0]


def test_server_environment_variable(server_factory):
    server = server_factory("tests.apps.basic:app", env={"FORWARDED_ALLOW_IPS": "10.0.0.1"})
    assert scope_of(server, {"X-Forwarded-For": "203.0.113.7"})["client"][0] == "127.0.0.1"
    server = server_factory(
        "tests.apps.basic:app",
        env={"FORWARDED_ALLOW_IPS": "10.0.0.1", "FERROCORN_FORWARDED_ALLOW_IPS": "127.0.0.1"},
    )
    assert scope_of(server, {"X-Forwarded-For": "203.0.113.7"})["client"][0] == "203.0.113.7"


@pytest.mark.parametrize(("allow", "trusted"), [("127.0.0.1", False), ("*", True)])
def test_server_unix_socket_peer(server_factory, allow, trusted):
    path = os.path.join(tempfile.mkdtemp(prefix="fc-"), "s.sock")
    server = server_factory(
        "tests.apps.basic:app", "--uds", path, "--forwarded-allow-ips", allow, host_port=False
    )
    with RawConnection(uds=path) as conn:
        conn.send(
            request_bytes(
                "GET",
                "/scope",
                [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")],
            )
        )
        s = json.loads(conn.read_response().body)
    if trusted:
        assert (s["client"], s["scheme"]) == (["203.0.113.7", 0], "https")
    else:
        assert (s["client"], s["scheme"]) == (None, "http")
    server.close()


def test_invalid_forwarded_allow_ips_is_a_one_line_error():
    proc = run_ferrocorn("tests.apps.basic:app", "--forwarded-allow-ips", "10.0.0.0/99")
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert "Invalid forwarded_allow_ips: '10.0.0.0/99' is not a valid IP network" in err


@pytest.mark.parametrize("flags", [[], ["--no-access-log"]])
def test_server_websocket_scope(server_factory, flags):
    from tests.support.wsraw import TEXT, RawWebSocket

    server = server_factory("tests.apps.ws_app:app", *flags)
    headers = [
        ("X-Forwarded-For", "203.0.113.8"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "ws.example"),
    ]
    with RawWebSocket(server.port, "/scope", extra_headers=headers) as ws:
        frame = ws.recv_frame()
        assert frame.opcode == TEXT
        s = json.loads(frame.payload)
    assert s["type"] == "websocket"
    assert (s["client"], s["scheme"]) == (["203.0.113.8", 0], "wss")
    assert s["server"] == ["ws.example", 443]
    with RawWebSocket(server.port, "/scope") as ws:
        s = json.loads(ws.recv_frame().payload)
    assert (s["client"][0], s["scheme"]) == ("127.0.0.1", "ws")
