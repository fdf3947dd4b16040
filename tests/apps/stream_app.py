"""Streaming routes for the pipelining tests."""

import asyncio


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/events":
        # One event now, the next only much later: the first must not wait for the end.
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
        await asyncio.sleep(30)
        await send({"type": "http.response.body", "body": b"data: last\n\n"})
        return
    body = scope["path"].encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})
