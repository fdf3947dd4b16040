"""The option table's products agree: ``--help``, ``Config``, the ``--config`` file's keys and
the docs' Settings page name the same options, with the same flags, variables, sections and
defaults. Each side is read from the running code (the command's help text and parameters,
``Config``'s signature and a default ``Config``, the file keys, the rendered page), so an
option declared in one place and not the other, or given two defaults, fails here.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
import textwrap
import types
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

try:
    import ferrocorn  # noqa: F401
except ImportError:  # the extension is not built: test_config_unit.py's stand-in
    from tests.test_config_unit import _stub_extension

    _stub_extension()

from click.testing import CliRunner  # noqa: E402
from ferrocorn import cli  # noqa: E402
from ferrocorn.config import Config, ConfigError  # noqa: E402
from ferrocorn.config_file import file_keys  # noqa: E402
from ferrocorn.options import settings_markdown  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = os.path.join(REPO_ROOT, "docs", "hooks", "settings.py")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


@pytest.fixture(autouse=True)
def _restore_logging() -> Any:
    """Config() configures the server's loggers: put them back."""
    import logging

    loggers = [logging.getLogger(n) for n in ("ferrocorn", "ferrocorn.error", "ferrocorn.access")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate, lg.disabled) for lg in loggers]
    yield
    for lg, handlers, level, propagate, disabled in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
        lg.disabled = disabled


# --------------------------------------------------------------------------- readers


