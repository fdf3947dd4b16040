"""The runner each app call runs inside (ARCHITECTURE.md, hot path step 4).

It awaits the app and reports the outcome straight to the request's protocol object: no
``add_done_callback``, no second future. On CPython the default runner is ``_ferrocorn.AppRun``, a
Rust object the task steps like a coroutine; on PyPy, where every call into the extension
costs more than JIT-compiled Python, it is the ``async def`` below. Kept tiny: it runs once
per request.
"""

from __future__ import annotations

import asyncio
import collections.abc
import logging
import sys
from typing import Any

from ._ferrocorn import AppRun, HttpProtocol
from .accesslog import client_text
from .jsonlog import access_fields
from .path_policy import prefix_matches

error_logger = logging.getLogger("ferrocorn.error")
access_logger = logging.getLogger("ferrocorn.access")

_CancelledError = asyncio.CancelledError

# asyncio.Task accepts only what asyncio.iscoroutine() recognises.
collections.abc.Coroutine.register(AppRun)


if sys.implementation.name == "pypy":
    from ._pypy.http import http_receive, http_send


async def _run_asgi_py(app: Any, scope: dict, proto: Any) -> None:
    if type(proto) is HttpProtocol:
        receive, send = http_receive(proto), http_send(proto)
    else:
        receive, send = proto.receive, proto.send
    try:
        await app(scope, receive, send)
    except _CancelledError:
        proto.fail(None)
    except BaseException as exc:
        if proto.fail(exc):
            error_logger.error("Exception in ASGI application", exc_info=exc)
    else:
        fault = proto.complete()
        if fault is not None:
            error_logger.error(fault)


run_asgi: Any = _run_asgi_py if sys.implementation.name == "pypy" else AppRun


async def run_asgi_with_access_log(app: Any, scope: dict, proto: Any) -> None:
    await run_asgi(app, scope, proto)
    client, method, path, version, status, _, _ = proto.access_info()
    access_logger.info('%s - "%s %s HTTP/%s" %d', client, method, path, version, status)


# ---------------------------------------------------------------------------------------------
# Variants for optional features, built once at start-up by ``select_runner``.  The two
# functions above stay the paths of the default configurations.

_INFO = logging.INFO


def select_runner(
    app: Any,
    *,
    access_log: bool,
    log_format: Any = None,
    proxy: Any = None,
    metrics: Any = None,
    core_log: bool = False,
    timeout: float | None = None,
    json_access: bool = False,
    path_timeouts: list[tuple[bytes, float | None]] | None = None,
    root_path: str = "",
) -> tuple[Any, Any]:
    """The (app, runner) pair to hand the core, for the features that are on (each app call
    runs inside the runner).

    ``log_format``: a compiled ``AccessLogFormat`` or None for the default line; ``proxy``: a
    ``ProxyHeadersMiddleware`` around ``app`` or None; ``metrics``: a ``RequestMetrics`` or None;
    ``core_log``: the core writes the default access line itself (_access_fastpath.py), so
    the runner only has the proxy rewrite's client to tell it; ``timeout``: seconds after
    which an HTTP app call is cancelled (``--timeout-request``), wrapping the chosen runner;
    ``json_access``: ``--log-format json``, each access record carries jsonlog.py's fields
    (``extra={"access": ...}``) for the JSON formatter.
    ``path_timeouts``: (raw prefix, seconds or None) per ``--path-policy`` when one sets
    ``timeout`` (the first match overrides ``timeout``), ``root_path`` the prefix the core puts
    before ``raw_path`` (policies match the path as the client sent it).

    Proxy headers run in the middleware, except when an access line is written: then the
    runner rewrites the scope itself and calls the inner app, so the line shows the forwarded
    client without the incoming scope being mutated.
    """
    app, runner = _select(app, access_log, log_format, proxy, metrics, core_log, json_access)
    if path_timeouts is not None:
        runner = _with_path_timeouts(runner, timeout, path_timeouts, root_path.encode(), metrics)
    elif timeout is not None:
        runner = _with_request_timeout(runner, timeout, metrics)
    return app, runner


def _select(
    app: Any,
    access_log: bool,
    log_format: Any,
    proxy: Any,
    metrics: Any,
    core_log: bool,
    json_access: bool,
) -> tuple[Any, Any]:
    if core_log:
        if proxy is None:
            return app, run_asgi
        return app, _proxied_core_log_runner(proxy.rewrite)
    rewrite = None
    if proxy is not None:
        if access_log:
            rewrite = proxy.rewrite
        else:
            app = proxy
    if not access_log:
        log_format = None
        json_access = False
    if metrics is None and log_format is None and not json_access:
        if rewrite is not None:
            return app, _proxied_access_log_runner(rewrite)
        return app, run_asgi_with_access_log if access_log else run_asgi
    return app, _extended_runner(rewrite, access_log, log_format, metrics, json_access)


async def _rewrite_and_run(rewrite: Any, app: Any, scope: dict, proto: Any) -> dict:
    """Apply the proxy-headers rewrite, then run the app; returns the scope the app saw."""
    try:
        app_scope = rewrite(scope)
    except Exception as exc:
        if proto.fail(exc):
            error_logger.error("Exception in ASGI application", exc_info=exc)
        return scope
    await run_asgi(app, app_scope, proto)
    return app_scope


