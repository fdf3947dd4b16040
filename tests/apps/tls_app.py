"""The basic test app plus ``/tls``, which reports ``scope["extensions"]["tls"]`` and the type
of each of its values (standard library only: runs under PyPy too)."""

import json

from tests.apps.basic import app as basic_app


async def app(scope, receive, send):
    if scope["type"] != "http" or scope["path"] != "/tls":
        await basic_app(scope, receive, send)
        return
    tls = (scope.get("extensions") or {}).get("tls")
    report = {
        "tls": tls,
        "types": {k: type(v).__name__ for k, v in tls.items()} if tls is not None else None,
        "scheme": scope["scheme"],
    }
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(report).encode()})
