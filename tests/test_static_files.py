"""The core's static route (``--static-path-route`` / ``--static-path-mount``,
src/server/static_route/, the rules in src/http/static_files/): files served without the
app, over HTTP/1.1, HTTP/2 and TLS; traversal refused with 404; validators, 304, ranges,
precompressed siblings, HEAD, 405, directories; the access log, the metrics, a big file's
memory and a download across a graceful shutdown.
"""

import gzip
import hashlib
import os
import re
import signal
import ssl

import httpx
import pytest

from tests.support.helpers import (
    RawConnection,
    raw_request,
    request_bytes,
    run_ferrocorn,
    start_server,
)
from tests.support.tls_certs import certs

APP = "tests.apps.basic:app"
MiB = 1 << 20
BIG = 64 * MiB
SECRET = b"the secret outside the mount"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    base = tmp_path_factory.mktemp("static")
    root = base / "root"
    (root / "sub").mkdir(parents=True)
    files = {
        "hello.txt": b"hello static\n" * 100,
        "app.js": b"console.log(1);\n",
        "site.css": b"body{}\n",
        "data.bin": os.urandom(1000),
        "a b.txt": b"spaced",
        "sub/index.html": b"<p>index</p>",
        "comp.txt": b"plain " * 50,
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    files["comp.txt.gz"] = gzip.compress(files["comp.txt"])
    (root / "comp.txt.gz").write_bytes(files["comp.txt.gz"])
    (root / "comp.txt.br").write_bytes(b"pretend brotli")
    with open(root / "big.bin", "wb") as f:  # sparse: no disk used
        f.truncate(BIG)
    (base / "secret").write_bytes(SECRET)
    os.symlink(base / "secret", root / "escape")
    os.symlink(root / "hello.txt", root / "inner")
    return root, files


@pytest.fixture(scope="module", params=["on", "auto"])
def server(tree, request):
    """Cleartext, by sendfile(2) (`on`) and read and written (`auto`, to this host's client)."""
    root, _ = tree
    flags = ["--static-path-route", "/static", "--static-path-mount", str(root)]
    flags += ["--sendfile", request.param]
    with start_server(APP, *flags, "--static-path-expires", "60") as s:
        yield s


@pytest.fixture(scope="module")
def tls_server(tree):
    """TLS, symlinks followed, directories answered with their index."""
    root, _ = tree
    c = certs()
    flags = [
        "--static-path-route", "/assets/",
        "--static-path-mount", str(root),
        "--static-path-follow-symlinks",
        "--static-path-index", "index.html",
        "--ssl-certfile", c.path("server.pem"),
        "--ssl-keyfile", c.path("server.key"),
    ]  # fmt: skip
    with start_server(APP, *flags, "--no-access-log") as s:
        s.base = "https://localhost:%d" % s.port
        s.verify = ssl.create_default_context(cafile=c.ca_pem)
        yield s


def get(server, target, headers=(), method="GET"):
    return raw_request(server.port, method, target, list(headers))


@pytest.mark.parametrize("http2", [False, True])
def test_files_with_their_types_and_validators(server, tree, http2):
    _, files = tree
    with httpx.Client(base_url=server.url, timeout=10, http1=not http2, http2=http2) as client:
        for name, ctype in (
            ("hello.txt", "text/plain; charset=utf-8"),
            ("app.js", "text/javascript; charset=utf-8"),
            ("site.css", "text/css; charset=utf-8"),
            ("data.bin", "application/octet-stream"),
            ("a%20b.txt", "text/plain; charset=utf-8"),
        ):
            response = client.get("/static/" + name, headers={"accept-encoding": "identity"})
            assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
            assert response.status_code == 200, name
            assert response.content == files[name.replace("%20", " ")]
            h = response.headers
            assert h["content-type"] == ctype
            assert h["content-length"] == str(len(response.content))
            assert h["accept-ranges"] == "bytes"
            assert re.fullmatch(r'"[0-9a-f]+-[0-9a-f]+-[0-9a-f]+"', h["etag"])
            assert h["last-modified"].endswith(" GMT")
            assert h["cache-control"] == "max-age=60"
            assert h["vary"].lower() == "accept-encoding"
            assert h["server"] == "ferrocorn" and "date" in h


def test_tls_http2_and_follow_symlinks_and_index(tls_server, tree):
    _, files = tree
    for http2 in (False, True):
        with httpx.Client(
            base_url=tls_server.base, verify=tls_server.verify, http2=http2, timeout=10
        ) as client:
            response = client.get("/assets/hello.txt")
            assert response.status_code == 200 and response.content == files["hello.txt"]
            assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
            assert "cache-control" in response.headers  # the default: a day
            assert response.headers["cache-control"] == "max-age=86400"
            # --static-path-follow-symlinks: a link out of the mount is served.
            assert client.get("/assets/escape").content == SECRET
            index = client.get("/assets/sub/")
            assert index.status_code == 200 and index.content == files["sub/index.html"]
            assert index.headers["content-type"] == "text/html; charset=utf-8"
            moved = client.get("/assets/sub?x=1")
            assert moved.status_code == 301
            assert moved.headers["location"] == "/assets/sub/?x=1"
            # Still traversal-proof with symlinks followed.
            assert client.get("/assets/%2e%2e/secret").status_code == 404


@pytest.mark.parametrize(
    "target",
    [
        "/static/../secret",
        "/static/sub/../../secret",
        "/static/%2e%2e/secret",
        "/static/%2E%2E/secret",
        "/static/.%2e/secret",
        "/static/..%2fsecret",
        "/static/%2e%2e%2fsecret",
        "/static/..%5csecret",
        "/static/..\\secret",
        "/static/hello.txt%00",
        "/static/%00",
        "/static/escape",
        "/static/sub",
        "/static/sub/",
        "/static/",
        "/static",
        "/static/missing.txt",
        "/static/hello.txt/",
    ],
)
def test_traversal_directories_and_missing_files_are_404(server, target):
    response = get(server, target)
    assert response.status == 404, (target, response)
    assert response.body == b"Not Found"
    assert SECRET not in response.body


def test_symlinks_inside_the_mount_are_served(server, tree):
    _, files = tree
    assert get(server, "/static/inner").body == files["hello.txt"]


def test_paths_outside_the_prefixes_go_to_the_app(server):
    assert get(server, "/hello").body == b"hello world"
    response = get(server, "/staticx/hello.txt")
    assert response.status == 404 and response.body.startswith(b"no route")  # the app's


def test_head_and_other_methods(server, tree):
    _, files = tree
    head = get(server, "/static/hello.txt", method="HEAD")
    assert head.status == 200 and head.body == b""
    assert head.header("content-length") == str(len(files["hello.txt"]))
    assert head.header("etag") and head.header("last-modified")
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        response = get(server, "/static/hello.txt", method=method)
        assert response.status == 405, method
        assert response.header("allow") == "GET, HEAD"
    # The connection stays usable after a 404 and a 405 (assets come many per page).
    with RawConnection(server.port) as conn:
        for target in ("/static/nope", "/static/hello.txt"):
            conn.send(request_bytes("GET", target))
            assert conn.read_response("GET").status in (404, 200)
        conn.send(request_bytes("DELETE", "/static/hello.txt"))
        assert conn.read_response("DELETE").status == 405
        conn.send(request_bytes("GET", "/static/hello.txt"))
        assert conn.read_response("GET").status == 200


def test_conditional_requests(server):
    first = get(server, "/static/hello.txt")
    etag, modified = first.header("etag"), first.header("last-modified")
    for headers in (
        [("If-None-Match", etag)],
        [("If-None-Match", "W/" + etag)],
        [("If-None-Match", '"other", ' + etag)],
        [("If-None-Match", "*")],
        [("If-Modified-Since", modified)],
        [("If-Modified-Since", "Fri, 01 Jan 2100 00:00:00 GMT")],
    ):
        response = get(server, "/static/hello.txt", headers)
        assert response.status == 304, headers
        assert response.body == b""
        assert response.header("etag") == etag
        assert response.header("cache-control") == "max-age=60"
    for headers in (
        [("If-None-Match", '"other"')],
        [("If-Modified-Since", "Thu, 01 Jan 1970 00:00:00 GMT")],
        # If-None-Match decides alone when both are present.
        [("If-None-Match", '"other"'), ("If-Modified-Since", modified)],
        [("If-Modified-Since", "garbage")],
    ):
        response = get(server, "/static/hello.txt", headers)
        assert response.status == 200, headers
        assert response.body == first.body
    assert get(server, "/static/hello.txt", [("If-Match", '"other"')]).status == 412
    assert get(server, "/static/hello.txt", [("If-Match", etag)]).status == 200


def test_ranges(server, tree):
    _, files = tree
    data = files["data.bin"]
    for value, start, end in (
        ("bytes=0-9", 0, 9),
        ("bytes=-5", 995, 999),
        ("bytes=10-", 10, 999),
        ("bytes=990-5000", 990, 999),
    ):
        response = get(server, "/static/data.bin", [("Range", value)])
        assert response.status == 206, value
        assert response.header("content-range") == "bytes %d-%d/1000" % (start, end)
        assert response.body == data[start : end + 1]
        assert response.header("content-length") == str(end - start + 1)
    for value in ("bytes=1000-", "bytes=5000-6000", "bytes=-0"):
        response = get(server, "/static/data.bin", [("Range", value)])
        assert response.status == 416, value
        assert response.header("content-range") == "bytes */1000"
    # Several ranges, another unit, bad syntax: the whole file.
    for value in ("bytes=0-1,5-6", "pages=1-2", "bytes=9-1"):
        response = get(server, "/static/data.bin", [("Range", value)])
        assert response.status == 200 and response.body == data, value
    # If-Range: the range only while the validator is current.
    etag = get(server, "/static/data.bin", method="HEAD").header("etag")
    current = get(server, "/static/data.bin", [("Range", "bytes=0-0"), ("If-Range", etag)])
    assert current.status == 206 and current.body == data[:1]
    stale = get(server, "/static/data.bin", [("Range", "bytes=0-0"), ("If-Range", '"old"')])
    assert stale.status == 200 and stale.body == data


@pytest.mark.parametrize("http2", [False, True])
def test_ranges_of_a_streamed_file(server, http2):
    with httpx.Client(base_url=server.url, timeout=30, http1=not http2, http2=http2) as client:
        response = client.get("/static/big.bin", headers={"range": "bytes=%d-" % (BIG - 300000)})
    assert response.status_code == 206
    assert response.headers["content-range"] == "bytes %d-%d/%d" % (BIG - 300000, BIG - 1, BIG)
    assert response.content == bytes(300000)


def test_precompressed_siblings(server, tree):
    _, files = tree
    cases = (
        ("gzip, deflate, br", "br", b"pretend brotli"),
        ("gzip", "gzip", files["comp.txt.gz"]),
        ("br;q=0.5, gzip;q=0.9", "gzip", None),
        ("identity", None, files["comp.txt"]),
        ("br;q=0, gzip;q=0", None, files["comp.txt"]),
    )
    etags = set()
    for accept, coding, body in cases:
        response = get(server, "/static/comp.txt", [("Accept-Encoding", accept)])
        assert response.status == 200, accept
        assert response.header("content-encoding") == coding, accept
        assert response.header("vary").lower() == "accept-encoding"
        assert response.header("content-type") == "text/plain; charset=utf-8"
        if body is not None:
            assert response.body == body, accept
        etags.add(response.header("etag"))
    assert len(etags) == 3  # one per representation
    gzipped = get(server, "/static/comp.txt", [("Accept-Encoding", "gzip")]).body
    assert gzip.decompress(gzipped) == files["comp.txt"]
    # A file without siblings is sent as is, with Vary all the same.
    plain = get(server, "/static/hello.txt", [("Accept-Encoding", "gzip, br")])
    assert plain.header("content-encoding") is None and plain.header("vary")


def test_big_file_streams_with_bounded_memory(server):
    def rss(pid):
        with open("/proc/%d/status" % pid) as f:
            return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024

    before = rss(server.proc.pid)
    digest = hashlib.sha256()
    peak = before
    with httpx.Client(timeout=60) as client:
        with client.stream("GET", server.url + "/static/big.bin") as response:
            assert response.status_code == 200
            assert response.headers["content-length"] == str(BIG)
            for i, chunk in enumerate(response.iter_bytes(1 << 20)):
                digest.update(chunk)
                if i % 8 == 0:
                    peak = max(peak, rss(server.proc.pid))
    assert digest.digest() == hashlib.sha256(bytes(BIG)).digest()
    assert peak - before < 32 * MiB, (before, peak)


def test_access_log_lines(server):
    start = len(server.output())
    get(server, "/static/hello.txt")
    get(server, "/static/nope")
    get(server, "/static/data.bin", [("Range", "bytes=0-1")])
    assert server.wait_for_output(r'"GET /static/hello\.txt HTTP/1\.1" 200', start=start)
    assert server.wait_for_output(r'"GET /static/nope HTTP/1\.1" 404', start=start)
    assert server.wait_for_output(r'"GET /static/data\.bin HTTP/1\.1" 206', start=start)


def test_metrics_count_static_responses(server_factory, tree):
    from tests.test_metrics import metrics_port, scrape

    root, _ = tree
    s = server_factory(APP, "--static-path-mount", str(root), "--metrics", "--metrics-port", "0")
    port = metrics_port(s)
    before = scrape(port)
    get(s, "/static/hello.txt")
    get(s, "/static/missing")
    after = scrape(port)

    def delta(name, labels=""):
        return after.get((name, labels), 0) - before.get((name, labels), 0)

    assert delta("ferrocorn_requests_total") == 2
    assert delta("ferrocorn_responses_total", 'status="200"') == 1
    assert delta("ferrocorn_responses_total", 'status="404"') == 1
    assert after[("ferrocorn_requests_in_flight", "")] == 0


def test_a_download_in_flight_finishes_across_a_graceful_shutdown(server_factory, tree):
    root, _ = tree
    s = server_factory(APP, "--static-path-mount", str(root), "--timeout-graceful-shutdown", "30")
    with RawConnection(s.port, timeout=30) as conn:
        conn.send(request_bytes("GET", "/static/big.bin"))
        head = conn.take(conn.find(b"\r\n\r\n") + 4)
        assert head.startswith(b"HTTP/1.1 200") and b"content-length: %d" % BIG in head.lower()
        s.proc.send_signal(signal.SIGTERM)
        got = 0
        while got < BIG and conn.fill(1 << 20):
            got += len(conn.take_all())
    assert got == BIG
    assert s.proc.wait(timeout=30) == 0


def _settle(path, mtime_ns):
    """An mtime well in the past: the cache keeps only files not modified in the last 2 s."""
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_cached_small_files_follow_every_change_on_disk(server_factory, tmp_path):
    """Small files are kept in memory (--static-path-cache-size) and checked with a stat per
    request: every way a deploy changes a file is seen by the very next request."""
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside.txt").write_bytes(b"O" * 1000)
    path = root / "f.txt"
    old = 1_600_000_000 * 10**9
    path.write_bytes(b"1" * 1000)
    _settle(path, old)
    flags = ["--static-path-route", "/s", "--static-path-mount", str(root), "--no-access-log"]
    s = server_factory(APP, *flags)

    def fetch(headers=()):
        r = get(s, "/s/f.txt", headers)
        return r.status, r.body, r.header("etag"), r.header("content-encoding")

    first = fetch()
    assert first[:2] == (200, b"1" * 1000)
    assert fetch() == first  # from memory now
    range_ = get(s, "/s/f.txt", [("Range", "bytes=10-19")])
    assert (range_.status, range_.body) == (206, b"1" * 10)
    assert get(s, "/s/f.txt", [("If-None-Match", first[2])]).status == 304

    # Rewritten in place, same size, mtime put back (rsync -t, a careful deploy): the
    # inode, size and mtime are the same, the ctime is not.
    with open(path, "r+b") as f:
        f.write(b"2" * 1000)
    _settle(path, old)
    assert fetch()[:2] == (200, b"2" * 1000)

    # Replaced by rename with the same size and mtime: another inode.
    staged = root / ".staged"
    staged.write_bytes(b"3" * 1000)
    _settle(staged, old)
    os.rename(staged, path)
    third = fetch()
    assert third[:2] == (200, b"3" * 1000) and third[2] != first[2]

    # A precompressed sibling that appears is served at once to a client that takes it.
    gz = gzip.compress(b"3" * 1000)
    (root / "f.txt.gz").write_bytes(gz)
    _settle(root / "f.txt.gz", old)
    assert fetch([("Accept-Encoding", "gzip")])[1::2] == (gz, "gzip")
    assert fetch()[1:] == third[1:]

    # A symlink out of the mount in its place, then nothing: both 404.
    path.unlink()
    os.symlink(tmp_path / "outside.txt", path)
    assert fetch()[0] == 404
    path.unlink()
    assert fetch()[0] == 404
    path.write_bytes(b"4" * 10)  # and back, fresh (too young to be kept)
    assert fetch()[:2] == (200, b"4" * 10)
    assert fetch()[:2] == (200, b"4" * 10)


def test_the_file_cache_can_be_turned_off(server_factory, tree):
    root, files = tree
    flags = ["--static-path-route", "/s", "--static-path-mount", str(root)]
    s = server_factory(APP, *flags, "--static-path-cache-size", "0")
    for _ in range(2):
        r = get(s, "/s/hello.txt")
        assert (r.status, r.body) == (200, files["hello.txt"])
    result = run_ferrocorn(APP, *flags, "--static-path-cache-size", "-1")
    assert result.returncode != 0 and b"static-path-cache-size" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--static-path-route", "/a"], "each route needs its mount"),
        (["--static-path-route", "nope", "--static-path-mount", "."], "must start with '/'"),
        (["--static-path-route", "/a/../b", "--static-path-mount", "."], "'..' segments"),
        (["--static-path-mount", ".", "--static-path-index", "../x"], "static_path_index"),
    ],
)
def test_bad_options_are_one_line_errors(args, message):
    result = run_ferrocorn(APP, *args)
    assert result.returncode != 0
    assert message in result.stderr.decode(), result.stderr
