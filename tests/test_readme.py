"""The README and the docs pages stay user-facing: short, no commit hashes, no source paths,
no dead links. Pure file checks; the docs build itself (docs/build.sh) checks the site's own
links and anchors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_LIMIT = 12_000

# A commit hash as people paste them: 7 to 40 hex digits with at least one letter and one
# digit (a plain number such as 1048576 is not one), or, for the rare hash of digits only,
# one that follows a word that introduces a commit ("the run at 2546427").
HEX_HASH = re.compile(
    r"(?<![0-9A-Za-z_])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z_])"
)
DIGIT_HASH = re.compile(r"\b(?:at|build|commit|since|checkout|from|rev) ([0-9]{7,40})\b")


def commit_hashes(text: str) -> list[str]:
    found = [(m.start(), m.group()) for m in HEX_HASH.finditer(text)]
    found += [(m.start(1), m.group(1)) for m in DIGIT_HASH.finditer(text)]
    return [token for _, token in sorted(found)]


SOURCE_PATH = re.compile(r"(?<![\w./-])(?:src/|python/ferrocorn/)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SOURCE_BUILD = (
    "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/ferrocorn examples.hello:app"
)


def user_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def relative_links(path: Path) -> list[str]:
    targets = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor on the same page
        targets.append(target.split("#", 1)[0])
    return targets


def test_readme_is_short() -> None:
    size = len(README.read_text(encoding="utf-8"))
    assert size <= README_LIMIT, f"README.md has {size} characters, the limit is {README_LIMIT}"


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_commit_hashes_or_source_paths(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    hashes = commit_hashes(text)
    assert not hashes, f"{page.name} names commits: {hashes}"
    paths = [text[m.start() : m.start() + 40].split()[0] for m in SOURCE_PATH.finditer(text)]
    assert not paths, f"{page.name} names source paths: {paths}"


def test_readme_links_resolve() -> None:
    links = relative_links(README)
    docs_links = [link for link in links if link.startswith("docs/")]
    assert docs_links, "README.md links into no docs page"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_readme_keeps_the_source_build_command() -> None:
    assert SOURCE_BUILD in README.read_text(encoding="utf-8")


def test_settings_page_has_the_generated_table_marker() -> None:
    assert "<!-- settings-table -->" in (DOCS / "settings.md").read_text(encoding="utf-8")


def test_checks_catch_what_they_look_for() -> None:
    # The patterns themselves: a check that cannot fail proves nothing.
    assert commit_hashes("the run at 2546427, since bd19e84") == ["2546427", "bd19e84"]
    assert not commit_hashes("1048576 bytes, 0x0304, cafe, sha256, port 8000000")
    assert SOURCE_PATH.search("see src/relay.rs") and SOURCE_PATH.search("python/ferrocorn/x.py")
    assert not SOURCE_PATH.search("benchmarks/RESULTS.md, docs/src/x")
