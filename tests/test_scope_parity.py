"""The scope does not depend on how the core starts a request (black box).

Under PyPy an HTTP/1.1 cleartext request started through ``pypy_starter`` (the loop has no
task factory) gets its scope packed into a bytearray by the core and unpacked in Python
(``ferrocorn/_pypy/scope.py``); with a task factory on the loop, and for what the packing does
not carry (a NUL in a field), the scope is the dict built in Rust. Both must be the same scope.
Under CPython both servers build the dict in Rust, and this still checks that the task-factory
path gives what the default one gives.

Each case goes to two servers of tests/apps/scope_parity.py, one started plainly and one with
a task factory, over raw sockets; the app answers with a canonical text of its whole scope
(every key and type; only the client port and the listening address are replaced, as they
differ per connection and per server), and the two answers must be byte-identical.
"""

import os
import tempfile

import pytest

from tests.support.helpers import SERVER_PYTHON, RawConnection, start_server

ROOT_PATH = "/mount/r\u00e9"  # non-ASCII, as a root_path may be

# (id, raw request bytes): each is sent alone on a fresh connection.
REQUESTS = [
    ("simple", b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("dot-segments", b"GET //a/./b/../c HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("escaped-slash", b"GET /a%2Fb%2f HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("escaped-nul", b"GET /nul%00here?q=%00 HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("escaped-nul-only-in-query", b"GET /p?q=%00 HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("non-ascii-escapes", b"GET /caf%C3%A9/%E2%82%AC?x=%C3%A9 HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("invalid-utf8-escape", b"GET /bad%FF%C3 HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("raw-utf8-path", "GET /raw-\u00e9 HTTP/1.1\r\nHost: t\r\n\r\n".encode()),
    ("escaped-space-and-percent", b"GET /a%20b%25c HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("plus", b"GET /a+b?c=d+e&f=%2B HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("empty-query", b"GET /q? HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("question-mark-in-query", b"GET /q?a=1?b=2?? HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("asterisk", b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("absolute-form", b"GET http://example.com:8080/abs/p?q=1 HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("custom-method", b"PROPFIND /dav HTTP/1.1\r\nHost: t\r\n\r\n"),
    (
        "post-body",
        b"POST /submit HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
        b"Content-Length: 5\r\n\r\nhello",
    ),
    (
        "chunked-body",
        b"PUT /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    ),
    (
        "duplicate-headers",
        b"GET /dup HTTP/1.1\r\nHost: t\r\nX-Dup: one\r\nAccept: */*\r\nX-Dup: two\r\n"
        b"x-dup: three\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n",
    ),
    (
        "header-case",
        b"GET /case HTTP/1.1\r\nhOsT: t\r\nX-MiXeD-CaSe: VaLuE\r\nCONTENT-TYPE: Text/HTML\r\n\r\n",
    ),
    (
        "header-values",
        b"GET /values HTTP/1.1\r\nHost: t\r\nX-Empty:\r\nX-Spaces:   padded value  \r\n"
        b"X-Tab:\tin\tside\r\nX-Obs-Text: caf\xe9 \xff\r\nX-Colon: a:b: c\r\n\r\n",
    ),
    (
        "many-headers",
        b"GET /many HTTP/1.1\r\nHost: t\r\n"
        + b"".join(b"X-Header-%02d: value %d\r\n" % (i, i * 7) for i in range(80))
        + b"\r\n",
    ),
    ("http10", b"GET /ten?x=1 HTTP/1.0\r\n\r\n"),
    ("http10-with-host", b"GET /ten HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n\r\n"),
    ("head", b"HEAD /head HTTP/1.1\r\nHost: t\r\n\r\n"),
]

# The two servers of each pair differ only in the task factory.
SETUPS = {
    "tcp": [],
    "root-path": ["--root-path", ROOT_PATH],
    "uds": ["--uds", None],  # the path is made per server
}


def _start(flags, task_factory, socket_dir):
    flags = list(flags)
    uds = None
    if "--uds" in flags:
        uds = os.path.join(socket_dir, "factory.sock" if task_factory else "default.sock")
        flags[flags.index("--uds") + 1] = uds
    if task_factory:
        flags.append("--task-factory")
    argv = [SERVER_PYTHON, "-m", "tests.apps.scope_parity"] + flags
    server = start_server(None, argv=argv)
    server.uds = uds
    return server


@pytest.fixture(scope="module", params=sorted(SETUPS))
def servers(request):
    socket_dir = tempfile.mkdtemp(prefix="fc-parity-")
    started = []
    try:
        for task_factory in (False, True):
            started.append(_start(SETUPS[request.param], task_factory, socket_dir))
        yield started
    finally:
        for server in started:
            server.close()
        for name in os.listdir(socket_dir):
            os.unlink(os.path.join(socket_dir, name))
        os.rmdir(socket_dir)


def _exchange(server, data):
    with RawConnection(server.port, uds=server.uds) as conn:
        conn.send(data)
        method = data.split(b" ", 1)[0].decode()
        resp = conn.read_response(method)
    assert resp is not None, "no response for %r:\n%s" % (data[:200], server.output()[-3000:])
    return resp


@pytest.mark.parametrize("data", [r[1] for r in REQUESTS], ids=[r[0] for r in REQUESTS])
def test_same_scope_with_and_without_a_task_factory(servers, data):
    default, with_factory = servers
    plain = _exchange(default, data)
    factory = _exchange(with_factory, data)
    assert plain.status == factory.status, (plain, factory)
    assert plain.status == 200, plain
    if data.startswith(b"HEAD "):
        return  # no body to compare; the status and the head still had to match
    assert plain.body == factory.body, (
        "the scope differs for %r\n  default:      %s\n  task factory: %s"
        % (data[:300], plain.body.decode(), factory.body.decode())
    )


def test_two_requests_on_one_connection(servers):
    """A second request on a kept-alive connection gets the scope a first one would."""
    default, with_factory = servers
    answers = []
    for server in (default, with_factory):
        with RawConnection(server.port, uds=server.uds) as conn:
            conn.send(
                b"GET /first HTTP/1.1\r\nHost: t\r\n\r\n"
                b"GET /second?2 HTTP/1.1\r\nHost: t\r\nX-Second: yes\r\n\r\n"
            )
            first, second = conn.read_response(), conn.read_response()
        assert first is not None and second is not None, server.output()[-3000:]
        assert first.status == second.status == 200, (first, second)
        answers.append((first.body, second.body))
    assert answers[0] == answers[1]


def test_same_key_order(servers):
    """Not only the same keys and values: the same order, as an app that dumps the scope sees."""
    default, with_factory = servers
    data = b"GET /order HTTP/1.1\r\nHost: t\r\n\r\n"
    plain, factory = _exchange(default, data), _exchange(with_factory, data)
    assert plain.header("x-scope-keys") == factory.header("x-scope-keys")
