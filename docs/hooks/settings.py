"""mkdocs hook: the Settings page's option reference, made from the option table.

mkdocs.yml registers it (``hooks: [docs/hooks/settings.py]``); during ``mkdocs build`` it
replaces the line ``<!-- settings-table -->`` of docs/settings.md with
``ferrocorn.options.settings_markdown()``. The package is loaded from this source tree
without its compiled extension (and without ``ferrocorn/__init__.py``, which imports it):
``python/ferrocorn`` is mounted as a package of another name and only ``options`` is
imported from it, which needs nothing but the standard library.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from typing import Any

MARKER = "<!-- settings-table -->"
PAGE = "settings.md"
SOURCE = Path(__file__).resolve().parents[2] / "python" / "ferrocorn"
_ALIAS = "_ferrocorn_source"


def load_options() -> types.ModuleType:
    """``ferrocorn.options`` of this source tree, whatever is installed."""
    if _ALIAS not in sys.modules:
        package = types.ModuleType(_ALIAS)
        package.__path__ = [str(SOURCE)]
        sys.modules[_ALIAS] = package
    return importlib.import_module(_ALIAS + ".options")


def render(markdown: str) -> str:
    """``markdown`` with its marker line replaced by the settings reference."""
    lines = markdown.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == MARKER]
    if len(hits) != 1:
        raise ValueError(f"expected the line {MARKER} once in {PAGE}, found it {len(hits)} times")
    (index,) = hits
    lines[index] = load_options().settings_markdown() + "\n"
    return "".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    try:
        return render(markdown)
    except ValueError as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"docs/hooks/settings.py: {exc}") from exc
