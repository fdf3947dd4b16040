"""Every `--flag` the README and the docs pages name is a flag of `ferrocorn` (a renamed or
removed option must take its documentation with it). The migration page's tables name the
peers' flags in their own columns; only its ferrocorn column is checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ferrocorn.cli import main

ROOT = Path(__file__).resolve().parent.parent
FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")
# Flags of other commands that the pages show on purpose, by page.
FOREIGN = {
    "README.md": {"--http2"},  # uvicorn's, in the feature table's footnote
    "deployment.md": {"--no-cache-dir"},  # pip's, in the Dockerfile
    "pypy.md": {"--pypy"},  # benchmarks/run.py's
}
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def ferrocorn_flags() -> set[str]:
    flags = {"--help", "-h"}
    for param in main.params:
        flags.update(param.opts)
        flags.update(param.secondary_opts)
    return flags


def checked_text(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    if page.name != "migrating.md":
        return text
    lines = text.splitlines()
    # | peer flag | ferrocorn flag | notes |: keep the second cell of each table row.
    cells = [
        line.split("|")[2] for line in lines if line.startswith("|") and not line.startswith("|-")
    ]
    prose = [line for line in lines if not line.startswith(("|", "uvicorn ", "granian "))]
    return "\n".join(cells + prose)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_documented_flags_exist(page: Path) -> None:
    known = ferrocorn_flags() | FOREIGN.get(page.name, set())
    unknown = sorted(set(FLAG.findall(checked_text(page))) - known)
    assert not unknown, f"{page.name} names flags ferrocorn does not have: {unknown}"


def test_the_check_sees_flags() -> None:
    assert {"--port", "--no-access-log", "--static-path-dir-to-file"} <= ferrocorn_flags()
    assert "--no-such-flag" not in ferrocorn_flags()
    assert FLAG.findall("run `ferrocorn app:app --port 80 --no-access-log`") == [
        "--port",
        "--no-access-log",
    ]
