"""The task wrapper each HTTP request runs in (DESIGN.md, hot path point 4).

It awaits the app and reports the outcome straight to the request's protocol object: no
``add_done_callback``, no second future. Kept tiny: it runs once per request.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

error_logger = logging.getLogger("ferrocorn.error")
access_logger = logging.getLogger("ferrocorn.access")

_CancelledError = asyncio.CancelledError


async def run_asgi(app: Any, scope: dict, proto: Any) -> None:
    try:
        await app(scope, proto.receive, proto.send)
    except _CancelledError:
        proto.fail(None)
    except BaseException as exc:
        if proto.fail(exc):
            error_logger.error("Exception in ASGI application", exc_info=exc)
    else:
        fault = proto.complete()
        if fault is not None:
            error_logger.error(fault)


async def run_asgi_with_access_log(app: Any, scope: dict, proto: Any) -> None:
    try:
        await app(scope, proto.receive, proto.send)
    except _CancelledError:
        proto.fail(None)
    except BaseException as exc:
        if proto.fail(exc):
            error_logger.error("Exception in ASGI application", exc_info=exc)
    else:
        fault = proto.complete()
        if fault is not None:
            error_logger.error(fault)
    client, method, path, version, status, _, _ = proto.access_info()
    access_logger.info('%s - "%s %s HTTP/%s" %d', client, method, path, version, status)
