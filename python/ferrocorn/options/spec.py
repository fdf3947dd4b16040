"""What an option is: its spec (``Option``), the kinds of value, and the checks ``Config`` runs.

Standard library only: the docs build loads this package without the compiled extension
(``docs/hooks/settings.py``), and the command line (``cli.py``) turns each kind into a click
type without this module knowing click.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Choice",
    "ConfigError",
    "Flag",
    "Int",
    "Kind",
    "Many",
    "Option",
    "Path",
    "Seconds",
    "Switch",
    "Text",
    "check_choice",
    "check_int",
    "check_seconds",
]


class ConfigError(Exception):
    """An invalid option, or an app / socket that cannot be set up; ``str()`` is one line."""


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        allowed = ", ".join(f'"{c}"' for c in choices)
        raise ConfigError(f"Invalid {name} {value!r}: expected one of {allowed}.")
    return str(value)


def check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"Invalid {name} {value!r}: expected an integer.")
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and <= {maximum}" if maximum is not None else ""
        raise ConfigError(f"Invalid {name} {value}: must be >= {minimum}{upper}.")
    return value


def check_seconds(name: str, value: Any, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(f"Invalid {name} {value!r}: expected a number of seconds.")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"Invalid {name} {value}: must be {'>=' if allow_zero else '>'} 0.")
    return float(value)


# --------------------------------------------------------------------------- kinds of value
#
# A kind checks a value given to ``Config`` and names, for cli.py, the click type of the flag
# (``cli``: "text", "int", "int>=0", "float", "seconds" (a number or "none"), "choice",
# "file", "dir", "existing-dir", "flag", "switch"); ``describe`` is the Settings page's type.


class Kind:
    cli = "text"
    annotation = "str"

    def check(self, name: str, value: Any) -> Any:
        return value

    def describe(self) -> str:
        return "text"


@dataclass(frozen=True)
class Text(Kind):
    """Taken as given (a check of the option's own may say more)."""

    description: str = "text"

    def describe(self) -> str:
        return self.description


@dataclass(frozen=True)
class Int(Kind):
    minimum: int
    maximum: int | None = None
    # "int>=0": click rejects a negative value itself (a usage error, exit code 2).
    cli: str = "int"
    annotation = "int"

    def check(self, name: str, value: Any) -> int:
        return check_int(name, value, self.minimum, self.maximum)

    def describe(self) -> str:
        if self.maximum is None:
            return f"integer ≥ {self.minimum}"
        return f"integer {self.minimum}–{self.maximum}"


@dataclass(frozen=True)
class Seconds(Kind):
    positive: bool = False
    # An optional one takes "none" on the command line too (cli.py).
    cli = "float"
    annotation = "float"

    def check(self, name: str, value: Any) -> float:
        return check_seconds(name, value, allow_zero=not self.positive)

    def describe(self) -> str:
        return "seconds > 0" if self.positive else "seconds ≥ 0"


@dataclass(frozen=True)
class Choice(Kind):
    choices: tuple[str, ...]
    # Maps accepted aliases (uvicorn's spellings, the ssl module's ints) onto the choices.
    normalize: Callable[[Any], Any] | None = None
    case_sensitive: bool = True
    cli = "choice"
    annotation = "str"

    def check(self, name: str, value: Any) -> str:
        if self.normalize is not None:
            value = self.normalize(value)
        return check_choice(name, value, self.choices)

    def describe(self) -> str:
        return "one of " + ", ".join(f"`{c}`" for c in self.choices)


class Switch(Kind):
    """``--x/--no-x``."""

    cli = "switch"
    annotation = "bool"

    def check(self, name: str, value: Any) -> bool:
        return bool(value)

    def describe(self) -> str:
        return "boolean"


class Flag(Switch):
    """``--x`` alone (off unless given)."""

    cli = "flag"


@dataclass(frozen=True)
class Path(Kind):
    # "file": not a directory; "dir": not a file; "existing-dir": also must exist.
    cli: str = "file"
    annotation = "str | os.PathLike[str]"

    def check(self, name: str, value: Any) -> str:
        return os.fspath(value)

    def describe(self) -> str:
        return "directory" if self.cli.endswith("dir") else "path"


@dataclass(frozen=True)
class Many(Kind):
    """A repeatable flag: a list (or one string) in Python and in the file."""

    item: str = "text"  # the click type of one value, as ``cli`` above
    annotation = "list[str] | str"

    @property
    def cli(self) -> str:  # type: ignore[override]
        return self.item

    def describe(self) -> str:
        return "list of " + ("directories" if self.item.endswith("dir") else "strings")


# --------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class Option:
    """One option: the ``Config`` keyword, the flag, its variable, its file key, its check."""

    name: str  # Config's keyword and attribute; click's parameter name
    group: str  # the --help section and the Settings page section
    kind: Kind
    default: Any
    help: str
    optional: bool = False  # None is accepted (and passed on as None, unchecked)
    # Replaces the kind's check (value in, value to store out); for the options whose
    # values need more than a range or a choice.
    check: Callable[[str, Any], Any] | None = None
    flags: tuple[str, ...] = ()  # default: ("--" + name with "-" for "_",)
    env: tuple[str, ...] = ()  # default: FERROCORN_ + the first flag's name
    metavar: str | None = None
    # The default in words, where the value alone would mislead (computed, or None meaning
    # something); the command's --help shows it as "[default: ...]".
    default_text: str | None = None
    # The command's own default, where it differs from Config's (--log-level: None, so that
    # a --log-config file keeps its levels).
    cli_default: Any = field(default=..., repr=False)
    cli_only: bool = False  # not a Config keyword (--config)
    annotation: str | None = None  # Config's type hint; default from the kind

    @property
    def long_flags(self) -> tuple[str, ...]:
        return self.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def negative_flag(self) -> str | None:
        """``--no-x`` of a switch."""
        return "--no-" + self.long_flags[0][2:] if self.kind.cli == "switch" else None

    @property
    def env_names(self) -> tuple[str, ...]:
        return self.env or ("FERROCORN_" + self.long_flags[0][2:].upper().replace("-", "_"),)

    @property
    def file_key(self) -> str | None:
        """The key in a ``--config`` TOML file: the first long flag without ``--``."""
        return None if self.cli_only else self.long_flags[0][2:]

    @property
    def command_default(self) -> Any:
        return self.default if self.cli_default is ... else self.cli_default

    @property
    def type_hint(self) -> str:
        hint = self.annotation or self.kind.annotation
        return f"{hint} | None" if self.optional and self.annotation is None else hint

    def checked(self, value: Any) -> Any:
        """``value`` as ``Config`` stores it; ConfigError says why it cannot be."""
        if self.check is not None:
            return self.check(self.name, value)
        if value is None and self.optional:
            return None
        return self.kind.check(self.name, value)
