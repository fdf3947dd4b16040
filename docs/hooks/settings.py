"""Placeholder for the Settings page's hook.

The real hook replaces the ``<!-- settings-table -->`` marker in settings.md with the option
reference generated from the option declarations; it arrives with the options-declared-once
work. Until then the page is left as written.
"""

from __future__ import annotations

from typing import Any


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return markdown
