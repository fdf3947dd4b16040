"""The docs' Settings page, made from the option table (docs/hooks/settings.py puts it in)."""

from __future__ import annotations

import json
import re
from typing import Any

from .spec import Many, Option
from .table import OPTIONS

__all__ = ["COLUMNS", "default_cell", "settings_markdown"]

COLUMNS = ("Option", "Environment", "File key", "Config", "Type", "Default", "Description")

_INTRO = """\
Every option is a command-line flag, an environment variable, a key of the TOML file given
with `--config`, and a keyword of `ferrocorn.Config(...)`. The command line wins over the
environment, which wins over the file. The application is the argument `APP`
(`FERROCORN_APP`, file key `app`), given as `module:attribute`.

A default in code font is the value itself, as the file would spell it; one in words is
worked out when the server starts, or means the option is off.
"""

# What Python-Markdown would read as markup inside a table cell (emphasis, code, links, the
# cell separator).
_SPECIAL = re.compile(r"([\\`*_\[\]|])")


def _text(value: str) -> str:
    return _SPECIAL.sub(r"\\\1", value).replace("<", "&lt;")


def _code(value: str) -> str:
    return "`" + value.replace("|", "\\|") + "`"


def default_cell(option: Option) -> str:
    """The Default cell: a TOML value in code font, ``none``, or the default in words."""
    if option.default_text is not None:
        return _text(option.default_text)
    return "none" if option.default is None else _code(_toml(option.default))


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # as --help shows it
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def _type_cell(option: Option) -> str:
    text = option.kind.describe()
    if option.optional and not isinstance(option.kind, Many):
        text += ", or none"
    return text


def _row(option: Option) -> str:
    flags = ", ".join(_code(flag) for flag in option.long_flags)
    if option.negative_flag is not None:
        flags += " / " + _code(option.negative_flag)
    cells = (
        flags,
        ", ".join(_code(name) for name in option.env_names),
        _code(option.file_key) if option.file_key else "—",
        "—" if option.cli_only else _code(option.name),
        _type_cell(option),
        default_cell(option),
        _text(option.help),
    )
    return "| " + " | ".join(cells) + " |"


def settings_markdown() -> str:
    """The Settings reference: an introduction, then one section per group, a table row
    per option (its flags, variables, file key, ``Config`` keyword, type, default, help)."""
    parts = [_INTRO]
    groups: dict[str, list[Option]] = {}
    for option in OPTIONS:
        groups.setdefault(option.group, []).append(option)
    for group, options in groups.items():
        parts.append(f"## {group}\n")
        parts.append("| " + " | ".join(COLUMNS) + " |")
        parts.append("|" + "---|" * len(COLUMNS))
        parts.extend(_row(option) for option in options)
        parts.append("")
    return "\n".join(parts)
