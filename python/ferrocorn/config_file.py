"""``--config FILE``: the command's options from a TOML file.

Each key is an option's long name without the leading ``--`` (``timeout-keep-alive = 10``),
the app is ``app = "module:attr"``; flags take ``true``/``false`` (``access-log = false`` for
``--no-access-log``) and repeatable options an array of strings (``header = ["X-A:1"]``).  The
values become click's ``default_map``, so the command line and the ``FERROCORN_*`` variables
still win over the file.  An unknown key or a value of the wrong type stops the start-up with
one line naming the key.  TOML is read with ``tomllib`` (Python 3.11+) or ``tomli``.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable
from typing import Any

import click

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

__all__ = ["ConfigFileError", "file_keys", "read_config_file"]


class ConfigFileError(Exception):
    """The file cannot be read, is not TOML, or has a bad key; ``str()`` is one line."""


def file_keys(params: Iterable[click.Parameter]) -> dict[str, click.Parameter]:
    """The key of each parameter a file may set: the option's first long name without
    ``--`` (the positive one of a ``--x/--no-x`` flag), or the argument's name."""
    keys: dict[str, click.Parameter] = {}
    for param in params:
        if param.name is None or not param.expose_value:
            continue  # --version, --help, --config itself
        if isinstance(param, click.Argument):
            keys[param.name] = param
            continue
        long_names = [opt for opt in param.opts if opt.startswith("--")]
        if long_names:
            keys[long_names[0][2:]] = param
    return keys


def read_config_file(
    path: str, keys: dict[str, click.Parameter], ctx: click.Context
) -> dict[str, Any]:
    """The file's values by parameter name (click's ``default_map``), each checked."""
    try:
        with open(path, "rb") as file:
            table = tomllib.load(file)
    except OSError as exc:
        raise ConfigFileError(f'Could not read config file "{path}": {exc.strerror}.') from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        message = str(exc).replace("\n", " ")
        raise ConfigFileError(f'Config file "{path}" is not valid TOML: {message}.') from None
    values: dict[str, Any] = {}
    for key, value in table.items():
        param = keys.get(key)
        if param is None:
            raise ConfigFileError(f'Config file "{path}": unknown key "{key}"{_hint(key, keys)}.')
        try:
            values[str(param.name)] = _checked(param, value, ctx)
        except ValueError as exc:
            raise ConfigFileError(f'Config file "{path}": key "{key}": {exc}.') from None
    return values


def _hint(key: str, keys: dict[str, click.Parameter]) -> str:
    close = difflib.get_close_matches(key.replace("_", "-"), list(keys), n=1)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _checked(param: click.Parameter, value: Any, ctx: click.Context) -> Any:
    """``value`` if it suits ``param``, converted as click would; ValueError says why not."""
    if isinstance(param, click.Option) and param.multiple:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ValueError(f"expected an array of strings, got {_shown(value)}")
        return value
    if isinstance(param, click.Option) and param.is_bool_flag:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {_shown(value)}")
        return value
    kind = param.type
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected {_expected(kind)}, got {_shown(value)}")
    if isinstance(kind, (click.types.StringParamType, click.Path)) and not isinstance(value, str):
        raise ValueError(f"expected a string, got {_shown(value)}")
    if isinstance(kind, click.Choice):
        if isinstance(value, int):
            value = str(value)  # http = 2
        elif not isinstance(value, str):
            raise ValueError(f"expected {_expected(kind)}, got {_shown(value)}")
    if isinstance(kind, click.types.IntParamType) and not isinstance(value, int):
        raise ValueError(f"expected an integer, got {_shown(value)}")
    try:
        return kind.convert(value, param, ctx)
    except click.BadParameter as exc:
        raise ValueError(exc.message.rstrip(".")) from None


def _expected(kind: click.ParamType) -> str:
    if isinstance(kind, click.types.IntParamType):
        return "an integer"
    if isinstance(kind, click.types.FloatParamType):
        return "a number"
    if isinstance(kind, click.Choice):
        return "one of " + ", ".join(f'"{choice}"' for choice in kind.choices)
    if isinstance(kind, (click.types.StringParamType, click.Path)):
        return "a string"
    return f"a {kind.name}"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)
