"""For tests/test_zerocopysend.py: ``http.response.zerocopysend`` from a raw ASGI app.

``GET /?name=F`` sends file F of ``ZEROCOPY_DIR``, its descriptor closed as soon as each
``send()`` returns (the core keeps its own). Query keys: ``parts`` (comma-separated ``z``
for the whole file, ``z:OFFSET:COUNT``, ``b:TEXT`` for a body message; the last part ends
the body), ``fd`` (pass an int descriptor instead of the file object), ``seek`` (move the
file to this position first and omit ``offset``), ``declare`` (a Content-Length),
``shrink_to`` (cut the file once the last ``send()`` returned), ``bad`` (an invalid
message, see ``BAD``). A ``send()`` that raises is answered with the exception as the body
(the head is held until the first body message, so it can still be sent).
"""

import io
import json
import os
from urllib.parse import parse_qs

from tests.apps.common import lifespan

DIR = os.environ.get("ZEROCOPY_DIR", "/tmp")


def _query(scope):
    return {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}


def _bad(case, f):
    """The invalid zerocopysend message named ``case``, for the file object ``f``."""
    r, w = os.pipe()
    os.write(w, b"pipe data")
    os.close(w)
    closed = os.dup(f.fileno())
    os.close(closed)
    messages = {
        "no_file": {},
        "str_file": {"file": "/etc/hostname"},
        "bool_file": {"file": True},
        "negative_fd": {"file": -3},
        "closed_fd": {"file": closed},
        "bytesio": {"file": io.BytesIO(b"abc")},
        "pipe": {"file": r},
        "str_offset": {"file": f, "offset": "1"},
        "negative_offset": {"file": f, "offset": -1},
        "offset_past_end": {"file": f, "offset": 10**9},
        "float_count": {"file": f, "count": 1.5},
        "negative_count": {"file": f, "count": -1},
        "count_past_end": {"file": f, "offset": 10, "count": 10**9},
    }
    return {"type": "http.response.zerocopysend", **messages[case]}, r


async def _send_error(send, err):
    text = "%s: %s" % (type(err).__name__, err)
    await send({"type": "http.response.body", "body": text.encode()})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    query = _query(scope)
    if scope["path"] == "/extensions":
        body = json.dumps(sorted(scope["extensions"])).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    if scope["path"] == "/before-start":
        with open(os.path.join(DIR, "small.bin"), "rb") as f:
            try:
                await send({"type": "http.response.zerocopysend", "file": f})
            except RuntimeError as err:
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await _send_error(send, err)
        return
    path = os.path.join(DIR, query.get("name", "small.bin"))
    headers = [(b"content-type", b"application/octet-stream")]
    if "declare" in query:
        headers.append((b"content-length", query["declare"].encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    f = open(path, "rb")
    if "bad" in query:
        message, pipe = _bad(query["bad"], f)
        try:
            await send(message)
        except (TypeError, ValueError, OSError) as err:
            await _send_error(send, err)
        finally:
            os.close(pipe)
            f.close()
        return
    parts = query.get("parts", "z").split(",")
    try:
        for i, part in enumerate(parts):
            more = i < len(parts) - 1
            kind, *args = part.split(":")
            if kind == "b":
                body = args[0].encode()
                await send({"type": "http.response.body", "body": body, "more_body": more})
                continue
            fd = os.dup(f.fileno()) if "fd" in query else None
            message = {"type": "http.response.zerocopysend", "file": f if fd is None else fd}
            if "seek" in query:
                f.seek(int(query["seek"]))
                if fd is not None:
                    os.lseek(fd, int(query["seek"]), os.SEEK_SET)
            elif args:
                message["offset"] = int(args[0])
                message["count"] = int(args[1])
            if more:
                message["more_body"] = True
            try:
                await send(message)
            finally:
                if fd is not None:
                    os.close(fd)
    except (TypeError, ValueError, RuntimeError) as err:
        await _send_error(send, err)
    finally:
        # The app keeps ownership and lets go at once: the core sends from its own duplicate.
        f.close()
    if "shrink_to" in query:
        os.truncate(path, int(query["shrink_to"]))
