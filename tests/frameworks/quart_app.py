"""Quart app for the framework matrix (routes: see _shared.py)."""

import hashlib

from quart import Quart, Response, jsonify, make_response, request, send_file, websocket

from tests.frameworks import _shared

NAME = "quart"

app = Quart(__name__)
app.config["MAX_CONTENT_LENGTH"] = 64 * 1024 * 1024


@app.before_serving
async def startup():
    app.config["STARTUP_VALUE"] = _shared.startup_value()


@app.after_serving
async def shutdown():
    _shared.record_shutdown(NAME)


@app.route("/file/<name>")
async def file(name):
    path = _shared.file_path(name)
    if path is None:
        return Response("no such file", status=404, mimetype="text/plain")
    return await send_file(path, mimetype="application/octet-stream")


@app.route("/plain")
async def plain():
    return Response(_shared.PLAIN_TEXT % NAME, mimetype="text/plain")


@app.route("/json")
async def json_route():
    return jsonify(_shared.json_doc(NAME))


@app.route("/echo", methods=["POST"])
async def echo():
    body = await request.get_data()
    return Response(
        body,
        mimetype="application/octet-stream",
        headers={"x-echo-sha256": hashlib.sha256(body).hexdigest()},
    )


@app.route("/stream")
async def stream():
    chunks = int(request.args.get("chunks", "4"))
    size = int(request.args.get("size", "1024"))
    return await make_response(
        _shared.stream_chunks(chunks, size), {"content-type": "application/octet-stream"}
    )


async def sse_events(n):
    for i in range(n):
        yield ("id: %d\nevent: tick\ndata: %s\n\n" % (i, _shared.sse_text(NAME, i))).encode()
        await _shared.anyio.sleep(_shared.SSE_INTERVAL)


@app.route("/sse")
async def sse():
    response = await make_response(
        sse_events(int(request.args.get("n", "100"))),
        {"content-type": "text/event-stream", "cache-control": "no-cache"},
    )
    response.timeout = None
    return response


@app.route("/state")
async def state():
    return Response(app.config["STARTUP_VALUE"], mimetype="text/plain")


@app.route("/error")
async def error():
    raise RuntimeError("quart app error route")


@app.route("/timeout")
async def timeout():
    status, text = await _shared.timeout_probe()
    return Response(text, status=status, mimetype="text/plain")


@app.route("/disconnect")
async def disconnect():
    response = await make_response(
        _shared.disconnect_stream(request.args["id"], NAME), {"content-type": "text/plain"}
    )
    response.timeout = None
    return response


@app.websocket("/ws")
async def ws_echo():
    """Echo text as text and bytes as bytes (websocket.receive() returns str or bytes).

    Quart does not hand the close to the handler: it cancels the handler task."""
    rid = websocket.args["id"]
    await websocket.accept()
    try:
        while True:
            await websocket.send(await websocket.receive())
    except BaseException as exc:
        _shared.record_ws_cancel(rid, exc)
        raise
