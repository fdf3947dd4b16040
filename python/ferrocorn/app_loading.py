"""The app and its event loop: importing the app (``--factory``, ``--interface``, ASGI2 apps
adapted to ASGI3), the ``--env-file`` read before that, and the choice of uvloop or asyncio."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import io
import logging
import os
import platform
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from .importer import ImportFromStringError, import_from_string
from .options import ConfigError

__all__ = [
    "load_app",
    "load_env_file",
    "loop_factory",
    "module_installed",
    "uvloop_installed",
    "uvloop_module",
]

logger = logging.getLogger("ferrocorn.error")


# --------------------------------------------------------------------------- env files


def _parse_env(text: str) -> dict[str, str]:
    """A minimal ``.env`` reader, used when python-dotenv (full syntax) is not installed.

    Supports ``KEY=VALUE``, ``export KEY=VALUE``, ``#`` comments and single or double quotes.
    """
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        else:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


def load_env_file(path: str) -> None:
    """Put the ``KEY=VALUE`` lines of ``path`` into ``os.environ`` (the process's own
    variables win)."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f'Could not read env file "{path}": {exc}') from exc
    logger.info("Loading environment from '%s'", path)
    try:
        import dotenv
    except ImportError:
        # Like python-dotenv's default, the process environment wins over the file.
        for key, value in _parse_env(text).items():
            os.environ.setdefault(key, value)
    else:
        dotenv.load_dotenv(stream=io.StringIO(text))


# --------------------------------------------------------------------------- ASGI apps


class _ASGI2Adapter:
    """Runs an ASGI2 app (``app(scope)`` returns ``instance(receive, send)``) as ASGI3."""

    __slots__ = ("app",)

    def __init__(self, app: Callable[[dict[str, Any]], Any]) -> None:
        self.app = app

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        instance = self.app(scope)
        await instance(receive, send)


def _is_coroutine_function(obj: Any) -> bool:
    if inspect.iscoroutinefunction(obj):
        return True
    # Before 3.12 code marked "async" by hand (asgiref, AsyncMock) set asyncio's private
    # marker instead of the inspect flag; asyncio.iscoroutinefunction is deprecated in 3.14.
    marker = getattr(asyncio.coroutines, "_is_coroutine", None)
    return marker is not None and getattr(obj, "_is_coroutine", None) is marker


def _looks_like_asgi3(app: Any) -> bool:
    """uvicorn's rule: an awaitable class, a coroutine function or an async ``__call__``."""
    if inspect.isclass(app):
        return hasattr(app, "__await__")
    if _is_coroutine_function(app):
        return True
    # The call syntax looks ``__call__`` up on the type, so that is the one to inspect.
    return _is_coroutine_function(type(app).__call__)


def _accepts(app: Any, count: int) -> bool | None:
    """Whether ``app`` can be called with ``count`` positional args; None when unknowable."""
    try:
        signature = inspect.signature(app)
    except (TypeError, ValueError):  # some builtins and extension types have none
        return None
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True


def _shown(app: Any) -> str:
    return f'"{app}"' if isinstance(app, str) else repr(app)


def load_app(
    app: Any, factory: bool, interface: str, app_dir: str | None
) -> tuple[Callable[..., Awaitable[None]], str]:
    """Import (and with ``factory`` call) ``app``: (an ASGI3 callable, its ASGI version)."""
    name = _shown(app)
    if app_dir is not None and sys.path[:1] != [app_dir]:
        sys.path.insert(0, app_dir)

    if isinstance(app, str):
        try:
            app = import_from_string(app)
        except ImportFromStringError as exc:
            raise ConfigError(f"Error loading ASGI app. {exc}") from exc

    if factory:
        if not callable(app):
            raise ConfigError(f"Error loading ASGI app factory. {name} is not callable.")
        try:
            app = app()
        except Exception as exc:
            raise ConfigError(
                f"Error loading ASGI app factory. {name} raised {type(exc).__name__}: {exc}"
            ) from exc
        if inspect.iscoroutine(app):
            app.close()  # never awaited: close it to avoid a RuntimeWarning
            raise ConfigError(
                f"Error loading ASGI app factory. {name} is a coroutine "
                "function; the factory must return the app synchronously."
            )

    if not callable(app):
        raise ConfigError(f"Error loading ASGI app. {name} is not callable.")

    if interface == "auto":
        if _looks_like_asgi3(app):
            interface = "asgi3"
        elif _accepts(app, 1) is False and _accepts(app, 3) is True:
            # A plain function of (scope, receive, send) returning an awaitable (a
            # decorator without functools.wraps, say) cannot be ASGI2.
            interface = "asgi3"
        else:
            interface = "asgi2"
    arity = 3 if interface == "asgi3" else 1
    if _accepts(app, arity) is False:
        if _accepts(app, 0):
            hint = "it takes no arguments; if it is an application factory, use --factory"
        elif arity == 3:
            hint = "an ASGI3 app must accept (scope, receive, send)"
        else:
            hint = "an ASGI2 app must accept (scope)"
        raise ConfigError(f"Error loading ASGI app. {name}: {hint}.")

    if interface == "asgi2":
        return _ASGI2Adapter(app), "2.0"
    return app, "3.0"


# --------------------------------------------------------------------------- event loop


def uvloop_installed() -> bool:
    """Checked without importing it, so a bad --loop fails before anything starts."""
    try:
        return importlib.util.find_spec("uvloop") is not None
    except ValueError:  # already imported without a __spec__ (a stand-in module)
        return True


def module_installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ValueError:  # already imported without a __spec__
        return True


def uvloop_module(loop: str) -> Any:
    """The uvloop module when ``loop`` says to use it, else None."""
    if loop == "asyncio":
        return None
    if loop == "auto" and platform.python_implementation() != "CPython":
        return None  # uvloop targets CPython; on PyPy asyncio's loop is the safe choice
    try:
        import uvloop
    except ImportError as exc:
        if loop == "uvloop":
            raise ConfigError(f'loop="uvloop" requires uvloop: {exc}') from exc
        return None
    return uvloop


def loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """For ``asyncio.Runner(loop_factory=...)`` / ``asyncio.run(..., loop_factory=...)``."""
    uvloop = uvloop_module(loop)
    return uvloop.new_event_loop if uvloop is not None else asyncio.new_event_loop