def help_rows() -> dict[str, dict[str, Any]]:
    """``--help`` read back: {first flag: section, flags, variables, shown default, text}."""
    result = CliRunner().invoke(cli.main, ["--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    rows: dict[str, dict[str, Any]] = {}
    section = None
    current: dict[str, Any] | None = None
    for line in result.output.splitlines():
        heading = re.fullmatch(r"(\S.*) options:", line)
        if heading:
            section, current = heading.group(1), None
        elif re.match(r"  -", line):
            head, _, text = line.strip().partition("  ")
            flags = re.findall(r"--?[\w-]+", head)
            current = {"section": section, "flags": flags, "text": text.strip()}
            rows[flags[0]] = current
        elif current is not None and line.startswith("   "):
            current["text"] = (current["text"] + " " + line.strip()).strip()
    for row in rows.values():
        tail = re.search(r"\[env var: ([^;\]]+)(?:; default: (.*?))?\]$", row["text"])
        row["env"] = tail.group(1).split(", ") if tail else []
        default = tail.group(2) if tail else None
        # An IntRange's bounds follow its default ("86400; x>=0").
        row["default"] = default and re.sub(r"; x>=\S+$", "", default)
    return rows


def page_rows() -> dict[str, dict[str, Any]]:
    """The Settings page read back: {first flag: section and each column's cell}."""
    rows: dict[str, dict[str, Any]] = {}
    section = None
    columns: list[str] = []
    for line in settings_markdown().splitlines():
        if line.startswith("## "):
            section = line[3:]
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in _CELL_SPLIT.split(line)[1:-1]]
            if cells[0] == "Option":
                columns = cells
                continue
            row = dict(zip(columns, cells))
            row["section"] = section
            row["flags"] = re.findall(r"`(--[\w-]+)`", row["Option"])
            row["env"] = re.findall(r"`(\w+)`", row["Environment"])
            rows[row["flags"][0]] = row
    return rows


def code_value(cell: str) -> Any:
    """A Default cell in code font as the TOML value it spells; None for other cells."""
    match = re.fullmatch(r"`(.*)`", cell)
    if match is None:
        return None
    return tomllib.loads("value = " + match.group(1).replace("\\|", "|"))["value"]


def unescape(cell: str) -> str:
    return re.sub(r"\\(.)", r"\1", cell).replace("&lt;", "<")


# --------------------------------------------------------------------------- agreement


def test_every_flag_is_in_help_and_on_the_page_in_the_same_section() -> None:
    helped, paged = help_rows(), page_rows()
    own = {"--version", "-h"}
    assert set(helped) - own == set(paged), "flags in --help but not on the page, or back"
    for first, row in paged.items():
        shown = helped[first]
        assert shown["flags"] == row["flags"], first
        assert shown["section"] == row["section"], first
        assert shown["env"] == row["env"], first
        assert unescape(row["Description"]) in shown["text"], first
    # Nothing drifts into "Other options" but the command's own flags.
    others = {first for first, row in helped.items() if row["section"] == "Other"}
    assert others == own


def test_every_parameter_of_the_command_is_on_the_page() -> None:
    paged = page_rows()
    options = [p for p in cli.main.params if p.param_type_name == "option"]
    flags = {p.opts[0] for p in options if p.expose_value or p.name == "config"}
    assert flags == set(paged)


def _command_config(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Config:
    """The Config the command builds from ``ferrocorn m:app`` alone (no server is run)."""
    configs: list[Config] = []
    try:
        server = importlib.import_module("ferrocorn.server")
    except ImportError:  # the extension is not built
        server = types.ModuleType("ferrocorn.server")
        monkeypatch.setitem(sys.modules, "ferrocorn.server", server)
    monkeypatch.setattr(server, "run_config", lambda c: configs.append(c) or 0, raising=False)
    for name in list(os.environ):
        if name.startswith("FERROCORN_") or name in ("FORWARDED_ALLOW_IPS", "WEB_CONCURRENCY"):
            monkeypatch.delenv(name)
    result = CliRunner().invoke(cli.main, ["m:app"], env=env)
    assert result.exit_code == 0, result.output
    (config,) = configs
    return config


def test_defaults_agree_between_config_the_command_help_and_the_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    helped, paged = help_rows(), page_rows()
    signature = inspect.signature(Config).parameters
    reference = Config("m:app")
    # What the command passes to Config when no flag, variable or file says otherwise.
    passed = _command_config(monkeypatch, {}).init_kwargs
    params = {p.name: p for p in cli.main.params}
    config_names = {row["Config"].strip("`") for row in paged.values() if row["Config"] != "—"}
    assert config_names == set(signature) - {"app"}
    for first, row in paged.items():
        cell, name = row["Default"], row["Config"].strip("`")
        value = code_value(cell)
        param = params[name if name != "—" else "config"]
        shown = helped[first]
        if value is not None:  # the value itself: every side has it
            if param.is_flag and param.secondary_opts:
                assert shown["default"] == (first if value else param.secondary_opts[0])[2:]
            elif not param.is_flag:
                assert shown["default"] == ('""' if value == "" else str(value)), first
            assert passed[name] == value, first
            assert signature[name].default == value, first
            assert getattr(reference, name) == value, first
        elif cell == "none":  # no value, and nothing shown in --help
            assert shown["default"] is None, first
            if name != "—":
                assert passed[name] in (None, (), []), first  # nothing given
                assert signature[name].default is None, first
        else:  # in words: --help says the same words where it shows the default
            assert f"[default: {unescape(cell)}]" in shown["text"], first
            assert shown["default"] is None, first


def test_file_keys_are_the_pages_and_reach_config() -> None:
    paged = page_rows()
    keys = file_keys(cli.main.params)
    page_keys = {
        row["File key"].strip("`"): row for row in paged.values() if row["File key"] != "—"
    }
    assert set(keys) - {"app"} == set(page_keys)
    for key, row in page_keys.items():
        assert keys[key].name == row["Config"].strip("`"), key


def test_signature_lists_the_options_as_keywords() -> None:
    parameters = list(inspect.signature(Config).parameters.values())
    assert parameters[0].name == "app"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters[1:])
    with pytest.raises(TypeError, match="unexpected keyword argument 'prot'"):
        Config("m:app", prot=8000)
    with pytest.raises(TypeError, match="'config'"):
        Config("m:app", config="x.toml")  # a flag of the command only
    with pytest.raises(ConfigError, match="Invalid port 70000"):
        Config("m:app", port=70000)


# --------------------------------------------------------------------------- the docs hook


def _run_hook(source: str) -> subprocess.CompletedProcess[str]:
    """Run ``source`` with the hook loaded from its file, in a fresh interpreter where
    ``import ferrocorn`` fails (as where the docs are built without the extension)."""
    prelude = textwrap.dedent(
        f"""
        import importlib.util, sys
        sys.modules["ferrocorn"] = None
        spec = importlib.util.spec_from_file_location("settings_hook", {HOOK!r})
        hook = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hook)
        """
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(source)],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(REPO_ROOT),
        timeout=60,
    )


def test_hook_puts_the_reference_in_place_of_the_marker_without_the_extension() -> None:
    proc = _run_hook(
        """
        import types
        page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="settings.md"))
        text = "# Settings\\n\\nBefore.\\n\\n<!-- settings-table -->\\n\\nAfter.\\n"
        print(hook.on_page_markdown(text, page=page, config=None, files=None))
        other = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="index.md"))
        assert hook.on_page_markdown(text, page=other, config=None, files=None) == text
        try:
            hook.render("# Settings without the marker\\n")
        except ValueError as exc:
            print("refused:", exc)
        """
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "<!-- settings-table -->" not in out.split("refused:")[0]
    assert out.startswith("# Settings\n\nBefore.\n\n")
    assert "\n\nAfter.\n" in out
    assert settings_markdown() in out  # the same text the package renders
    assert "refused: expected the line <!-- settings-table --> once" in out