def _proxied_access_log_runner(rewrite: Any) -> Any:
    """Default access line + proxy headers (the default configuration)."""

    async def run_asgi_proxied_with_access_log(app: Any, scope: dict, proto: Any) -> None:
        app_scope = await _rewrite_and_run(rewrite, app, scope, proto)
        client, method, path, version, status, _, _ = proto.access_info()
        if app_scope is not scope:
            client = client_text(app_scope.get("client"))
        access_logger.info('%s - "%s %s HTTP/%s" %d', client, method, path, version, status)

    return run_asgi_proxied_with_access_log


def _with_request_timeout(runner: Any, seconds: float, metrics: Any = None) -> Any:
    """``--timeout-request``: an HTTP app call still running ``seconds`` after it started
    (its request had just arrived) is cancelled: ``CancelledError`` at the app's current
    await, so its ``finally`` blocks run. The core answers an unanswered request with 503 and
    ``Retry-After`` (``HttpProtocol.timed_out``), or aborts a started response. WebSocket
    sessions are long-lived by design and exempt."""
    current_task = asyncio.current_task

    async def run_with_timeout(app: Any, scope: dict, proto: Any) -> None:
        if scope["type"] != "http":
            await runner(app, scope, proto)
            return
        task = current_task()
        loop = asyncio.get_running_loop()
        handle = loop.call_later(seconds, _expire, task, proto, scope, seconds, metrics)
        try:
            await runner(app, scope, proto)
        finally:
            handle.cancel()

    return run_with_timeout


def _with_path_timeouts(
    runner: Any,
    default: float | None,
    table: list[tuple[bytes, float | None]],
    root: bytes,
    metrics: Any,
) -> Any:
    """``--path-policy ...:timeout=S``: the request timeout of the first policy whose prefix
    covers the request's raw path (path_policy.py), else ``default``. Each distinct timeout
    gets its runner once, here; per request this is one scan of the table."""
    timed: dict[float | None, Any] = {None: runner}
    for seconds in {default, *(t for _, t in table)}:
        if seconds is not None:
            timed[seconds] = _with_request_timeout(runner, seconds, metrics)
    choices = [(prefix, timed[seconds]) for prefix, seconds in table]
    fallback = timed[default]
    cut = len(root)

    async def run_by_path(app: Any, scope: dict, proto: Any) -> None:
        chosen = fallback
        raw = scope.get("raw_path")
        if raw is not None:
            if cut and raw.startswith(root):
                raw = raw[cut:]
            for prefix, candidate in choices:
                if prefix_matches(prefix, raw):
                    chosen = candidate
                    break
        await chosen(app, scope, proto)

    return run_by_path


def _expire(task: Any, proto: Any, scope: dict, seconds: float, metrics: Any) -> None:
    """The request's time is up while its app call still runs (the handle is cancelled
    when the call ends)."""
    proto.timed_out()
    if metrics is not None:
        metrics.timed_out += 1
    task.cancel()
    error_logger.warning(
        "Request timed out after %gs (--timeout-request); cancelled the app: %s %s",
        seconds,
        scope.get("method"),
        scope.get("path"),
    )


def _proxied_core_log_runner(rewrite: Any) -> Any:
    """Proxy headers while the core writes the access line: it names the forwarded client."""

    async def run_asgi_proxied(app: Any, scope: dict, proto: Any) -> None:
        try:
            app_scope = rewrite(scope)
        except Exception as exc:
            if proto.fail(exc):
                error_logger.error("Exception in ASGI application", exc_info=exc)
            return
        if app_scope is not scope:
            proto.set_access_client(client_text(app_scope.get("client")))
        await run_asgi(app, app_scope, proto)

    return run_asgi_proxied


def _extended_runner(
    rewrite: Any, access_log: bool, log_format: Any, metrics: Any, json_access: bool
) -> Any:
    """Metrics, a custom access-log format and/or JSON access records (with or without proxy
    headers)."""
    observe = metrics.observe if metrics is not None else None
    default_line = access_log and log_format is None
    is_enabled = access_logger.isEnabledFor

    async def run_asgi_extended(app: Any, scope: dict, proto: Any) -> None:
        if metrics is not None:  # WebSocket sessions are a gauge, not requests
            websocket = scope["type"] == "websocket"
            if websocket:
                metrics.websockets += 1
            else:
                metrics.started += 1
                metrics.observe_wait(proto.waited())
        if rewrite is None:
            app_scope = scope
            await run_asgi(app, scope, proto)
        else:
            app_scope = await _rewrite_and_run(rewrite, app, scope, proto)
        info = proto.access_info()
        if metrics is not None:
            if websocket:
                metrics.websockets -= 1
            else:
                observe(info[4], info[6])
        if json_access:
            if is_enabled(_INFO):
                client = info[0] if app_scope is scope else client_text(app_scope.get("client"))
                if log_format is not None:
                    message = log_format(app_scope, info)
                else:
                    message = f'{client} - "{info[1]} {info[2]} HTTP/{info[3]}" {info[4]}'
                fields = access_fields(app_scope, info, client)
                access_logger.info(message, extra={"access": fields})
        elif log_format is not None:
            if is_enabled(_INFO):
                access_logger.info(log_format(app_scope, info))
        elif default_line:
            client = info[0] if app_scope is scope else client_text(app_scope.get("client"))
            access_logger.info(
                '%s - "%s %s HTTP/%s" %d', client, info[1], info[2], info[3], info[4]
            )

    return run_asgi_extended
