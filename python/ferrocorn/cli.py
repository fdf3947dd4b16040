"""The ``ferrocorn`` command line, made from the option table (options/table.py).

Every option is also read from ``FERROCORN_<OPTION>`` (``--timeout-keep-alive`` from
``FERROCORN_TIMEOUT_KEEP_ALIVE``) and the app from ``FERROCORN_APP``, and from the TOML file
of ``--config`` (config_file.py); flags given on the command line win over the environment,
which wins over the file.  ``--help`` lists the options in the table's groups.
"""

from __future__ import annotations

import importlib
import platform
import sys
from importlib import metadata
from typing import Any

import click

from ._process_contract import EXIT_CONFIG_ERROR
from .config import Config, ConfigError
from .config_file import ConfigFileError, file_keys, read_config_file
from .options import OPTIONS, Option
from .options.spec import Choice, Many
from .path_policy import parse_policies

# How --help groups the options: (section title, parameter names), in the table's order.
# Anything else (APP, --version, --help) lands in "Other options".
_SECTIONS: dict[str, list[str]] = {}
for _spec in OPTIONS:
    _SECTIONS.setdefault(_spec.group, []).append(_spec.name)


class _SectionedCommand(click.Command):
    """A command whose ``--help`` lists options in titled sections."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records: dict[str, tuple[str, str]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.name is not None:
                records[param.name] = record
        for title, names in _SECTIONS.items():
            rows = [records.pop(name) for name in names if name in records]
            if rows:
                with formatter.section(f"{title} options"):
                    formatter.write_dl(rows)
        if records:
            with formatter.section("Other options"):
                formatter.write_dl(list(records.values()))


class _Seconds(click.ParamType):
    """A non-negative number of seconds, or ``none`` for no limit."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, (int, float)):
            return value
        if str(value).strip().lower() == "none":
            return None
        try:
            return float(value)
        except ValueError:
            self.fail(f"{value!r} is not a number of seconds or 'none'.", param, ctx)


def _check_path_policies(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A bad --path-policy ends the command here: one line, exit code 2 (a usage error)."""
    try:
        parse_policies(list(value))
    except ValueError as exc:
        click.echo(f"Error: Invalid --path-policy {exc}.", err=True)
        ctx.exit(2)
    return list(value)


def _click_type(spec: Option) -> Any:
    kind = spec.kind
    if isinstance(kind, Choice):
        return click.Choice(kind.choices, case_sensitive=kind.case_sensitive)
    if kind.cli == "float" and spec.optional:
        return _Seconds()
    return {
        "text": click.STRING,
        "int": click.INT,
        "int>=0": click.IntRange(min=0),
        "float": click.FLOAT,
        "file": click.Path(dir_okay=False),
        "dir": click.Path(file_okay=False),
        "existing-dir": click.Path(exists=True, file_okay=False),
    }[kind.cli]


def _click_option(spec: Option) -> click.Option:
    """The flag of one option: its type, default, variables and help as the table says;
    whole-number defaults of float options shown as int ones (``30``, not ``30.0``)."""
    decls = list(spec.long_flags)
    if spec.negative_flag is not None:
        decls = [f"{decls[0]}/{spec.negative_flag}"]
    kwargs: dict[str, Any] = {
        "help": spec.help,
        "envvar": list(spec.env_names),
        "show_envvar": True,
        "metavar": spec.metavar,
    }
    if spec.default_text is not None:
        kwargs["help"] += f" [default: {spec.default_text}]"
        kwargs["show_default"] = False
    if spec.kind.cli == "flag":
        kwargs.update(is_flag=True, default=spec.command_default)
    elif spec.kind.cli == "switch":
        kwargs["default"] = spec.command_default
    else:
        kwargs["type"] = _click_type(spec)
        if isinstance(spec.kind, Many):
            kwargs["multiple"] = True
        else:
            default = spec.command_default
            if isinstance(default, float) and default.is_integer():
                # The type converts it back to a float; only --help reads it as given.
                default = int(default)
            kwargs["default"] = default
    kwargs.update(_CLI_ONLY_BEHAVIOUR.get(spec.name, {}))
    return click.Option([*decls, spec.name], **kwargs)


def _version() -> str:
    try:
        return metadata.version("ferrocorn")
    except metadata.PackageNotFoundError:
        pass
    try:
        # Running from a source tree: the extension carries the crate's version.
        from ferrocorn._ferrocorn import __version__
    except ImportError:
        return "unknown"
    return __version__


def _load_config_file(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--config``: the file's values become the defaults the other parameters fall back to
    (click reads the command line, then the environment, then ``default_map``)."""
    if value is None or ctx.resilient_parsing:
        return
    try:
        values = read_config_file(value, file_keys(ctx.command.params), ctx)
    except ConfigFileError as exc:
        click.echo(f"Error: {exc}", err=True)
        ctx.exit(EXIT_CONFIG_ERROR)
    ctx.default_map = {**(ctx.default_map or {}), **values}


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(
        f"ferrocorn {_version()} ({platform.python_implementation()} "
        f"{platform.python_version()}) on {platform.system()}"
    )
    ctx.exit()


# What some flags do on the command line before Config sees them.
_CLI_ONLY_BEHAVIOUR: dict[str, dict[str, Any]] = {
    "config": {"is_eager": True, "expose_value": False, "callback": _load_config_file},
    "path_policy": {"callback": _check_path_policies},
}


def _params() -> list[click.Parameter]:
    version = click.Option(
        ["--version"],
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_print_version,
        help="Show the version and exit.",
    )
    app = click.Argument(["app"], envvar="FERROCORN_APP")
    return [app, *(_click_option(spec) for spec in OPTIONS), version]


@click.command(
    cls=_SectionedCommand,
    params=_params(),
    epilog=(
        "\b\nSignals:\n"
        "  SIGTERM, SIGINT  graceful shutdown: /readyz answers 503, --shutdown-delay passes,\n"
        "                   then no new connections, requests in flight finish within\n"
        "                   --timeout-graceful-shutdown; a second signal ends the delay, a\n"
        "                   further SIGINT quits at once\n"
        "  SIGHUP           with --workers > 1: replace the workers one at a time (each new one\n"
        "                   serves before the old one stops); one process with TLS: reload the\n"
        "                   certificate files\n"
        "  SIGTTIN/SIGTTOU  with --workers > 1: one worker more / fewer"
    ),
    context_settings={
        "auto_envvar_prefix": "FERROCORN",
        "help_option_names": ["-h", "--help"],
        "max_content_width": 100,
        "show_default": True,
    },
)
def main(app: str, **options: Any) -> None:
    """Serve the ASGI application APP, given as "module:attribute" (or FERROCORN_APP)."""
    # Parameter names are Config's keyword names.
    try:
        config = Config(app, **options)
    except ConfigError as exc:
        click.echo(f"Error: {str(exc).replace(chr(10), ' ')}", err=True)
        sys.exit(1)
    # Imported late: it loads the Rust core, which --help, --version and bad options don't need.
    server = importlib.import_module("ferrocorn.server")
    sys.exit(server.run_config(config))
